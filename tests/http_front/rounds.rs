//! A call that goes back to the agent over HTTP, in both protocol eras: an escalation's
//! question (to the agent of the principal whose call it is), a server's sampling request,
//! and the tasks extension. Each test runs a Python SDK driver from tests/clients against the
//! front and reads its JSON report (`Front::report`).

use serde_json::{json, Value};

use crate::fixtures::{fast_calls, faulty_echo_escalated_to_elicit, tokens_file, ALICE, BOB};
use crate::front::Front;
use crate::support::{self, Workspace};

// `--escalation elicit` over HTTP: an escalated call's question goes to the agent of the
// principal whose call it is. Both agents are connected (Bob's last); Alice's agent approves
// every question, Bob's declines: Alice's call runs, Bob's is refused, and each agent was asked
// exactly once, about its own call. Fails if questions go to one process-wide link (no agent
// there: both refused) or to the latest agent (Bob would be asked about Alice's call).
#[test]
fn elicit_approvals_reach_the_agent_of_the_principal_whose_call_escalated() {
    let ws = Workspace::new();
    let (config, audit) = faulty_echo_escalated_to_elicit(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let (r, status, err) = front.report(&ws, "tests/clients/http_elicit.py", &[ALICE, BOB]);
    assert!(r.get("error").is_none(), "{r}\n{err}");
    assert_eq!(r["alice"]["call"]["text"], "echo: from alice", "{r}\n{err}");
    assert_eq!(r["alice"]["call"]["is_error"], false, "{r}");
    let bob_text = r["bob"]["call"]["text"].as_str().unwrap_or("");
    assert!(
        bob_text.contains("ESCALATION REQUIRED") && !bob_text.contains("from bob"),
        "{r}"
    );
    for who in ["alice", "bob"] {
        let asked = r[who]["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{who} was asked once: {r}");
    }
    let records = support::read_jsonl(&audit);
    let echo = |p: &str| {
        records
            .iter()
            .find(|rec| rec["principal"] == p && rec["toolName"] == "echo")
            .cloned()
            .unwrap_or_else(|| panic!("no record for {p}: {records:?}"))
    };
    assert_eq!(echo("alice")["escalationResult"], "approved", "{records:?}");
    assert_eq!(echo("bob")["escalationResult"], "denied", "{records:?}");
    for p in ["alice", "bob"] {
        assert_eq!(echo(p)["escalationDecidedBy"], "elicit", "{records:?}");
    }
    assert!(status.success(), "{status}\n{err}");
    // Both calls kept the fast path: each question went on its own call's stream.
    assert_eq!(fast_calls(&ws), 2, "calls served on the fast path");
}

// `--escalation elicit` over HTTP for a 2026-07-28 agent: no session, so the question comes
// back as an input-required result of the call, and the SDK's `Client` retries with the
// answer, as it does over stdio. The same agent in legacy mode is asked by a request on its
// call's own stream. Both calls run once approved; each is audited once, decided by elicit, naming
// the agent's version.
#[test]
fn a_2026_agent_over_http_approves_an_escalation_by_input_required_rounds() {
    for (mode, version) in [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")] {
        let ws = Workspace::new();
        let (config, audit) = faulty_echo_escalated_to_elicit(&ws);
        let tokens = tokens_file(&ws);
        let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
        let (r, status, err) = front.report(
            &ws,
            "tests/clients/http_eras.py",
            &[ALICE, mode, "faulty__echo", r#"{"text": "over http"}"#],
        );
        assert!(r.get("error").is_none(), "{mode}: {r}\n{err}");
        assert_eq!(r["call"]["text"], "echo: over http", "{mode}: {r}\n{err}");
        assert_eq!(
            r["questions"].as_array().unwrap().len(),
            1,
            "{mode}: asked once: {r}"
        );
        let records = support::read_jsonl(&audit);
        let echoes: Vec<&Value> = records
            .iter()
            .filter(|rec| rec["toolName"] == "echo")
            .collect();
        assert_eq!(echoes.len(), 1, "{mode}: one record: {records:?}");
        assert_eq!(echoes[0]["escalationResult"], "approved", "{mode}");
        assert_eq!(echoes[0]["escalationDecidedBy"], "elicit", "{mode}");
        assert_eq!(echoes[0]["protocol"]["agent"], version, "{mode}");
        assert!(status.success(), "{mode}: {status}\n{err}");
        // A 2026-07-28 call and its retry are answered by the fast path (the server's own
        // JSON); so is a legacy agent's call, its question put on the call's own stream.
        let expected = if mode == "legacy" { 1 } else { 2 };
        assert_eq!(
            fast_calls(&ws),
            expected,
            "{mode}: calls served on the fast path"
        );
    }
}

// A server's own sampling request during a 2026-07-28 call over HTTP reaches the agent as
// the call's next round (the SDK's callback answers, the retry carries it back), as over
// stdio; and for a legacy agent as a request on its call's own stream (the call kept the fast
// path: before, an agent that could be asked had its calls go through rmcp's typed path).
#[test]
fn a_servers_sampling_reaches_an_http_agent_in_both_eras() {
    for mode in ["2026-07-28", "legacy"] {
        let ws = Workspace::new();
        let audit = ws.path().join("audit.jsonl");
        let config = ws.config(
            json!({"everything": {"command": "node",
                                  "args": [support::node_server("server-everything"), "stdio"],
                                  "relay": {"sampling": true}}}),
            json!({"auditLog": audit, "http": {}}),
        );
        let tokens = tokens_file(&ws);
        let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
        let (r, status, err) = front.report(
            &ws,
            "tests/clients/http_eras.py",
            &[
                ALICE,
                mode,
                "everything__trigger-sampling-request",
                r#"{"prompt": "relay me", "maxTokens": 5}"#,
            ],
        );
        assert!(r.get("error").is_none(), "{mode}: {r}\n{err}");
        assert!(
            r["call"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("sampled-over-http"),
            "{mode}: the server got the agent's answer: {r}\n{err}"
        );
        let prompts = r["prompts"].as_array().unwrap();
        assert_eq!(prompts.len(), 1, "{mode}: {r}");
        assert!(
            support::relay_recorded(&audit, "sampling", "success"),
            "{mode}: {:?}",
            support::read_jsonl(&audit)
        );
        assert!(status.success(), "{mode}: {status}\n{err}");
        // The 2026-07-28 call and its retry; the legacy call.
        let expected = if mode == "legacy" { 1 } else { 2 };
        assert_eq!(
            fast_calls(&ws),
            expected,
            "{mode}: calls served on the fast path"
        );
    }
}

// The tasks extension (SEP-2663) over HTTP, for a raw 2026-07-28 agent: the task-only tool of
// server-everything, called plainly, is refused without the extension (the control) and
// becomes a task with it; `tasks/get` is polled to `completed` with the report inline;
// `tasks/update` is refused; one creation and one completion record are written.
#[test]
fn a_2026_agent_over_http_runs_a_task_only_tool_through_the_tasks_extension() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        support::everything_servers(),
        json!({"auditLog": audit, "http": {}}),
    );
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let (r, status, err) = front.report(
        &ws,
        "tests/clients/http_tasks.py",
        &[
            ALICE,
            "everything__simulate-research-query",
            r#"{"topic": "sandboxes"}"#,
        ],
    );
    assert!(r.get("error").is_none(), "{r}\n{err}");
    let plain = &r["plain"];
    assert!(
        plain.get("error").is_some() || plain["result"]["isError"] == true,
        "without the extension the server refuses the plain call: {r}"
    );
    let created = &r["created"]["result"];
    assert_eq!(created["resultType"], "task", "{r}\n{err}");
    let task = created["taskId"].as_str().unwrap_or_default();
    assert!(task.starts_with("everything__"), "{r}");
    let done = &r["done"]["result"];
    assert_eq!(done["status"], "completed", "{r}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Research Report: sandboxes"),
        "{r}"
    );
    assert!(r["update"].get("error").is_some(), "{r}");
    let records = support::read_jsonl(&audit);
    let created_records = records
        .iter()
        .filter(|rec| rec["taskId"] == task && rec.get("kind").is_none())
        .count();
    let completions = records
        .iter()
        .filter(|rec| rec["taskId"] == task && rec["kind"] == "tasks/result")
        .count();
    assert_eq!((created_records, completions), (1, 1), "{records:?}");
    assert!(status.success(), "{status}\n{err}");
}
