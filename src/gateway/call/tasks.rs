//! Tasks (MCP 2025-11-25, as servers speak them today): the ids, the table and the
//! capability, as pure logic. The routing itself is in `task_relay.rs`.
//!
//! A task-augmented `tools/call` is policed, approved and audited like any call; what the
//! server answers is a task handle instead of a result. Its id is the server's; the agent
//! sees it namespaced like a tool name (`SERVER__ID`, or as it is when the server keeps its
//! own names), so two servers' ids cannot collide and every later `tasks/*` request routes
//! to the server that owns the task. Only tasks created through this gateway are known:
//! a `tasks/get` for any other id is refused (fail closed), and a server's `tasks/list`
//! shows the agent only the tasks it created here.
//!
//! Never: route a task request by anything but the table; audit a task's completion twice.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::gateway::stages::PolicyVerdict;

/// At most this many tasks are remembered; creation past it is refused once the finished
/// ones are forgotten (a session that creates tasks without end must not grow without end).
pub const MAX_TASKS: usize = 4096;

/// The `_meta` key a server uses to tie a message to a task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// One task created through the gateway.
#[derive(Debug, Clone)]
pub struct TaskEntry {
    /// Index of the owning server's slot.
    pub server: usize,
    /// The server's own id for it.
    pub inner: String,
    /// The tool it runs (the server's name for it) and the call's arguments, for the
    /// completion's audit record.
    pub tool: String,
    pub arguments: Map<String, Value>,
    /// The call's path arguments, resolved: what marks its result's sandbox refusals.
    pub paths: Vec<std::path::PathBuf>,
    /// The decision that let the call through, repeated in the completion's record.
    pub decided: PolicyVerdict,
    /// The creating call's request id.
    pub request_id: String,
    /// The agent that created it: only that agent's requests reach it (another session of
    /// the same principal is told the task is unknown). 2026-07-28 requests, which have no
    /// session, share their principal's.
    pub made_by: crate::gateway::agent::open_calls::Agent,
    pub created: Instant,
    /// When the server forgets it (its handle's `ttl`): past it the entry can go, audited
    /// or not, so a table of tasks nobody fetched does not stay full for ever.
    pub expires: Option<Instant>,
    /// The completion was audited (a result fetched, or a terminal status seen).
    pub audited: bool,
}

impl TaskEntry {
    /// Still worth a place in a full table.
    fn live(&self, now: Instant) -> bool {
        !self.audited && self.expires.is_none_or(|at| now < at)
    }
}

/// The tasks of this session, by the id the agent knows.
#[derive(Debug, Default)]
pub struct TaskTable {
    entries: Mutex<HashMap<String, TaskEntry>>,
}

/// Why a task could not be remembered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error(
        "too many tasks in this session ({MAX_TASKS} not yet finished); fetch or cancel some first"
    )]
    Full,
    #[error("task id `{0}` is already in use by another task; the server reused an id")]
    Duplicate(String),
}

impl TaskTable {
    /// Remembers a new task under `outer`.
    pub fn insert(&self, outer: String, entry: TaskEntry) -> Result<(), TaskError> {
        let mut map = self.lock();
        if map.contains_key(&outer) {
            return Err(TaskError::Duplicate(outer));
        }
        if !Self::room_in(&mut map) {
            return Err(TaskError::Full);
        }
        map.insert(outer, entry);
        Ok(())
    }

    /// Whether a new task could be remembered now: checked before a task-augmented call is
    /// forwarded, so that the server never starts a task nobody can reach.
    pub fn has_room(&self) -> bool {
        Self::room_in(&mut self.lock())
    }

    /// Room for one more, once audited and expired entries are forgotten (only when full).
    fn room_in(map: &mut HashMap<String, TaskEntry>) -> bool {
        if map.len() >= MAX_TASKS {
            let now = Instant::now();
            map.retain(|_, e| e.live(now));
        }
        map.len() < MAX_TASKS
    }

    /// Forgets every task of server `idx` (its process ended: it will not know them again)
    /// and returns those whose completion was not audited.
    pub fn take_server(&self, idx: usize) -> Vec<(String, TaskEntry)> {
        let mut map = self.lock();
        let ids: Vec<String> = map
            .iter()
            .filter(|(_, e)| e.server == idx)
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| map.remove(&id).map(|e| (id, e)))
            .filter(|(_, e)| !e.audited)
            .collect()
    }

    pub fn get(&self, outer: &str) -> Option<TaskEntry> {
        self.lock().get(outer).cloned()
    }

    pub fn contains(&self, outer: &str) -> bool {
        self.lock().contains_key(outer)
    }

    /// Writes the task's completion record with `write`, unless one was written: the task
    /// counts as audited only once `write` succeeds, so a failed write leaves it for the
    /// next request, which fails closed the same way or writes it. (Marked before the
    /// write, a retry after a failed write got the result with no record at all.) Under
    /// the table's lock, so two requests cannot both write it, nor one pass while the
    /// other's write is failing.
    pub fn audit_once<E>(
        &self,
        outer: &str,
        write: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        match self.lock().get_mut(outer) {
            Some(e) if !e.audited => {
                write()?;
                e.audited = true;
                Ok(())
            }
            Some(_) => Ok(()),
            // Taken since the request looked it up: its server ended meanwhile, and its
            // end's record says it was not fetched. This fetch's record says it was.
            None => write(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskEntry>> {
        // A panic while holding it cannot leave the map half-changed: every change is one
        // insert, retain or flag.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The id the agent sees for a server's task: `SERVER__ID`, or `ID` when the server keeps
/// its own names.
pub fn outer_id(server: &str, unprefixed: bool, inner: &str) -> String {
    if unprefixed {
        inner.to_string()
    } else {
        crate::gateway::registry::join_name(server, inner)
    }
}

/// Rewrites every task id in a task message in place: the `taskId` of a task object (at the
/// top, under `task`, in each of `tasks`) and of the related-task `_meta` entry. Ids that
/// `map` declines (`None`) are left as they are; returns how many were rewritten.
pub fn rewrite_ids(v: &mut Value, map: &mut dyn FnMut(&str) -> Option<String>) -> usize {
    let Value::Object(obj) = v else {
        return 0;
    };
    let mut n = rewrite_field(obj, map);
    if let Some(task) = obj.get_mut("task") {
        n += rewrite_object(task, map);
    }
    if let Some(Value::Array(tasks)) = obj.get_mut("tasks") {
        for t in tasks {
            n += rewrite_object(t, map);
        }
    }
    if let Some(Value::Object(meta)) = obj.get_mut("_meta") {
        if let Some(related) = meta.get_mut(RELATED_TASK) {
            n += rewrite_object(related, map);
        }
    }
    n
}

fn rewrite_object(v: &mut Value, map: &mut dyn FnMut(&str) -> Option<String>) -> usize {
    match v {
        Value::Object(obj) => rewrite_field(obj, map),
        _ => 0,
    }
}

fn rewrite_field(
    obj: &mut Map<String, Value>,
    map: &mut dyn FnMut(&str) -> Option<String>,
) -> usize {
    if let Some(Value::String(id)) = obj.get_mut("taskId") {
        if let Some(new) = map(id) {
            *id = new;
            return 1;
        }
    }
    0
}

/// The task id of a `tasks/*` request's params.
pub fn requested_id(params: &Map<String, Value>) -> Option<&str> {
    params.get("taskId").and_then(Value::as_str)
}

/// The status a task message reports (`working`, `input_required`, `completed`, `failed`,
/// `cancelled`), from a task object at the top or under `task`.
pub fn status_of(v: &Value) -> Option<&str> {
    v.get("status")
        .or_else(|| v.get("task").and_then(|t| t.get("status")))
        .and_then(Value::as_str)
}

/// Whether a status is final: the task will not change again.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// The `tasks` capability the gateway declares to the agent, from the servers' own
/// declarations (`None` when no server takes task-augmented tool calls): `requests.tools.call`
/// when any server takes them, `list` and `cancel` when any of those does.
pub fn aggregate_capability<'a>(servers: impl IntoIterator<Item = &'a Value>) -> Option<Value> {
    let mut calls = false;
    let mut list = false;
    let mut cancel = false;
    for caps in servers {
        calls |= caps.pointer("/requests/tools/call").is_some();
        list |= caps.get("list").is_some();
        cancel |= caps.get("cancel").is_some();
    }
    if !calls {
        return None;
    }
    let mut out = Map::new();
    if list {
        out.insert("list".into(), Value::Object(Map::new()));
    }
    if cancel {
        out.insert("cancel".into(), Value::Object(Map::new()));
    }
    out.insert(
        "requests".into(),
        serde_json::json!({"tools": {"call": {}}}),
    );
    Some(Value::Object(out))
}

/// Whether a server's `tasks` capability takes task-augmented `tools/call`.
pub fn takes_tool_tasks(caps: Option<&Value>) -> bool {
    caps.is_some_and(|c| c.pointer("/requests/tools/call").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> TaskEntry {
        TaskEntry {
            server: 0,
            inner: "abc".into(),
            tool: "slow".into(),
            arguments: Map::new(),
            paths: Vec::new(),
            decided: PolicyVerdict::allow("test"),
            request_id: "1".into(),
            made_by: crate::gateway::agent::open_calls::Agent::Stdio,
            created: Instant::now(),
            expires: None,
            audited: false,
        }
    }

    #[test]
    fn ids_are_namespaced_unless_the_server_keeps_its_names() {
        assert_eq!(outer_id("everything", false, "t-1"), "everything__t-1");
        assert_eq!(outer_id("everything", true, "t-1"), "t-1");
    }

    #[test]
    fn every_task_id_in_a_message_is_rewritten() {
        let mut v = json!({
            "taskId": "a",
            "task": {"taskId": "b", "status": "working"},
            "tasks": [{"taskId": "c"}, {"taskId": "d"}],
            "_meta": {RELATED_TASK: {"taskId": "e"}},
            "content": [{"type": "text", "text": "taskId"}]
        });
        let n = rewrite_ids(&mut v, &mut |id| Some(format!("s__{id}")));
        assert_eq!(n, 5);
        assert_eq!(v["taskId"], "s__a");
        assert_eq!(v["task"]["taskId"], "s__b");
        assert_eq!(v["tasks"][1]["taskId"], "s__d");
        assert_eq!(v["_meta"][RELATED_TASK]["taskId"], "s__e");
        assert_eq!(v["content"][0]["text"], "taskId");
    }

    #[test]
    fn a_declined_id_is_left_alone() {
        let mut v = json!({"tasks": [{"taskId": "mine"}, {"taskId": "other"}]});
        let n = rewrite_ids(&mut v, &mut |id| (id == "mine").then(|| "s__mine".into()));
        assert_eq!(n, 1);
        assert_eq!(v["tasks"][1]["taskId"], "other");
    }

    /// Writes through `audit_once`, counting the writes; `fail` makes the write fail.
    fn audit(t: &TaskTable, outer: &str, writes: &mut u32, fail: bool) -> Result<(), ()> {
        t.audit_once(outer, || {
            *writes += 1;
            if fail {
                Err(())
            } else {
                Ok(())
            }
        })
    }

    #[test]
    fn a_completion_is_audited_once() {
        let t = TaskTable::default();
        t.insert("s__abc".into(), entry()).unwrap();
        let mut writes = 0;
        assert_eq!(audit(&t, "s__abc", &mut writes, false), Ok(()));
        assert_eq!(audit(&t, "s__abc", &mut writes, false), Ok(()));
        assert_eq!(writes, 1);
        // One its server's end took meanwhile: this fetch's record is written too.
        assert_eq!(audit(&t, "s__taken", &mut writes, false), Ok(()));
        assert_eq!(writes, 2);
    }

    // Review of stop 43: the flag was set before the write, so a retry after a failed write
    // was let through with no record.
    #[test]
    fn a_failed_completion_record_is_written_by_the_next_request_not_skipped() {
        let t = TaskTable::default();
        t.insert("s__abc".into(), entry()).unwrap();
        let mut writes = 0;
        assert_eq!(audit(&t, "s__abc", &mut writes, true), Err(()));
        assert_eq!(audit(&t, "s__abc", &mut writes, true), Err(()));
        assert_eq!(audit(&t, "s__abc", &mut writes, false), Ok(()));
        assert_eq!(audit(&t, "s__abc", &mut writes, false), Ok(()));
        assert_eq!(writes, 3);
    }

    #[test]
    fn a_servers_end_forgets_its_tasks_and_returns_those_not_audited() {
        let t = TaskTable::default();
        t.insert("a__1".into(), entry()).unwrap();
        t.insert("a__2".into(), entry()).unwrap();
        t.insert(
            "b__1".into(),
            TaskEntry {
                server: 1,
                ..entry()
            },
        )
        .unwrap();
        assert_eq!(t.audit_once("a__2", || Ok::<(), ()>(())), Ok(()));
        let lost: Vec<String> = t.take_server(0).into_iter().map(|(id, _)| id).collect();
        assert_eq!(lost, ["a__1"]);
        assert!(!t.contains("a__2") && t.contains("b__1"));
    }

    #[test]
    fn a_reused_id_is_refused() {
        let t = TaskTable::default();
        t.insert("s__abc".into(), entry()).unwrap();
        assert_eq!(
            t.insert("s__abc".into(), entry()),
            Err(TaskError::Duplicate("s__abc".into()))
        );
    }

    #[test]
    fn a_full_table_forgets_finished_tasks_first() {
        let t = TaskTable::default();
        for i in 0..MAX_TASKS {
            t.insert(format!("s__{i}"), entry()).unwrap();
        }
        assert_eq!(t.insert("s__x".into(), entry()), Err(TaskError::Full));
        assert_eq!(t.audit_once("s__7", || Ok::<(), ()>(())), Ok(()));
        t.insert("s__x".into(), entry()).unwrap();
        assert!(!t.contains("s__7"));
        assert!(t.contains("s__8"));
    }

    // Review of stop 43: tasks finished at the server but never fetched filled the table
    // for good, and the call past it was forwarded (the server started a task) before the
    // table refused it.
    #[test]
    fn an_expired_task_makes_room_and_a_full_table_is_known_before_forwarding() {
        let t = TaskTable::default();
        let now = Instant::now();
        for i in 0..MAX_TASKS {
            let expires = (i == 9).then(|| now - std::time::Duration::from_secs(1));
            t.insert(format!("s__{i}"), TaskEntry { expires, ..entry() })
                .unwrap();
        }
        assert!(t.has_room(), "the expired task's place is free");
        assert!(!t.contains("s__9"));
        t.insert("s__x".into(), entry()).unwrap();
        assert!(!t.has_room());
        assert_eq!(t.insert("s__y".into(), entry()), Err(TaskError::Full));
    }

    #[test]
    fn status_is_read_at_the_top_or_under_task() {
        assert_eq!(status_of(&json!({"status": "failed"})), Some("failed"));
        assert_eq!(
            status_of(&json!({"task": {"status": "working"}})),
            Some("working")
        );
        assert!(is_terminal("cancelled") && !is_terminal("input_required"));
    }

    #[test]
    fn the_capability_is_declared_only_when_a_server_takes_tool_tasks() {
        let everything = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        let list_only = json!({"list": {}});
        assert_eq!(aggregate_capability([&list_only]), None);
        let caps = aggregate_capability([&list_only, &everything]).unwrap();
        assert_eq!(caps, everything);
        let bare = json!({"requests": {"tools": {"call": {}}}});
        assert_eq!(aggregate_capability([&bare]).unwrap(), bare);
        assert!(takes_tool_tasks(Some(&everything)));
        assert!(!takes_tool_tasks(Some(&list_only)));
        assert!(!takes_tool_tasks(None));
    }
}
