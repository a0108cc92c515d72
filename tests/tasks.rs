//! Tasks through the gateway (MCP 2025-11-25), against the real server-everything from npm:
//! its `simulate-research-query` requires a task (`execution.taskSupport: "required"`). A
//! raw line client plays the agent, so every assertion is about the JSON a client receives.
//!
//! Proven: the task-augmented call is policed and audited at creation, its id is namespaced,
//! `tasks/get`, `tasks/list` and `tasks/result` reach the server that owns the task, the
//! completion is audited with the task's final status, and requests for tasks not created
//! through the gateway are refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::raw::Serve;
use support::{audit_records, write_policy, Workspace};

const TOOL: &str = "everything__simulate-research-query";

/// Polls `tasks/get` until the task's status is final; bounded (a hang guard, not a timing
/// assertion: the task takes about four seconds).
fn wait_final(serve: &mut Serve, id: &mut u64, task: &str) -> Value {
    wait_final_with(serve, id, task, None)
}

/// As `wait_final`, each request carrying `meta` (a 2026-07-28 envelope) when given.
fn wait_final_with(serve: &mut Serve, id: &mut u64, task: &str, meta: Option<&Value>) -> Value {
    for _ in 0..240 {
        *id += 1;
        let mut params = json!({"taskId": task});
        if let Some(m) = meta {
            params["_meta"] = m.clone();
        }
        let got = serve.request(*id, "tasks/get", params);
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(got["result"]["taskId"], task, "{got}");
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    panic!("task {task} never finished");
}

/// The control of both task tests: a plain call to the task-only tool (no `task` field; with
/// `meta`, a 2026-07-28 envelope without the tasks extension) is refused by the server, so
/// the task each test then creates exists only because palisade carried the task request.
fn assert_plain_call_refused(serve: &mut Serve, id: u64, meta: Option<Value>) {
    let mut params = json!({"name": TOOL, "arguments": {"topic": "sandboxes"}});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let plain = serve.request(id, "tools/call", params);
    let refused = plain.get("error").is_some() || plain["result"]["isError"] == true;
    assert!(
        refused,
        "a plain call to a task-only tool must fail: {plain}"
    );
}

#[test]
fn a_tool_that_requires_a_task_works_through_palisade() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let init = serve.initialize();
    assert_eq!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "the gateway declares what its server offers: {init}"
    );

    // Control: without `task` the server refuses the call, so a gateway that dropped the
    // field (as it did before) could not create the task below.
    assert_plain_call_refused(&mut serve, 2, None);

    let created = serve.request(
        3,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "sandboxes"}, "task": {"ttl": 60000}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task handle: {created}"))
        .to_string();
    assert!(task.starts_with("everything__"), "namespaced id: {task}");

    let mut id = 10;
    let done = wait_final(&mut serve, &mut id, &task);
    assert_eq!(done["result"]["status"], "completed", "{done}");

    id += 1;
    let listed = serve.request(id, "tasks/list", json!({}));
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no task list: {listed}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert_eq!(ids, [task.as_str()], "{listed}");

    id += 1;
    let result = serve.request(id, "tasks/result", json!({"taskId": task}));
    let text = support::raw::text_of(&result);
    assert!(
        text.contains("Research Report: sandboxes"),
        "the server's own result: {result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task,
        "the related-task id is the one the agent knows: {result}"
    );

    // Only tasks created through the gateway are reachable: not the server's own id, not a
    // made-up one.
    let inner = task.trim_start_matches("everything__");
    for (n, other) in [inner, "everything__no-such-task"].into_iter().enumerate() {
        let got = serve.request(100 + n as u64, "tasks/get", json!({"taskId": other}));
        assert_eq!(got["error"]["code"], -32602, "{got}");
        assert!(
            got["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown task"),
            "{got}"
        );
    }

    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let creation = records
        .iter()
        .find(|r| r["toolName"] == "simulate-research-query" && r["taskId"] == task.as_str())
        .unwrap_or_else(|| panic!("no creation record: {records:?}"));
    assert!(creation.get("kind").is_none(), "{creation}");
    assert_eq!(creation["taskStatus"], "working", "{creation}");
    assert_eq!(creation["result"]["status"], "success", "{creation}");
    let completion = records
        .iter()
        .find(|r| r["kind"] == "tasks/result")
        .unwrap_or_else(|| panic!("no completion record: {records:?}"));
    assert_eq!(completion["taskId"], task.as_str(), "{completion}");
    assert_eq!(completion["taskStatus"], "completed", "{completion}");
    assert_eq!(
        completion["requestId"], creation["requestId"],
        "{completion}"
    );
    assert_eq!(
        completion["arguments"]["topic"], "sandboxes",
        "{completion}"
    );
    let completions = records
        .iter()
        .filter(|r| r["kind"] == "tasks/result")
        .count();
    assert_eq!(
        completions, 1,
        "one completion record per task: {records:?}"
    );
}

#[test]
fn a_denied_task_call_creates_no_task_and_is_audited() {
    let ws = Workspace::new();
    let policy = ws.path().join("policy.json");
    write_policy(
        &policy,
        json!([
            {"name": "no-research", "description": "d", "principle": "test",
             "if": {"server": ["everything"], "tool": ["simulate-research-query"]},
             "then": "deny", "reason": "research is not allowed here"},
            {"name": "rest", "description": "d", "principle": "test", "if": {}, "then": "allow",
             "reason": "everything else"}
        ]),
    );
    let config = ws.config(support::everything_servers(), json!({"policy": policy}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let got = serve.request(
        2,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "x"}, "task": {"ttl": 60000}}),
    );
    assert!(
        got["result"].get("task").is_none(),
        "no task may be created: {got}"
    );
    assert_eq!(got["result"]["isError"], true, "{got}");
    assert!(support::raw::text_of(&got).contains("DENIED"), "{got}");
    let listed = serve.request(3, "tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let denied = records
        .iter()
        .find(|r| r["toolName"] == "simulate-research-query")
        .unwrap_or_else(|| panic!("no record: {records:?}"));
    assert_eq!(denied["result"]["status"], "denied", "{denied}");
    assert!(denied.get("taskId").is_none(), "{denied}");
}

/// A 2026-07-28 request envelope; `extension` declares the tasks extension (SEP-2663).
fn envelope_2026(extension: bool) -> Value {
    let caps = if extension {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026-tasks", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps
    })
}

/// A 2026-07-28 agent with the tasks extension uses the task-only tool as that extension
/// says: it sends a plain call, gets `resultType: "task"`, polls `tasks/get` and finds the
/// result inline. Palisade bridges it to server-everything's 2025-11-25 tasks. The control is
/// the same call without the extension, which the server refuses.
#[test]
fn a_2026_agent_with_the_tasks_extension_runs_a_task_only_tool() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let meta = envelope_2026(true);

    let found = serve.request(1, "server/discover", json!({"_meta": meta}));
    assert_eq!(
        found["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "the extension is offered: {found}"
    );

    // Control: without the extension the call is a plain call, which the server refuses.
    assert_plain_call_refused(&mut serve, 2, Some(envelope_2026(false)));

    let created = serve.request(
        3,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "sandboxes"}, "_meta": meta}),
    );
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    assert_eq!(result["status"], "working", "{created}");
    assert!(result.get("task").is_none(), "the 2026 shape: {created}");
    assert!(result.get("ttlMs").is_some(), "{created}");
    let task = result["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id: {created}"))
        .to_string();
    assert!(task.starts_with("everything__"), "namespaced id: {task}");

    let mut id = 10;
    let done = wait_final_with(&mut serve, &mut id, &task, Some(&meta));
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("Research Report: sandboxes"),
        "the result inline: {done}"
    );

    let update = serve.request(
        500,
        "tasks/update",
        json!({"taskId": task, "inputResponses": {}, "_meta": meta}),
    );
    assert_eq!(update["error"]["code"], -32602, "{update}");

    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let creation = records
        .iter()
        .find(|r| r["toolName"] == "simulate-research-query" && r["taskId"] == task.as_str())
        .unwrap_or_else(|| panic!("no creation record: {records:?}"));
    assert_eq!(creation["taskStatus"], "working", "{creation}");
    assert_eq!(creation["protocol"]["agent"], "2026-07-28", "{creation}");
    let completions: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "tasks/result")
        .collect();
    assert_eq!(completions.len(), 1, "{records:?}");
    assert_eq!(completions[0]["taskStatus"], "completed");
}

/// Review of stop 43: a task whose server's process ended (here, palisade stopping while it
/// runs) left no completion record and stayed in the table. Its end is now audited once, as
/// `failed`, saying why; the control is the creation record, written as before.
#[test]
fn a_task_its_servers_end_takes_is_audited() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let got = serve.request(
        2,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "x"}, "task": {"ttl": 60000}}),
    );
    let task = got["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {got}"))
        .to_string();
    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let of_task: Vec<&Value> = records
        .iter()
        .filter(|r| r["taskId"] == task.as_str())
        .collect();
    assert_eq!(of_task.len(), 2, "creation and end: {records:?}");
    let end = of_task[1];
    assert_eq!(end["taskStatus"], "failed", "{end}");
    assert!(
        end["result"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("its servers were stopped")),
        "{end}"
    );
}

/// Review of stop 43: `tasks/list` read only each server's first page (server-everything
/// pages by 10), so the agent's eleventh and twelfth tasks were never listed.
#[test]
fn tasks_list_reads_every_page_of_the_server() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let mut made = Vec::new();
    for id in 0..12 {
        let got = serve.request(
            10 + id,
            "tools/call",
            json!({"name": TOOL, "arguments": {"topic": "x"}, "task": {"ttl": 60000}}),
        );
        made.push(
            got["result"]["task"]["taskId"]
                .as_str()
                .unwrap_or_else(|| panic!("no task: {got}"))
                .to_string(),
        );
    }
    let listed = serve.request(100, "tasks/list", json!({}));
    let (status, _) = serve.finish();
    assert!(status.success());
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no list: {listed}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    for task in &made {
        assert!(ids.contains(&task.as_str()), "{task} not listed: {listed}");
    }
}
