//! Each principal's own gateway: found or started on its first request (in its own cell, on
//! its own task, so two first requests never start two gateways, no other principal waits,
//! and a request that goes away leaves the start to the next), its audit records stamped
//! with its name, and reaped after `idleTimeout` without requests.
//! Never: let one principal's requests reach another's gateway.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::service::Upstream;
use crate::gateway::stages::{AuditError, AuditSink, CallRecord};
use crate::gateway::Gateway;

use super::*;

/// One principal's gateway and its MCP service.
pub(super) struct Principal {
    pub(super) gateway: Mutex<Option<Gateway>>,
    pub(super) service: StreamableHttpService<Upstream, LocalSessionManager>,
    /// `tools/call` POSTs it can serve without rmcp's session machinery (`fast`).
    pub(super) fast: fast::FastPath,
    /// Ends the principal's MCP sessions (SSE streams included) when it is reaped.
    pub(super) sessions: CancellationToken,
    pub(super) last_used: Mutex<Instant>,
    /// Its POSTs in flight, each holding a slot until its response body ends.
    pub(super) cap: limits::RequestCap,
    /// Its request rate, when limited.
    pub(super) rate: Option<limits::RateLimit>,
}

impl Principal {
    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// Stops its servers (a call still in flight then ends with the gateway's error), then
    /// ends its MCP sessions.
    pub(super) async fn stop(&self) {
        let gateway = self
            .gateway
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(g) = gateway {
            g.shutdown().await;
        }
        self.sessions.cancel();
    }
}

/// A POST's slot: given back, and the principal marked used, when its response body ends
/// (an SSE stream ends after the last response it carries) or is dropped.
pub(super) struct Slot {
    pub(super) _permit: tokio::sync::OwnedSemaphorePermit,
    pub(super) principal: Arc<Principal>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.principal.touch();
    }
}

/// A principal's place in the map: its start under way, then its servers or why they could
/// not start. The start runs on its own (tracked) task, so a request that goes away stops
/// waiting but never stops the start: the principal's next request joins it instead of
/// launching a second set of servers while the first set stops.
pub(super) struct Cell {
    state: tokio::sync::watch::Sender<Started>,
}

#[derive(Clone)]
enum Started {
    Pending,
    Ready(Arc<Principal>),
    Failed(StartRefused),
}

/// Why a principal's servers could not start, as each request waiting for them is told.
#[derive(Clone)]
pub(super) struct StartRefused {
    status: StatusCode,
    message: String,
}

impl Cell {
    fn new() -> Self {
        Cell {
            state: tokio::sync::watch::Sender::new(Started::Pending),
        }
    }

    /// The principal, once its servers have started.
    pub(super) fn get(&self) -> Option<Arc<Principal>> {
        match &*self.state.borrow() {
            Started::Ready(p) => Some(Arc::clone(p)),
            Started::Pending | Started::Failed(_) => None,
        }
    }

    /// Waits for the start to end, one way or the other.
    async fn settled(&self) -> Result<Arc<Principal>, StartRefused> {
        let mut rx = self.state.subscribe();
        // The sender lives in `self`, which outlives this wait: `wait_for` cannot fail.
        let settled = rx
            .wait_for(|s| !matches!(s, Started::Pending))
            .await
            .map(|s| s.clone());
        match settled {
            Ok(Started::Ready(p)) => Ok(p),
            Ok(Started::Failed(r)) => Err(r),
            Ok(Started::Pending) | Err(_) => Err(StartRefused {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: "your servers' start ended without a result".into(),
            }),
        }
    }
}

pub(super) async fn principal_entry(
    front: &Arc<Front>,
    name: &str,
) -> Result<Arc<Principal>, Response> {
    let cell = {
        let mut map = front.principals.lock().await;
        match map.get(name) {
            Some(c) => Arc::clone(c),
            None => {
                // The drain may have begun since `admit` (a JWKS fetch in between): no start
                // after it, which shutdown's sweep would not see.
                if front.stopping.is_cancelled() {
                    return Err(refusal(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "palisade is shutting down",
                    ));
                }
                if map.len() >= front.http.max_principals {
                    front.metrics.refused("too_many_principals");
                    return Err(refusal(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!(
                            "too many principals active ({}, maxPrincipals); retry later",
                            front.http.max_principals
                        ),
                    ));
                }
                let c = Arc::new(Cell::new());
                map.insert(name.to_string(), Arc::clone(&c));
                front.starts.spawn(run_start(
                    Arc::clone(front),
                    name.to_string(),
                    Arc::clone(&c),
                ));
                c
            }
        }
    };
    cell.settled()
        .await
        .map_err(|r| refusal(r.status, &r.message))
}

/// A principal's start, on its task: the servers started and published in its cell, or the
/// cell forgotten (so that a later request tries again) and the failure published.
async fn run_start(front: Arc<Front>, name: String, cell: Arc<Cell>) {
    // A panic in the start is a failure like any other: a cell left pending would hold its
    // waiters, and a place among maxPrincipals, for ever.
    let started = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(start_principal(
        &front, &name,
    )))
    .await
    .unwrap_or_else(|_| {
        tracing::error!(principal = %name, "the principal's start panicked");
        Err(StartRefused {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "your servers' start failed (see palisade's log)".into(),
        })
    });
    match started {
        Ok(p) => {
            cell.state.send_replace(Started::Ready(Arc::clone(&p)));
            // Shutdown stops the principals it finds in the map once the drain is over,
            // after `stopping` fired. Published before this check, the principal is either
            // found there or stopped here (stopping twice is harmless).
            if front.stopping.is_cancelled() {
                p.stop().await;
            }
        }
        Err(refused) => {
            {
                let mut map = front.principals.lock().await;
                if map.get(&name).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                    map.remove(&name);
                }
            }
            cell.state.send_replace(Started::Failed(refused));
        }
    }
}

/// Starts a principal's gateway, cut short when the front stops: the servers a cut start
/// launched are stopped on a task of `starts` (which shutdown waits for), so the requests
/// waiting for them are answered at once rather than after the servers' stop grace, which
/// can outlast the drain of their connections.
async fn start_until_stopping(
    front: &Front,
    opts: crate::gateway::GatewayOptions,
) -> Option<Result<Gateway, crate::gateway::GatewayError>> {
    match Gateway::start_until(opts, front.stopping.cancelled()).await {
        Ok((gateway, true)) => {
            front.starts.spawn(gateway.shutdown());
            None
        }
        Ok((gateway, false)) => Some(Ok(gateway)),
        Err(e) => Some(Err(e)),
    }
}

async fn start_principal(front: &Front, name: &str) -> Result<Arc<Principal>, StartRefused> {
    let mut opts = front.template.clone();
    opts.sandbox_dir = opts.sandbox_dir.join("principals").join(name);
    // Its own link to its own agent: notifications and relayed requests of its servers
    // never go to another principal's session.
    opts.upstream = crate::gateway::agent::link::UpstreamLink::default();
    if let Some(factory) = &front.http.approver_for {
        opts.stages.approver = factory(opts.upstream.clone()).map_err(|e| {
            tracing::error!(
                principal = name,
                "cannot build the principal's approvers: {e}"
            );
            StartRefused {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("cannot build your approvers: {e}"),
            }
        })?;
    }
    opts.stages.audit = Arc::new(PrincipalAudit {
        inner: Arc::clone(&opts.stages.audit),
        principal: name.to_string(),
        metrics: Arc::clone(&front.metrics),
    });
    let gateway = match start_until_stopping(front, opts).await {
        Some(Ok(gateway)) => gateway,
        Some(Err(e)) => {
            tracing::error!(
                principal = name,
                "cannot start the principal's gateway: {e}"
            );
            return Err(StartRefused {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("cannot start your servers: {e}"),
            });
        }
        None => {
            return Err(StartRefused {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: "palisade is shutting down; your servers were stopped before they \
                          started"
                    .into(),
            })
        }
    };
    let shared = Arc::clone(&gateway.shared);
    let sessions = front.sessions_end.child_token();
    let peers = Arc::new(super::sessions::SessionPeers::default());
    let manager = Arc::new(LocalSessionManager::default());
    // A chain that can ask the agent (`elicit`) asks on each call's own stream.
    let fast = fast::FastPath::new(
        Arc::clone(&shared),
        Arc::clone(&peers),
        Arc::clone(&manager),
        front.http.fast_calls,
        front.http.approver_for.is_some(),
    );
    let config = transport_config(sessions.clone(), front.http.max_body_bytes);
    let service = StreamableHttpService::new(
        move || {
            Ok(Upstream {
                shared: Arc::clone(&shared),
                sessions: Some(Arc::clone(&peers)),
            })
        },
        manager,
        config,
    );
    tracing::info!(principal = name, "servers started for a new principal");
    Ok(Arc::new(Principal {
        gateway: Mutex::new(Some(gateway)),
        service,
        fast,
        sessions,
        last_used: Mutex::new(Instant::now()),
        cap: limits::RequestCap::new(front.http.max_requests_per_principal),
        rate: front
            .http
            .rate
            .map(|(per_minute, burst)| limits::RateLimit::new(per_minute, burst, Instant::now())),
    }))
}

/// Stops the servers of principals idle for longer than `idleTimeout`.
pub(super) async fn reap_idle(front: Arc<Front>) {
    let tick =
        (front.http.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        tokio::select! {
            biased;
            // Shutdown stops every principal left; the reaper's work is over.
            _ = front.stopping.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let idle: Vec<(String, Arc<Principal>)> = {
            let mut map = front.principals.lock().await;
            let names: Vec<String> = map
                .iter()
                .filter(|(_, c)| {
                    c.get().is_some_and(|p| {
                        p.cap.in_flight() == 0 && p.idle_for() > front.http.idle_timeout
                    })
                })
                .map(|(n, _)| n.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| {
                    let p = map.remove(&n)?.get()?;
                    Some((n, p))
                })
                .collect()
        };
        // Side by side, so one pass takes one stop's time (which shutdown waits for).
        for (name, _) in &idle {
            tracing::info!(principal = %name, "idle: stopping its servers");
        }
        futures::future::join_all(idle.iter().map(|(_, p)| p.stop())).await;
    }
}

/// Stamps each record with the principal whose call it is.
/// Also counts each record for `/metrics`.
pub(super) struct PrincipalAudit {
    pub(super) inner: Arc<dyn AuditSink>,
    pub(super) principal: String,
    pub(super) metrics: Arc<metrics::Metrics>,
}

impl AuditSink for PrincipalAudit {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        let mut rec = rec.clone();
        rec.principal = Some(self.principal.clone());
        self.metrics.record(&rec);
        self.inner.record(&rec)
    }
}

/// rmcp's transport settings for a principal. They keep sessions (`legacy_session_mode`, no
/// session store to restore one from): which requests rmcp then serves outside a session is
/// `versions::served_sessionless`, and `open_calls` trusts a request's `Mcp-Session-Id`
/// only for the others, so a change to either setting changes that rule (the test below).
fn transport_config(sessions: CancellationToken, max_body: usize) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_cancellation_token(sessions)
        .with_max_request_body_bytes(max_body)
        // Origin and Host are checked before authentication, by `origin::check`.
        .disable_allowed_origins()
        .disable_allowed_hosts()
}

#[cfg(test)]
mod transport_tests {
    use super::*;

    #[test]
    fn the_transport_keeps_the_sessions_served_sessionless_is_written_for() {
        let config = transport_config(CancellationToken::new(), 1024);
        assert!(config.legacy_session_mode);
        assert!(config.session_store.is_none());
    }
}
