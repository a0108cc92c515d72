//! Each initialized HTTP session's agent peer, by session id (one table per principal): what
//! the fast path (`fast/`) answers a session's calls through. Apart from the fast path so
//! that the agent-facing handler (`service`), which registers the peers, does not depend on
//! the fast path, which calls the handler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::service::{NotificationContext, Peer};
use rmcp::RoleServer;

use crate::gateway::agent::request_stream::Standalone;

pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// Session id → the session's agent peer and its standalone stream.
type Sessions = HashMap<String, (Peer<RoleServer>, Arc<Standalone>)>;

/// Each initialized session's agent peer and standalone stream, by session id (one table
/// per principal).
pub struct SessionPeers {
    peers: Mutex<Sessions>,
    /// Bumped at each registration (see `wait_registered`).
    registered: tokio::sync::watch::Sender<u64>,
}

impl Default for SessionPeers {
    fn default() -> Self {
        SessionPeers {
            peers: Mutex::default(),
            registered: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl SessionPeers {
    /// Remembers the peer of the session a `notifications/initialized` came on (rmcp puts
    /// the HTTP request's parts in its extensions), with a standalone stream for its GET,
    /// which it returns; forgets sessions whose transport closed.
    pub fn register(&self, context: &NotificationContext<RoleServer>) -> Option<Arc<Standalone>> {
        let id = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok())?;
        let mut peers = self.lock();
        peers.retain(|_, (p, _)| !p.is_transport_closed());
        // A repeated `notifications/initialized` keeps the stream its GET may hold.
        let standalone = peers
            .get(id)
            .map_or_else(Default::default, |(_, s)| Arc::clone(s));
        peers.insert(
            id.to_string(),
            (context.peer.clone(), Arc::clone(&standalone)),
        );
        drop(peers);
        self.registered.send_modify(|n| *n += 1);
        Some(standalone)
    }

    /// Session `id`'s standalone stream, while the session is open.
    pub(super) fn standalone(&self, id: &str) -> Option<Arc<Standalone>> {
        self.lock()
            .get(id)
            .filter(|(p, _)| !p.is_transport_closed())
            .map(|(_, s)| Arc::clone(s))
    }

    /// Waits (at most `bound`) until session `id` is registered. rmcp answers
    /// `notifications/initialized` with 202 before its handler has run; the front waits for
    /// the registration before passing the 202 on, so that the agent's next call finds it.
    pub(super) async fn wait_registered(&self, id: &str, bound: std::time::Duration) {
        let mut rx = self.registered.subscribe();
        let _ = tokio::time::timeout(bound, async {
            while self.get(id).is_none() {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    pub(super) fn get(&self, id: &str) -> Option<Peer<RoleServer>> {
        self.lock()
            .get(id)
            .filter(|(p, _)| !p.is_transport_closed())
            .map(|(p, _)| p.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // Each change is one insert or retain: a panic elsewhere cannot leave it half-done.
        self.peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
