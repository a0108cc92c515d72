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

/// The `elicit` approver cannot reach a 2026-07-28 agent (no server-to-client requests outside
/// multi round-trip results, which Palisade does not produce yet): the escalation fails
/// closed, says why, and is audited as denied.
#[test]
fn an_escalation_a_2026_agent_cannot_be_asked_is_denied_with_the_reason() {
    let ws = Workspace::new();
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
                      "sandbox": {"filesystem": {"allowWrite": [work]}}}}),
        json!({"policy": policy, "escalation": "elicit", "escalationTimeout": 10}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    let mut meta = envelope();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {"form": {}}});
    let listed = serve.request(1, "tools/list", json!({"_meta": meta}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let got = serve.request(
        2,
        "tools/call",
        json!({"name": "fs__list", "arguments": {"path": work}, "_meta": meta}),
    );
    let text = support::raw::text_of(&got);
    assert_eq!(got["result"]["isError"], true, "{got}");
    assert!(text.contains("Denied"), "{got}");
    assert!(
        text.contains("2026-07-28"),
        "the reason names the cause: {got}"
    );
    let (status, _) = serve.finish();
    assert!(status.success());
    let records = audit_records(&ws);
    let record = records
        .iter()
        .find(|r| r["toolName"] == "list")
        .unwrap_or_else(|| panic!("no record: {records:?}"));
    assert_eq!(record["escalationResult"], "denied", "{record}");
}
