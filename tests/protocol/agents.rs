//! Upstream: a 2026-07-28 agent is served with no handshake (and an incomplete envelope is
//! refused), and the Python SDK works through the gateway in both eras.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::with_envelope;
use crate::support::raw::Serve;
use crate::support::{self, audit_records, driver, palisade, report, serve_log_env, Workspace};

#[test]
fn a_2026_agent_needs_no_handshake() {
    let ws = Workspace::new();
    let config = ws.config(support::everything_servers(), json!({}));
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
    let config = ws.config(support::everything_servers(), json!({}));
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
