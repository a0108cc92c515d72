//! Downstream in 2026-07-28: a server that speaks it is spoken to with no handshake and asks
//! for palisade's roots inside the call; its questions reach the agent in both eras (or end
//! the call with the reason when relay is off); a server pinned to it that cannot speak it is
//! refused with the fix.

use serde_json::{json, Value};

use crate::common::{modern_server, sdk_client};
use crate::support::raw::Serve;
use crate::support::{self, audit_records, node_server, Workspace};

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
