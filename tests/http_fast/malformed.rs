//! Attack: a request of a method MCP defines, whose params rmcp cannot read as that method's,
//! must be refused, never relayed. rmcp makes such a request a `CustomRequest`, the kind an
//! extension's request has, and Palisade relays extensions to the server that keeps its own
//! names (`prefix: false`): a `tools/call` with one mistyped field skipped the policy and
//! reached the server. The server here answers `request_line` with the line it read, so a
//! relayed call shows itself in the answer.

use super::client::*;
use super::*;

#[test]
fn a_call_whose_params_rmcp_cannot_read_is_refused_not_relayed() {
    let ws = Workspace::new();
    let policy = ws.path().join("compiled-policy.json");
    support::write_policy(
        &policy,
        json!([
            {"name": "no-lines", "description": "no lines", "principle": "test",
             "if": {"tool": ["request_line"]},
             "then": "deny", "reason": "not for you"},
            {"name": "allow-the-rest", "description": "the rest", "principle": "test",
             "if": {}, "then": "allow", "reason": "test"}
        ]),
    );
    let audit = ws.path().join("audit.jsonl");
    let config = unprefixed_config(&ws, json!({"policy": policy, "auditLog": audit}));
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    // The controls: read as a call, the policy refuses it; the server is there and answers
    // an allowed call; and an extension's request does reach it (the route the attack took).
    let denied = front.call(&session, 1, "request_line", json!({}));
    assert_eq!(denied.json()["result"]["isError"], true, "{denied:?}");
    let echo = front.call(&session, 5, "echo", json!({"text": "live"}));
    assert_eq!(
        echo.json()["result"]["content"][0]["text"],
        "echo: live",
        "{echo:?}"
    );
    let extension = front.post(
        Some(&session),
        &[],
        &json!({"jsonrpc": "2.0", "id": 6, "method": "x.example/thing", "params": {}}),
    );
    assert_relayed(&extension.json());
    // The same call with a field of the wrong type (2026-07-28's `inputResponses` is an
    // object), and a read whose `uri` is not a string.
    let bodies = [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"request_line","arguments":{},"inputResponses":5}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"request_line","arguments":[]}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":7}}"#,
    ];
    let mut reached = Vec::new();
    for body in bodies {
        let answer = front.post_text(ALICE, Some(&session), &[], body);
        let text = answer.message.clone();
        if answer.json().get("error").is_none() {
            reached.push(format!("{body}\n  -> {text}"));
        }
    }
    front.stop();
    assert!(
        reached.is_empty(),
        "relayed, not refused:\n{}",
        reached.join("\n")
    );
    // Nothing of these was allowed to the server (the echo and the extension were).
    let records = support::read_jsonl(&audit);
    let allowed: Vec<&Value> = records
        .iter()
        .filter(|r| {
            ["request_line", "tools/call", "resources/read"]
                .contains(&r["toolName"].as_str().unwrap_or(""))
        })
        .filter(|r| r["policyDecision"]["status"] == "allow")
        .collect();
    assert!(allowed.is_empty(), "{allowed:?}");
}

/// The faulty server, keeping its own names (`prefix: false`): extensions go to it.
fn unprefixed_config(ws: &Workspace, settings: Value) -> PathBuf {
    ws.config(
        json!({"faulty": {"command": support::python(),
                          "args": [support::repo("tests/servers/faulty_server.py")],
                          "prefix": false}}),
        settings,
    )
}

// The same over stdio, where a 2026-07-28 agent's routed requests are read by rmcp: a read
// whose `uri` is not a string was relayed to the server (which answered "method not found"
// here; a server with resources would have served the read, unchecked by the roots).
#[test]
fn over_stdio_a_2026_read_whose_params_rmcp_cannot_read_is_refused_not_relayed() {
    let ws = Workspace::new();
    let config = unprefixed_config(&ws, json!({}));
    let mut serve = support::raw::Serve::start(&ws, &config, &[], &[]);
    let envelope = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let read = serve.request(1, "resources/read", json!({"uri": 7, "_meta": envelope}));
    // The control, after: an extension's request of the same agent does reach the server.
    let extension = serve.request(2, "x.example/thing", json!({"_meta": envelope}));
    assert_relayed(&extension);
    let (status, err) = serve.finish();
    let message = read["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("the params are not what this method takes"),
        "relayed, not refused: {read}\n{err}"
    );
    assert!(status.success(), "{status}\n{err}");
}

/// That an extension's request was relayed: the faulty server's own "method not found"
/// (Palisade's names the method alone).
fn assert_relayed(answer: &Value) {
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("method not found: x.example/thing"),
        "the extension did not reach the server: {answer}"
    );
}
