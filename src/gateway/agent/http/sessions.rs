//! Each initialized HTTP session's agent peer, by session id (one table per principal): what
//! the fast path (`fast/`) answers a session's calls through. Apart from the fast path so
//! that the agent-facing handler (`service`), which registers the peers, does not depend on
//! the fast path, which calls the handler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::service::{NotificationContext, Peer};
use rmcp::RoleServer;

use crate::gateway::agent::link::SessionStream;
use crate::gateway::agent::request_stream::{Lines, Standalone};

pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// Session id → the session's agent peer and its standalone stream.
type Sessions = HashMap<String, (Peer<RoleServer>, Arc<Standalone>)>;

/// Each initialized session's agent peer and standalone stream, by session id (one table
/// per principal).
pub struct SessionPeers {
    peers: Mutex<Sessions>,
    /// The streams of GETs sent before their session was initialized, by session id (the
    /// Python SDK opens its GET beside its `notifications/initialized`): the session takes
    /// its own when it registers. Locked after `peers`, never before.
    early: Mutex<HashMap<String, Arc<Standalone>>>,
    /// Bumped at each registration (see `wait_registered`).
    registered: tokio::sync::watch::Sender<u64>,
}

impl Default for SessionPeers {
    fn default() -> Self {
        SessionPeers {
            peers: Mutex::default(),
            early: Mutex::default(),
            registered: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl SessionPeers {
    /// Remembers the peer of the session a `notifications/initialized` came on (rmcp puts
    /// the HTTP request's parts in its extensions), with a standalone stream for its GET,
    /// which it returns with the session's id; forgets sessions whose transport closed.
    pub fn register(&self, context: &NotificationContext<RoleServer>) -> Option<SessionStream> {
        let parts = context.extensions.get::<axum::http::request::Parts>()?;
        let id = parts
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())?;
        // Its POSTs are read by the fast path when this one is (a client sends the same
        // headers each time): only then can it be asked on its GET by Palisade itself.
        let answers_fit = super::era::answers_fit(&parts.headers);
        let mut peers = self.lock();
        peers.retain(|_, (p, _)| !p.is_transport_closed());
        // A repeated `notifications/initialized` keeps the stream its GET may hold, and a
        // first one takes the stream of a GET sent before it.
        let standalone = peers
            .get(id)
            .map(|(_, s)| Arc::clone(s))
            .or_else(|| lock(&self.early).remove(id))
            .unwrap_or_default();
        peers.insert(
            id.to_string(),
            (context.peer.clone(), Arc::clone(&standalone)),
        );
        drop(peers);
        self.registered.send_modify(|n| *n += 1);
        Some(SessionStream {
            id: id.to_string(),
            stream: standalone,
            answers_fit,
        })
    }

    /// A stream for a GET of session `id` (one rmcp accepted), unless another GET holds it:
    /// the session's own, or for a session not initialized yet, one it takes when it
    /// registers. Streams kept for sessions whose GET has gone are dropped here.
    pub(super) fn open_for_get(&self, id: &str) -> Option<Lines> {
        let peers = self.lock();
        if let Some((_, standalone)) = peers.get(id).filter(|(p, _)| !p.is_transport_closed()) {
            return standalone.open();
        }
        let mut early = lock(&self.early);
        early.retain(|_, s| s.live().is_some());
        early.entry(id.to_string()).or_default().open()
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
        lock(&self.peers)
    }
}

fn lock<T>(table: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one insert, remove or retain: a panic elsewhere cannot leave it
    // half-done.
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
