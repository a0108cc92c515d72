//! Tasks (MCP 2025-11-25) for an agent on a session over HTTP, against server-everything's
//! task-only `simulate-research-query`: the call's `task` reaches the server (rmcp's typed
//! requests dropped it, so the call ran plain and the server refused it), and `tasks/get`,
//! `tasks/list` and `tasks/result` reach the server that owns the task, as over stdio.

use super::client::*;
use super::*;

const TOOL: &str = "everything__simulate-research-query";

#[test]
fn a_sessions_task_augmented_call_over_http_runs_as_a_task() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(support::everything_servers(), json!({"auditLog": audit}));
    let front = Front::start(&ws, &config);
    let (session, init) = front.session_answer(json!({}));
    let request = |id: u64, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        front.post(Some(&session), &[], &body)
    };
    // The gateway says what its server offers, as over stdio (rmcp's typed capabilities
    // have no `tasks`).
    assert_eq!(
        init.json()["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "{init:?}"
    );
    // The control: without `task` the server refuses the call, so the task below exists
    // only because its `task` reached the server.
    let plain = request(
        2,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "sandboxes"}}),
    );
    let refused = plain.json().get("error").is_some() || plain.json()["result"]["isError"] == true;
    assert!(
        refused,
        "a plain call to a task-only tool must fail: {plain:?}"
    );

    let created = request(
        3,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "sandboxes"}, "task": {"ttl": 60000}}),
    );
    let task = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task handle: {created:?}"))
        .to_string();
    assert!(task.starts_with("everything__"), "namespaced id: {task}");

    let mut answers = vec![created];
    let mut id = 10;
    // A hang guard, not a timing assertion: the task takes about four seconds.
    let mut status = String::new();
    for _ in 0..240 {
        id += 1;
        let got = request(id, "tasks/get", json!({"taskId": task}));
        status = got.json()["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(got.json()["result"]["taskId"], task, "{got:?}");
        answers.push(got);
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert_eq!(status, "completed");
    let listed = request(id + 1, "tasks/list", json!({}));
    let result = request(id + 2, "tasks/result", json!({"taskId": task}));
    front.stop();
    let ids: Vec<String> = listed.json()["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no task list: {listed:?}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str().map(String::from))
        .collect();
    assert_eq!(ids, [task.as_str()], "{listed:?}");
    let text = result.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("Research Report: sandboxes"), "{result:?}");
    answers.extend([listed, result]);
    for a in &answers {
        assert!(a.fast(), "not answered by the fast path: {a:?}");
    }
    // Audited once at creation and once at completion, as over stdio.
    let records = support::read_jsonl(&audit);
    let of_task = |kind: Option<&str>| {
        records
            .iter()
            .filter(|r| {
                r["taskId"] == task.as_str() && r.get("kind").and_then(Value::as_str) == kind
            })
            .count()
    };
    assert_eq!(
        (of_task(None), of_task(Some("tasks/result"))),
        (1, 1),
        "{records:?}"
    );
}

// Review of stop 43: the task table is the principal's, and another session of the same
// principal could list, read and cancel a session's task. Session B is told the task is
// unknown and does not see it listed; session A, the control, gets it and lists it.
#[test]
fn another_session_of_the_principal_cannot_reach_a_sessions_task() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
    let front = Front::start(&ws, &config);
    let a = front.session(json!({}));
    let b = front.session(json!({}));
    let request = |session: &str, id: u64, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        front.post(Some(session), &[], &body).json()
    };
    let created = request(
        &a,
        3,
        "tools/call",
        json!({"name": TOOL, "arguments": {"topic": "sandboxes"}, "task": {"ttl": 60000}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task handle: {created}"))
        .to_string();
    let listed = |session: &str, id| {
        request(session, id, "tasks/list", json!({}))["result"]["tasks"]
            .as_array()
            .map(|t| t.iter().any(|t| t["taskId"] == task.as_str()))
    };
    let theirs = request(&b, 4, "tasks/get", json!({"taskId": task}));
    let cancel = request(&b, 5, "tasks/cancel", json!({"taskId": task}));
    let b_lists = listed(&b, 6);
    let mine = request(&a, 7, "tasks/get", json!({"taskId": task}));
    let a_lists = listed(&a, 8);
    front.stop();
    for refused in [&theirs, &cancel] {
        let text = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains("unknown task"), "{refused}");
    }
    assert_eq!(b_lists, Some(false), "session B listed A's task");
    assert_eq!(mine["result"]["taskId"], task.as_str(), "{mine}");
    assert_ne!(mine["result"]["status"], "cancelled", "{mine}");
    assert_eq!(a_lists, Some(true));
}
