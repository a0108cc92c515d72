//! Protocol currency over stdio: a 2026-07-28 agent works with no handshake, a 2025-11-25
//! agent as before, and the gateway bridges both to its servers (spoken to in 2025-11-25).
//! Real clients: the Python `mcp` SDK 2.3 in each era, and a raw line client for what the
//! SDK would never send (an incomplete request envelope). Real server: server-everything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::raw::Serve;
use support::{audit_records, driver, node_server, palisade, report, serve_log_env, Workspace};

fn everything() -> Value {
    json!({"everything": {"command": "node", "args": [node_server("server-everything"), "stdio"]}})
}

/// The 2026-07-28 request envelope, in `_meta`.
fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn with_envelope(mut params: Value) -> Value {
    params["_meta"] = envelope();
    params
}

#[test]
fn a_2026_agent_needs_no_handshake() {
    let ws = Workspace::new();
    let config = ws.config(everything(), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);

    let found = serve.request(1, "server/discover", with_envelope(json!({})));
    let versions = found["result"]["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!("2026-07-28")), "{found}");
    assert!(versions.contains(&json!("2025-11-25")), "{found}");
    assert!(
        found["result"]["capabilities"]["tools"].is_object(),
        "{found}"
    );

    let listed = serve.request(2, "tools/list", with_envelope(json!({})));
    let result = &listed["result"];
    assert_eq!(result["resultType"], "complete", "{listed}");
    assert_eq!(
        result["ttlMs"], 0,
        "cache hints a 2026 list must carry: {listed}"
    );
    assert_eq!(result["cacheScope"], "private", "{listed}");
    let echo = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "everything__echo")
        .unwrap_or_else(|| panic!("no echo: {listed}"));
    assert!(echo["execution"].is_object(), "relayed as sent: {echo}");

    let called = serve.request(
        3,
        "tools/call",
        with_envelope(json!({"name": "everything__echo", "arguments": {"message": "hi"}})),
    );
    assert_eq!(support::raw::text_of(&called), "Echo: hi", "{called}");
    assert_eq!(called["result"]["resultType"], "complete", "{called}");

    // A 2026 request without its whole envelope is refused, naming what is missing, and
    // never reaches a server.
    let partial = serve.request(
        4,
        "tools/call",
        json!({"name": "everything__echo", "arguments": {"message": "unseen"},
               "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    assert_eq!(partial["error"]["code"], -32602, "{partial}");
    assert!(
        partial["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{partial}"
    );

    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let calls: Vec<&Value> = records.iter().filter(|r| r["toolName"] == "echo").collect();
    assert_eq!(
        calls.len(),
        1,
        "only the complete request was forwarded: {records:?}"
    );
    assert_eq!(
        calls[0]["protocol"],
        json!({"agent": "2026-07-28", "server": "2025-11-25"}),
        "the record names both versions: {}",
        calls[0]
    );
}

/// The Python SDK as an application uses it, once per era, through the same gateway config.
fn sdk(era: &str) -> (Value, Vec<Value>) {
    let ws = Workspace::new();
    let config = ws.config(everything(), json!({}));
    let mut cmd = driver("tests/clients/eras.py");
    cmd.args([
        era,
        "everything__echo",
        r#"{"message": "from python"}"#,
        "--",
    ])
    .arg(palisade())
    .args(["serve", "--config"])
    .arg(&config);
    serve_log_env(&mut cmd, &ws.errlog());
    let out = report(&mut cmd, era, &ws.errlog(), Some(Duration::from_secs(120)));
    (out, audit_records(&ws))
}

#[test]
fn the_python_sdk_works_in_both_eras() {
    for (era, version) in [("modern", "2026-07-28"), ("legacy", "2025-11-25")] {
        let (out, records) = sdk(era);
        assert_eq!(out["version"], version, "{era}: {out}");
        let tools = out["tools"].as_array().unwrap();
        assert!(tools.contains(&json!("everything__echo")), "{era}: {out}");
        assert_eq!(out["call"]["ok"], true, "{era}: {out}");
        assert_eq!(out["call"]["text"], "Echo: from python", "{era}: {out}");
        let record = records
            .iter()
            .find(|r| r["toolName"] == "echo")
            .unwrap_or_else(|| panic!("{era}: no record: {records:?}"));
        assert_eq!(
            record["protocol"],
            json!({"agent": version, "server": "2025-11-25"}),
            "{era}: {record}"
        );
    }
}

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

/// The issue's proof: an escalation approved through elicitation by the Python SDK's own
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

fn relaying_everything(ws: &Workspace) -> std::path::PathBuf {
    ws.config(
        json!({"everything": {"command": "node", "args": [node_server("server-everything"), "stdio"],
                              "relay": {"sampling": true, "elicitation": true}}}),
        json!({}),
    )
}

/// A server's own sampling request during a 2026-07-28 call reaches the agent as an input
/// request of that call (MRTR): the server's call stays open across the round, and the
/// retry's answer is the server's sampling result. A retry for another call is refused.
#[test]
fn a_servers_sampling_reaches_a_2026_agent_in_its_calls_next_round() {
    let ws = Workspace::new();
    let config = relaying_everything(&ws);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let mut meta = envelope();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"sampling": {}});
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let call = json!({"name": "everything__trigger-sampling-request",
                      "arguments": {"prompt": "relay me", "maxTokens": 5}, "_meta": meta});
    let asked = serve.request(2, "tools/call", call.clone());
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let request = &result["inputRequests"]["palisade-relay"];
    assert_eq!(request["method"], "sampling/createMessage", "{asked}");
    assert!(
        request.to_string().contains("relay me"),
        "the server's own prompt: {asked}"
    );
    let state = result["requestState"].as_str().unwrap().to_string();

    let mut retry = call.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] = json!({"palisade-relay": {
        "role": "assistant", "model": "canned",
        "content": {"type": "text", "text": "sampled-by-the-raw-agent"}}});
    let done = serve.request(3, "tools/call", retry.clone());
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        support::raw::text_of(&done).contains("sampled-by-the-raw-agent"),
        "the server got the agent's answer: {done}"
    );
    let replay = serve.request(4, "tools/call", retry);
    assert_eq!(replay["error"]["code"], -32602, "used once: {replay}");

    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let sampled = records
        .iter()
        .find(|r| r["kind"] == "sampling")
        .unwrap_or_else(|| panic!("no sampling record: {records:?}"));
    assert_eq!(sampled["result"]["status"], "success", "{sampled}");
    let calls = records
        .iter()
        .filter(|r| r["toolName"] == "trigger-sampling-request")
        .count();
    assert_eq!(
        calls, 1,
        "the call is audited once, at its end: {records:?}"
    );
}

/// The same through the Python SDK's `Client` in each era: its sampling callback answers,
/// by the retry in 2026-07-28 and by a request in 2025-11-25.
#[test]
fn the_python_sdk_answers_a_servers_sampling_in_both_eras() {
    for mode in ["2026-07-28", "legacy"] {
        let ws = Workspace::new();
        let config = relaying_everything(&ws);
        let audit = ws.path().join("audit.jsonl");
        let tool = "everything__trigger-sampling-request";
        let args = r#"{"prompt": "relay me", "maxTokens": 5}"#;
        let out = sdk_client(&ws, mode, tool, args, &config, &audit);
        assert_eq!(out["call"]["is_error"], false, "{mode}: {out}");
        assert!(
            out["call"]["text"]
                .as_str()
                .unwrap()
                .contains("sampled-by-the-python-agent"),
            "{mode}: {out}"
        );
        let prompts = out["prompts"].as_array().unwrap();
        assert_eq!(prompts.len(), 1, "{mode}: {out}");
        assert!(
            prompts[0].as_str().unwrap().contains("relay me"),
            "{mode}: {out}"
        );
        let records = support::read_jsonl(&audit);
        assert!(
            records
                .iter()
                .any(|r| r["kind"] == "sampling" && r["result"]["status"] == "success"),
            "{mode}: {records:?}"
        );
    }
}

/// A server's elicitation during a 2026-07-28 call takes the same road as its sampling: the
/// form (attributed to the server) is the next round's input request, and the agent's answer
/// is what the server receives.
#[test]
fn a_servers_elicitation_reaches_a_2026_agent_in_its_calls_next_round() {
    let ws = Workspace::new();
    let config = relaying_everything(&ws);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let mut meta = envelope();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {"form": {}}});
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let call = json!({"name": "everything__trigger-elicitation-request", "arguments": {},
                      "_meta": meta});
    let asked = serve.request(2, "tools/call", call.clone());
    let request = &asked["result"]["inputRequests"]["palisade-relay"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert!(
        request["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("everything"),
        "the form names the server that asks: {asked}"
    );
    let mut retry = call;
    retry["requestState"] = asked["result"]["requestState"].clone();
    retry["inputResponses"] =
        json!({"palisade-relay": {"action": "accept", "content": {"name": "Ada from the agent"}}});
    let done = serve.request(3, "tools/call", retry);
    assert!(
        support::raw::text_of(&done).contains("User provided the requested information"),
        "{done}"
    );
    assert!(done.to_string().contains("Ada from the agent"), "{done}");
    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "elicitation" && r["result"]["status"] == "success"),
        "{records:?}"
    );
}

/// The Python SDK's high-level `Client` (tests/clients/approve_eras.py) in `mode`, calling
/// `tool` through `palisade serve --config CONFIG`, approving what it is asked and answering
/// sampling; its report. The SDK's `Client` keeps the server's stderr, so the audit records
/// go to the file `audit`.
fn sdk_client(
    ws: &Workspace,
    mode: &str,
    tool: &str,
    args: &str,
    config: &std::path::Path,
    audit: &std::path::Path,
) -> Value {
    let mut cmd = driver("tests/clients/approve_eras.py");
    cmd.args([mode, tool, args, "--"])
        .arg(palisade())
        .args(["serve", "--config"])
        .arg(config)
        .arg("--audit-log")
        .arg(audit);
    serve_log_env(&mut cmd, &ws.errlog());
    report(&mut cmd, mode, &ws.errlog(), Some(Duration::from_secs(120)))
}

/// tests/servers/modern_server.py (Python SDK 2.3, both eras), with `extra` keys.
fn modern_server(extra: Value) -> Value {
    let mut v = json!({"command": support::python(),
                       "args": [support::repo("tests/servers/modern_server.py")]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The roots a tool reported, one `file://` URI per line, as a sorted list.
fn uris(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Downstream: a server that speaks 2026-07-28 is spoken to in it, with no handshake, and
/// asks Palisade for its roots inside the call (an input request answered from the server's
/// own root set, the same set a 2025-11-25 server gets by `roots/list`). A 2025-11-25 agent
/// is bridged to it. The pinned server beside it shows the pin and is the control.
#[test]
fn a_2026_server_is_spoken_to_without_a_handshake_and_asks_for_palisades_roots() {
    let ws = Workspace::new();
    let config = ws.config(
        json!({
            "modern": modern_server(json!({})),
            "pinned": modern_server(json!({"protocol": "2025-11-25"})),
            "legacy": {"command": support::python(),
                       "args": [support::repo("tests/servers/roots_probe.py")],
                       "protocol": "2025-11-25"}
        }),
        json!({}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let era = support::raw::text_of(&serve.call(2, "modern__era", json!({})));
    assert_eq!(
        era, "2026-07-28 palisade",
        "spoken to in 2026-07-28 by palisade"
    );
    let pinned = support::raw::text_of(&serve.call(3, "pinned__era", json!({})));
    assert!(pinned.starts_with("2025-11-25"), "the pin holds: {pinned}");

    let modern_roots = uris(&support::raw::text_of(&serve.call(
        4,
        "modern__where",
        json!({}),
    )));
    let legacy_roots = uris(&support::raw::text_of(&serve.call(
        5,
        "legacy__announced",
        json!({}),
    )));
    assert!(!modern_roots.is_empty(), "no roots reached the 2026 server");
    assert!(
        modern_roots.iter().all(|u| u.starts_with("file:///")),
        "{modern_roots:?}"
    );
    let own = |roots: &[String], name: &str| -> Vec<String> {
        roots
            .iter()
            .map(|u| u.replace(&format!("/{name}"), "/SERVER"))
            .collect()
    };
    assert_eq!(
        own(&modern_roots, "modern"),
        own(&legacy_roots, "legacy"),
        "the same roots by either road (each server's own directories aside)"
    );

    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let versions = |tool: &str, server: &str| -> Value {
        records
            .iter()
            .find(|r| r["toolName"] == tool && r["serverName"] == server)
            .unwrap_or_else(|| panic!("no record of {server} {tool}: {records:?}"))["protocol"]
            .clone()
    };
    assert_eq!(
        versions("where", "modern"),
        json!({"agent": "2025-11-25", "server": "2026-07-28"})
    );
    assert_eq!(
        versions("era", "pinned"),
        json!({"agent": "2025-11-25", "server": "2025-11-25"})
    );
}

/// A 2026-07-28 server's questions (elicitation, sampling) inside its results reach the agent
/// through the relay: as the next round of a 2026-07-28 agent's call, and as standalone
/// requests to a 2025-11-25 agent; the answers reach the server by Palisade's retry.
#[test]
fn a_2026_servers_questions_reach_the_agent_in_both_eras() {
    for mode in ["2026-07-28", "legacy"] {
        let ws = Workspace::new();
        let config = ws.config(
            json!({"modern": modern_server(
                json!({"relay": {"sampling": true, "elicitation": true}}))}),
            json!({}),
        );
        let audit = ws.path().join("audit.jsonl");
        let greeted = sdk_client(&ws, mode, "modern__greet", "{}", &config, &audit);
        assert_eq!(
            greeted["call"]["text"], "hello Ada from python",
            "{mode}: {greeted}"
        );
        let mused = sdk_client(&ws, mode, "modern__muse", "{}", &config, &audit);
        assert_eq!(
            mused["call"]["text"], "model said: sampled-by-the-python-agent",
            "{mode}: {mused}"
        );
        let records = support::read_jsonl(&audit);
        for kind in ["elicitation", "sampling"] {
            assert!(
                records
                    .iter()
                    .any(|r| r["kind"] == kind && r["result"]["status"] == "success"),
                "{mode}: a {kind} record: {records:?}"
            );
        }
        let call = records
            .iter()
            .find(|r| r["toolName"] == "greet")
            .unwrap_or_else(|| panic!("{mode}: {records:?}"));
        assert_eq!(call["protocol"]["server"], "2026-07-28", "{call}");
    }
}

/// Without `relay`, Palisade's envelope does not offer sampling to a 2026-07-28 server (as its
/// `initialize` would not offer it to a 2025-11-25 one), so the server cannot ask: the call
/// ends with the server's reason and the agent is never asked.
#[test]
fn a_2026_servers_question_without_relay_ends_the_call_with_the_reason() {
    let ws = Workspace::new();
    let config = ws.config(json!({"modern": modern_server(json!({}))}), json!({}));
    let audit = ws.path().join("audit.jsonl");
    let out = sdk_client(&ws, "legacy", "modern__muse", "{}", &config, &audit);
    let text = out["call"]["text"].as_str().unwrap_or_default();
    assert!(
        out["call"]["ok"] == false || out["call"]["is_error"] == true,
        "{out}"
    );
    assert!(text.contains("sampling capability"), "{out}");
    assert!(
        out["prompts"].as_array().unwrap().is_empty(),
        "the agent was never asked: {out}"
    );
}

/// `"protocol": "2026-07-28"` on a server that only has the handshake is refused at start,
/// naming the key and the fix; the server's tools never appear.
#[test]
fn a_server_pinned_to_2026_that_cannot_speak_it_is_refused_with_the_fix() {
    let ws = Workspace::new();
    let config = ws.config(
        json!({"everything": {"command": "node",
                              "args": [node_server("server-everything"), "stdio"],
                              "protocol": "2026-07-28"},
               "modern": modern_server(json!({"protocol": "2026-07-28"}))}),
        json!({}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let listed = serve.request(2, "tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"modern__era"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("everything__")),
        "{names:?}"
    );
    let (_, stderr) = serve.finish();
    assert!(
        stderr.contains("\"protocol\": \"2026-07-28\"") && stderr.contains("\"auto\""),
        "{stderr}"
    );
}

/// A 2026-07-28 server sends no notification outside a request: Palisade hears its list
/// changes through `subscriptions/listen`, re-lists it, and tells the agent, so a tool the
/// server adds appears (and is policed) as a 2025-11-25 server's would.
#[test]
fn a_2026_servers_new_tool_is_heard_through_subscriptions_listen() {
    let ws = Workspace::new();
    let config = ws.config(json!({"modern": modern_server(json!({}))}), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let names = |listed: &Value| -> Vec<String> {
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let before = names(&serve.request(2, "tools/list", json!({})));
    assert!(before.contains(&"modern__grow".to_string()), "{before:?}");
    assert!(!before.contains(&"modern__grown".to_string()), "{before:?}");
    let grew = serve.call(3, "modern__grow", json!({}));
    assert_eq!(support::raw::text_of(&grew), "grew", "{grew}");
    serve.notification("notifications/tools/list_changed");
    let after = names(&serve.request(4, "tools/list", json!({})));
    assert!(after.contains(&"modern__grown".to_string()), "{after:?}");
    let called = serve.call(5, "modern__grown", json!({}));
    assert_eq!(support::raw::text_of(&called), "grown", "{called}");
    let (status, _) = serve.finish();
    assert!(status.success());
}

/// A 2026-07-28 agent hears of list changes on the `subscriptions/listen` stream it opened:
/// acknowledged first with the kinds honoured, then each change of a kind it asked for,
/// every frame tagged with the stream's id. The change here is a 2026-07-28 server's new
/// tool, heard by Palisade on its own listen stream downstream: both directions at once.
#[test]
fn a_2026_agent_hears_list_changes_on_its_listen_stream() {
    let ws = Workspace::new();
    let config = ws.config(json!({"modern": modern_server(json!({}))}), json!({}));
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let meta = envelope();
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    serve.send(
        json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true, "promptsListChanged": false},
                   "_meta": meta}}),
    );
    let ack = serve.notification("notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    assert_ne!(
        ack["params"]["notifications"]["promptsListChanged"], true,
        "only what was asked for: {ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "{ack}"
    );
    let grew = serve.request(
        2,
        "tools/call",
        json!({"name": "modern__grow", "arguments": {}, "_meta": meta}),
    );
    assert_eq!(support::raw::text_of(&grew), "grew", "{grew}");
    let changed = serve.notification("notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "only on the stream, tagged: {changed}"
    );
    let after = serve.request(3, "tools/list", json!({"_meta": meta}));
    assert!(
        after.to_string().contains("modern__grown"),
        "the new tool is listed: {after}"
    );
    serve.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "listen-1"}}),
    );
    let (status, _) = serve.finish();
    assert!(status.success());
}
