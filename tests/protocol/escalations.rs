//! An escalated call and a 2026-07-28 agent: the question comes back as an input-required
//! result whose retry decides; an agent that cannot answer gets a denial with the reason;
//! the Python SDK approves in both eras.

use serde_json::{json, Value};

use crate::common::{envelope, sdk_client};
use crate::support::raw::Serve;
use crate::support::{self, audit_records, palisade, Workspace};

/// A fixture: an fs-server whose every call escalates to the `elicit` approver.
fn escalating_fs(ws: &Workspace) -> (std::path::PathBuf, std::path::PathBuf) {
    let work = ws.canonical().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let policy = ws.path().join("policy.json");
    support::write_policy(
        &policy,
        json!([{"name": "ask", "description": "d", "principle": "test",
                "if": {"server": ["fs"]}, "then": "escalate", "reason": "a person decides"}]),
    );
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"],
                      "sandbox": {"filesystem": {"allowWrite": [&work]}}}}),
        json!({"policy": policy, "escalation": "elicit", "escalationTimeout": 10}),
    );
    (config, work)
}

fn eliciting_envelope() -> Value {
    let mut meta = envelope();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {"form": {}}});
    meta
}

/// A 2026-07-28 agent is asked through an input-required result (MRTR): the first round
/// forwards nothing and records nothing; the retry with the person's answer is decided,
/// forwarded and audited once. The answer is bound to the call that asked and used once.
#[test]
fn an_escalation_is_asked_of_a_2026_agent_by_input_required_and_its_retry_decides() {
    let ws = Workspace::new();
    let (config, work) = escalating_fs(&ws);
    std::fs::write(work.join("seen.txt"), "x").unwrap();
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let meta = eliciting_envelope();
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");

    let call = |extra: Value| {
        let mut p = json!({"name": "fs__list", "arguments": {"path": &work}, "_meta": meta});
        if let Value::Object(m) = extra {
            p.as_object_mut().unwrap().extend(m);
        }
        p
    };
    let asked = serve.request(2, "tools/call", call(json!({})));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let question = &result["inputRequests"]["palisade-approval"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("fs"),
        "{asked}"
    );
    let state = result["requestState"].as_str().unwrap().to_string();

    // The answer for another call (other arguments) is refused, and spends the state.
    let other = serve.request(
        3,
        "tools/call",
        json!({"name": "fs__list", "arguments": {"path": "/"}, "_meta": meta,
               "requestState": state,
               "inputResponses": {"palisade-approval": {"action": "accept", "content": {"approve": true}}}}),
    );
    assert_eq!(other["error"]["code"], -32602, "{other}");

    let asked = serve.request(4, "tools/call", call(json!({})));
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let approve = json!({"requestState": state,
        "inputResponses": {"palisade-approval": {"action": "accept", "content": {"approve": true}}}});
    let done = serve.request(5, "tools/call", call(approve.clone()));
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        support::raw::text_of(&done).contains("seen.txt"),
        "the approved call reached the server: {done}"
    );
    // The same answer again: the state was used.
    let replay = serve.request(6, "tools/call", call(approve));
    assert_eq!(replay["error"]["code"], -32602, "{replay}");

    // A declined answer denies the call.
    let asked = serve.request(7, "tools/call", call(json!({})));
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let declined = serve.request(
        8,
        "tools/call",
        call(json!({"requestState": state,
                    "inputResponses": {"palisade-approval": {"action": "decline"}}})),
    );
    assert_eq!(declined["result"]["isError"], true, "{declined}");

    let (status, _) = serve.finish();
    assert!(status.success());
    let records: Vec<Value> = audit_records(&ws)
        .into_iter()
        .filter(|r| r["toolName"] == "list")
        .collect();
    assert_eq!(
        records.len(),
        2,
        "one record per decided call, none for a question: {records:?}"
    );
    assert_eq!(records[0]["escalationResult"], "approved", "{records:?}");
    assert_eq!(records[0]["escalationDecidedBy"], "elicit", "{records:?}");
    assert_eq!(records[0]["result"]["status"], "success", "{records:?}");
    assert_eq!(records[1]["escalationResult"], "denied", "{records:?}");
}

/// A 2026-07-28 agent that did not declare elicitation is not asked: the escalation fails
/// closed, says why, and is audited as denied.
#[test]
fn an_escalation_a_2026_agent_cannot_answer_is_denied_with_the_reason() {
    let ws = Workspace::new();
    let (config, work) = escalating_fs(&ws);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let meta = envelope();
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let got = serve.request(
        2,
        "tools/call",
        json!({"name": "fs__list", "arguments": {"path": work}, "_meta": meta}),
    );
    let text = support::raw::text_of(&got);
    assert_eq!(got["result"]["isError"], true, "{got}");
    assert!(text.contains("did not declare elicitation"), "{got}");
    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let record = records
        .iter()
        .find(|r| r["toolName"] == "list")
        .unwrap_or_else(|| panic!("no record: {records:?}"));
    assert_eq!(record["escalationResult"], "denied", "{record}");
}

/// The proof: an escalation approved through elicitation by the Python SDK's own
/// client, once in each era. 2026-07-28: Palisade answers `input_required` and the SDK retries
/// with the person's answer (MRTR); 2025-11-25: Palisade sends `elicitation/create`. Either
/// way the person is asked once, the call reaches the server, and the record says who decided.
#[test]
fn the_python_sdk_approves_an_escalation_in_both_eras() {
    for mode in ["2026-07-28", "legacy"] {
        let ws = Workspace::new();
        let (config, work) = escalating_fs(&ws);
        std::fs::write(work.join("seen.txt"), "x").unwrap();
        let audit = ws.path().join("audit.jsonl");
        let args = json!({"path": &work}).to_string();
        let out = sdk_client(&ws, mode, "fs__list", &args, &config, &audit);
        assert_eq!(out["call"]["is_error"], false, "{mode}: {out}");
        assert!(
            out["call"]["text"].as_str().unwrap().contains("seen.txt"),
            "{mode}: {out}"
        );
        let asked = out["questions"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{mode}: asked once: {out}");
        assert!(
            asked[0].as_str().unwrap().contains("`list`"),
            "{mode}: {out}"
        );
        let records = support::read_jsonl(&audit);
        let record = records
            .iter()
            .find(|r| r["toolName"] == "list")
            .unwrap_or_else(|| panic!("{mode}: no record: {records:?}"));
        assert_eq!(
            records.len(),
            1,
            "{mode}: one record, none for the question: {records:?}"
        );
        assert_eq!(record["escalationResult"], "approved", "{mode}: {record}");
        assert_eq!(record["escalationDecidedBy"], "elicit", "{mode}: {record}");
        let agent = if mode == "legacy" { "2025-11-25" } else { mode };
        assert_eq!(record["protocol"]["agent"], agent, "{mode}: {record}");
    }
}
