//! List changes in 2026-07-28, which has no session to notify on: a server's new tool is
//! heard through its `subscriptions/listen`, and an agent hears list changes on its own
//! listen stream.

use serde_json::{json, Value};

use crate::common::{envelope, modern_server};
use crate::support::raw::Serve;
use crate::support::{self, Workspace};

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
