//! From "server S asks for HOST:PORT" to a connected upstream socket, or a refusal. The one
//! place where policy, resolution and connect meet, shared by the HTTP and SOCKS5 front ends.
//!
//! Order: name checks (deny, allow, port) → one resolution → address checks on every answer
//! → connect to a checked address, never to anything resolved again (no DNS-rebinding
//! window). Every policy refusal is published as an event before it is returned. This module
//! must never connect to an address it has not checked.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpStream;

use super::domains::Host;
use super::events::{EventBus, Protocol, RefusalEvent};
use super::policy::{Decision, EgressPolicy};
use super::resolve::{ResolveError, Resolved, Resolver};
use super::Limits;

/// Everything a connection handler needs about the server whose socket it arrived on.
#[derive(Debug)]
pub(crate) struct ServerCtx {
    pub name: String,
    /// Swapped whole by `EgressProxy::update_server`; read once per connection.
    pub policy: RwLock<Arc<EgressPolicy>>,
    pub resolver: Resolver,
    pub bus: EventBus,
    pub limits: Limits,
}

impl ServerCtx {
    fn current_policy(&self) -> Arc<EgressPolicy> {
        match self.policy.read() {
            Ok(p) => Arc::clone(&p),
            // A writer panicked mid-swap; the value is a whole Arc either way.
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// Why no upstream connection was made.
#[derive(Debug, Error)]
pub(crate) enum DialError {
    /// Refused by policy (already logged and published).
    #[error("{}", .0.message())]
    Refused(Box<RefusalEvent>),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("connecting to {target} failed: {cause}")]
    Connect { target: String, cause: io::Error },
    #[error("connecting to {target} took longer than {timeout:?}")]
    Timeout { target: String, timeout: Duration },
}

/// Checks, resolves and connects.
pub(crate) async fn dial(
    ctx: &ServerCtx,
    raw_host: &str,
    port: u16,
    protocol: Protocol,
) -> Result<TcpStream, DialError> {
    let policy = ctx.current_policy();
    let refuse = |host: &str, d: Decision| {
        let event = RefusalEvent {
            server: ctx.name.clone(),
            host: host.to_string(),
            port,
            protocol,
            reason: d.reason,
            hint: d.hint,
        };
        ctx.bus.publish(event.clone());
        DialError::Refused(Box::new(event))
    };
    let admitted = policy
        .admit(raw_host, port)
        .map_err(|d| refuse(raw_host, d))?;
    let shown = admitted.host.to_string();
    let candidates = match &admitted.host {
        Host::Ip(ip) => vec![Resolved {
            ip: *ip,
            pinned: false,
        }],
        Host::Name(name) => ctx.resolver.resolve(name).await?,
    };
    let mut permitted = Vec::new();
    let mut first_refusal = None;
    for r in candidates {
        match policy.check_address(r.ip, port, r.pinned) {
            Ok(()) => permitted.push(SocketAddr::new(r.ip, port)),
            Err(d) => {
                tracing::debug!(server = %ctx.name, host = %shown, address = %r.ip,
                    reason = %d.reason, "resolved address refused");
                first_refusal.get_or_insert(d);
            }
        }
    }
    if permitted.is_empty() {
        let d = first_refusal.unwrap_or(Decision {
            reason: super::policy::RefusalReason::NotAllowed,
            hint: None,
        });
        return Err(refuse(&shown, d));
    }
    let mut last_err = None;
    for addr in permitted {
        let target = format!("{shown} ({addr})");
        match tokio::time::timeout(ctx.limits.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // Small writes (TLS handshakes, HTTP heads) must not wait for Nagle.
                let _ = stream.set_nodelay(true);
                tracing::debug!(server = %ctx.name, host = %shown, %addr, entry = %admitted.entry,
                    "egress connected");
                return Ok(stream);
            }
            Ok(Err(source)) => {
                last_err = Some(DialError::Connect {
                    target,
                    cause: source,
                })
            }
            Err(_) => {
                last_err = Some(DialError::Timeout {
                    target,
                    timeout: ctx.limits.connect_timeout,
                })
            }
        }
    }
    // `permitted` was non-empty, so at least one attempt recorded an error.
    Err(last_err.unwrap_or(DialError::Timeout {
        target: shown,
        timeout: ctx.limits.connect_timeout,
    }))
}
