//! A server's own requests during a call (sampling, elicitation) reach a 2026-07-28 agent as
//! the call's next round, and the Python SDK answers them in both eras.

use serde_json::json;

use crate::common::{envelope, sdk_client};
use crate::support::raw::Serve;
use crate::support::{self, audit_records, node_server, Workspace};

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
        assert!(
            support::relay_recorded(&audit, "sampling", "success"),
            "{mode}: {:?}",
            support::read_jsonl(&audit)
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
