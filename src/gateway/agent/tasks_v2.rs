//! The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for an agent,
//! over the 2025-11-25 tasks its servers speak.
//!
//! In the extension the *server* decides that a call becomes a task, for a client whose
//! request envelope declares the extension: the call answers `resultType: "task"` with the
//! task's fields at the top level, and the client polls `tasks/get`, which carries the
//! result (or the error) inline once the task is done; `tasks/cancel` ends it;
//! `tasks/update` answers a task's input requests. In 2025-11-25 the *client* asks for a
//! task (`task` in the call's params), the handle nests the task under `task`, and the
//! result is fetched by `tasks/result`.
//!
//! The bridge: a call from an agent that declared the extension, to a tool whose
//! `execution.taskSupport` is `required`, is forwarded with `task` (policy, approval and audit
//! as for every call); the 2025-11-25 handle becomes a 2026-07-28 one; `tasks/get` is
//! answered from the server's `tasks/get`, with `tasks/result` fetched once the task is done.
//! Task ids are namespaced as for every task (`call/tasks.rs`). A tool whose task support is
//! only `optional` runs as a plain call (an immediate result is valid in both). Not bridged:
//! `tasks/update` (a 2025-11-25 task's server asks for input by requests of its own) and task
//! status notifications (2026-07-28 delivers them on `subscriptions/listen` streams).
//!
//! Pure: no I/O. The wiring is in `front/`.

use rmcp::model::RequestMetaObject;
use serde_json::{Map, Value};

/// The extension's identifier, in capabilities.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether the request's envelope declares the tasks extension among the agent's
/// capabilities.
pub fn declared(meta: &RequestMetaObject) -> bool {
    meta.get("io.modelcontextprotocol/clientCapabilities")
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object)
}

/// Whether a tool, as its server listed it, must run as a task.
pub fn required(tool: &Map<String, Value>) -> bool {
    tool.get("execution")
        .and_then(|e| e.get("taskSupport"))
        .and_then(Value::as_str)
        == Some("required")
}

/// The task fields of a 2025-11-25 task (`ttl`, `pollInterval`) under their 2026-07-28
/// names (`ttlMs`, `pollIntervalMs`); the rest as sent. A status 2026-07-28 gives a meaning
/// the bridge cannot fulfil (`input_required` needs input requests it cannot name) reads
/// `working`.
fn task_fields(v1: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in v1 {
        match k.as_str() {
            "ttl" => {
                out.insert("ttlMs".into(), v.clone());
            }
            "pollInterval" => {
                out.insert("pollIntervalMs".into(), v.clone());
            }
            "status" if v == "input_required" => {
                out.insert("status".into(), Value::String("working".into()));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    // `ttlMs` is required (null: kept as long as the server likes).
    out.entry("ttlMs").or_insert(Value::Null);
    out
}

/// A 2025-11-25 task handle (`{"task": {...}}`) as a 2026-07-28 create-task result; `None`
/// when the result is no handle.
pub fn created(handle: &Value) -> Option<Value> {
    let task = handle.get("task")?.as_object()?;
    let mut out = task_fields(task);
    out.insert("resultType".into(), Value::String("task".into()));
    if let Some(meta) = handle.get("_meta") {
        out.insert("_meta".into(), meta.clone());
    }
    Some(Value::Object(out))
}

/// A 2025-11-25 `tasks/get` answer as a 2026-07-28 detailed task (the result or error is
/// added by `finished`).
pub fn detailed(v1: &Value) -> Value {
    match v1.as_object() {
        Some(task) => Value::Object(task_fields(task)),
        None => Value::Object(Map::new()),
    }
}

/// The status a detailed task needs the result for.
pub fn needs_result(detailed: &Value) -> bool {
    matches!(
        detailed.get("status").and_then(Value::as_str),
        Some("completed" | "failed")
    )
}

/// Completes a detailed task with what `tasks/result` gave: the result of a completed task,
/// the error of a failed one (a result marked `isError` stays a completed task's result, as
/// it would be without a task).
pub fn finished(detailed: &mut Value, result: Result<Value, (i32, String)>) {
    let Some(obj) = detailed.as_object_mut() else {
        return;
    };
    match result {
        Ok(r) if obj.get("status").and_then(Value::as_str) == Some("completed") => {
            obj.insert("result".into(), r);
        }
        Ok(r) => {
            let text = r
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .unwrap_or("the task failed")
                .to_string();
            obj.insert(
                "error".into(),
                serde_json::json!({"code": -32603, "message": text}),
            );
        }
        Err((code, message)) => {
            obj.insert("status".into(), Value::String("failed".into()));
            obj.insert(
                "error".into(),
                serde_json::json!({"code": code, "message": message}),
            );
        }
    }
}

/// Adds the extension to capabilities (a `server/discover` answer's), keeping other
/// extensions.
pub fn declare(capabilities: &mut Map<String, Value>) {
    let entry = capabilities
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(ext) = entry {
        ext.insert(EXTENSION.into(), Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_extension_is_read_from_the_envelope() {
        let with: RequestMetaObject = serde_json::from_value(json!({
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}
        }))
        .unwrap();
        assert!(declared(&with));
        let without: RequestMetaObject = serde_json::from_value(json!({
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {}}
        }))
        .unwrap();
        assert!(!declared(&without));
    }

    #[test]
    fn only_a_required_task_is_made_a_task() {
        let tool = |support: &str| {
            json!({"name": "t", "execution": {"taskSupport": support}})
                .as_object()
                .unwrap()
                .clone()
        };
        assert!(required(&tool("required")));
        assert!(!required(&tool("optional")));
        assert!(!required(&Map::new()));
    }

    #[test]
    fn a_2025_handle_becomes_a_2026_task_result() {
        let v1 = json!({"task": {"taskId": "everything__7", "status": "working",
            "createdAt": "2026-11-26T09:00:00Z", "lastUpdatedAt": "2026-11-26T09:00:00Z",
            "ttl": 60000, "pollInterval": 1000}});
        let v2 = created(&v1).unwrap();
        assert_eq!(
            v2,
            json!({"taskId": "everything__7", "status": "working",
                "createdAt": "2026-11-26T09:00:00Z", "lastUpdatedAt": "2026-11-26T09:00:00Z",
                "ttlMs": 60000, "pollIntervalMs": 1000, "resultType": "task"})
        );
        assert!(created(&json!({"content": []})).is_none());
        let no_ttl = created(&json!({"task": {"taskId": "x", "status": "working"}})).unwrap();
        assert_eq!(no_ttl["ttlMs"], Value::Null);
    }

    #[test]
    fn a_done_task_carries_its_result_or_error_inline() {
        let mut done = detailed(&json!({"taskId": "a", "status": "completed"}));
        assert!(needs_result(&done));
        finished(
            &mut done,
            Ok(json!({"content": [{"type": "text", "text": "r"}]})),
        );
        assert_eq!(done["result"]["content"][0]["text"], "r");

        let mut failed = detailed(&json!({"taskId": "a", "status": "failed"}));
        finished(
            &mut failed,
            Ok(json!({"isError": true, "content": [{"type": "text", "text": "boom"}]})),
        );
        assert_eq!(failed["error"]["message"], "boom");

        let mut lost = detailed(&json!({"taskId": "a", "status": "completed"}));
        finished(&mut lost, Err((-32602, "gone".into())));
        assert_eq!(lost["status"], "failed");
        assert_eq!(lost["error"], json!({"code": -32602, "message": "gone"}));

        let working = detailed(&json!({"taskId": "a", "status": "input_required"}));
        assert_eq!(working["status"], "working");
        assert!(!needs_result(&working));
    }

    #[test]
    fn the_extension_is_declared_beside_others() {
        let mut caps = json!({"tools": {}, "extensions": {"other/x": {"a": 1}}})
            .as_object()
            .unwrap()
            .clone();
        declare(&mut caps);
        assert_eq!(caps["extensions"]["other/x"]["a"], 1);
        assert_eq!(caps["extensions"][EXTENSION], json!({}));
    }
}
