//! A 2026-07-28 server's list changes: Palisade listens for them with `subscriptions/listen`.
//!
//! On 2026-07-28 a server sends no notification outside a request; a client that wants to
//! hear of changes opens a `subscriptions/listen` request, whose notifications (tagged with
//! the request's id) arrive until the stream ends. Palisade needs a server's
//! `list_changed` to re-list it (and to police the new list: pins, filters, policy), so it
//! keeps one such stream open per sessionless connection, for the kinds the server says
//! change. The notifications reach the same handler a 2025-11-25 server's do.
//!
//! Never: a request without a timeout. The stream is renewed every `RENEW` (the old one is
//! cancelled), and a server that ends it at once is asked again only after a pause.

use std::time::Duration;

use rmcp::model::ServerCapabilities;
use serde_json::{Map, Value};

use crate::gateway::server::request::{Connection, ForwardError, OnBehalf};

/// How long one listen request stays open before it is cancelled and opened again.
const RENEW: Duration = Duration::from_secs(300);
/// The pause before listening again after a server ended the stream itself.
const AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The `notifications` filter to listen with: the list kinds the server declares as
/// changing (`None`: nothing to listen for). Pure.
pub fn filter(caps: &ServerCapabilities) -> Option<Map<String, Value>> {
    let mut f = Map::new();
    let changes = |c: Option<bool>| c == Some(true);
    if changes(caps.tools.as_ref().and_then(|t| t.list_changed)) {
        f.insert("toolsListChanged".into(), Value::Bool(true));
    }
    if changes(caps.prompts.as_ref().and_then(|p| p.list_changed)) {
        f.insert("promptsListChanged".into(), Value::Bool(true));
    }
    if changes(caps.resources.as_ref().and_then(|r| r.list_changed)) {
        f.insert("resourcesListChanged".into(), Value::Bool(true));
    }
    (!f.is_empty()).then_some(f)
}

/// Keeps a listen stream open on a sessionless connection until the connection ends or the
/// server refuses to listen. Nothing to do for a handshake connection (its server notifies
/// unasked) or a server whose lists never change.
pub fn spawn(conn: &Connection) {
    if !conn.era.is_sessionless() {
        return;
    }
    let Some(kinds) = filter(&conn.info.capabilities) else {
        return;
    };
    let conn = conn.clone();
    tokio::spawn(async move {
        let ended = conn.peer.connection_token();
        let mut params = Map::new();
        params.insert("notifications".into(), Value::Object(kinds));
        loop {
            let outcome = conn
                .send(
                    "subscriptions/listen",
                    params.clone(),
                    RENEW,
                    OnBehalf::palisade().cancelled_by(&ended),
                )
                .await;
            match outcome {
                // Renewed: the old stream was cancelled at its deadline.
                Err(ForwardError::Timeout { .. }) => {}
                // The server ended the stream: listen again, after a pause.
                Ok(_) => {
                    tokio::select! {
                        _ = tokio::time::sleep(AGAIN_AFTER) => {}
                        _ = ended.cancelled() => return,
                    }
                }
                Err(ForwardError::Server(e)) => {
                    tracing::warn!(
                        server = %conn.server,
                        "refuses subscriptions/listen ({}); its list changes will not be seen until it restarts",
                        e.message
                    );
                    return;
                }
                // The connection ended (or is ending).
                Err(_) => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kinds_a_server_says_change_are_listened_for() {
        let caps: ServerCapabilities = serde_json::from_value(serde_json::json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": false},
            "resources": {"subscribe": true}
        }))
        .unwrap();
        let f = filter(&caps).unwrap();
        assert_eq!(
            Value::Object(f),
            serde_json::json!({"toolsListChanged": true})
        );
        let none: ServerCapabilities =
            serde_json::from_value(serde_json::json!({"tools": {}})).unwrap();
        assert!(filter(&none).is_none());
    }
}
