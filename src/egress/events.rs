//! Refusal events: every connection the proxy refuses on policy grounds is logged (tracing,
//! with server and host) and published here, so the gateway can attribute it to the tool call
//! in flight on that server, put `[SANDBOX BLOCKED] network access to HOST denied` in the
//! agent's error and list the refused hosts in the audit record.
//!
//! A tokio broadcast channel: publishing never blocks the proxy and never fails when nobody
//! listens; a subscriber that falls more than the channel's capacity behind loses the oldest
//! events (it sees `RecvError::Lagged`). This module must never drop the tracing line, even
//! when the channel has no receiver.

use std::fmt;

use serde::Serialize;
use tokio::sync::broadcast;

use super::policy::RefusalReason;

/// How the refused connection asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// HTTP CONNECT (HTTPS and any other tunnelled TCP).
    HttpConnect,
    /// Plain HTTP with an absolute URI.
    HttpForward,
    Socks5,
    /// A direct `connect()` by a Landlock server, refused by palisade's connect checks
    /// (`sandbox::connect_gate`): not through the proxy at all.
    Connect,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::HttpConnect => "HTTP CONNECT",
            Protocol::HttpForward => "HTTP",
            Protocol::Socks5 => "SOCKS5",
            Protocol::Connect => "direct connect",
        })
    }
}

/// One refused connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalEvent {
    /// The server whose socket the connection arrived on.
    pub server: String,
    /// The host as the client asked for it (normalised when it parsed).
    pub host: String,
    pub port: u16,
    pub protocol: Protocol,
    pub reason: RefusalReason,
    /// The config change that would allow it, when one would.
    pub hint: Option<String>,
}

impl RefusalEvent {
    /// The text the gateway puts in the agent's error.
    pub fn message(&self) -> String {
        let mut m = format!(
            "[SANDBOX BLOCKED] network access to {}:{} denied for server {:?}: {}",
            self.host, self.port, self.server, self.reason
        );
        if let Some(h) = &self.hint {
            m.push_str(" (to allow it: ");
            m.push_str(h);
            m.push(')');
        }
        m
    }
}

/// Where refusals made outside the proxy are published (the Landlock tier's connect checks),
/// so that they reach the call in flight, the agent and the audit record as the proxy's do.
/// Publishes without a log line: the caller throttles its own.
#[derive(Debug, Clone)]
pub struct RefusalReporter(pub(super) EventBus);

impl RefusalReporter {
    pub fn report(&self, event: RefusalEvent) {
        // Err only means "no receiver right now" (no call in flight).
        let _ = self.0.tx.send(event);
    }
}

/// The sending side, owned by the proxy.
#[derive(Debug, Clone)]
pub(crate) struct EventBus {
    tx: broadcast::Sender<RefusalEvent>,
}

impl EventBus {
    pub(crate) fn new(capacity: usize) -> EventBus {
        let (tx, _) = broadcast::channel(capacity.max(1));
        EventBus { tx }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<RefusalEvent> {
        self.tx.subscribe()
    }

    /// Logs and publishes a refusal.
    pub(crate) fn publish(&self, event: RefusalEvent) {
        tracing::warn!(
            server = %event.server,
            host = %event.host,
            port = event.port,
            protocol = %event.protocol,
            reason = %event.reason,
            hint = event.hint.as_deref().unwrap_or(""),
            "egress refused"
        );
        // Err only means "no receiver right now": the log line above is the record then.
        let _ = self.tx.send(event);
    }
}
