//! Why: agents on other machines, and many agents at once, reach Palisade over MCP Streamable
//! HTTP (`serve --http ADDR`) at `/mcp`. Each request is checked in this order, and a refusal
//! never reaches a server: the `Origin` (403; DNS rebinding), the bearer token (401, with
//! `WWW-Authenticate`), the principal cap (503), the principal's request rate and cap
//! (429, see `limits`). Each principal then gets a gateway of its own: its own server
//! processes, session sandbox directory, roots, remembered approvals, approval chain and
//! relay budgets, started on first use and stopped after `idleTimeout` without requests. Every
//! audit record carries the principal. rmcp's Streamable HTTP service speaks the protocol
//! (sessions, SSE, DELETE) inside each principal's gateway; a plain `tools/call` on a session it
//! holds skips its session machinery and runs into the stdio front's pipeline (`fast`). On SIGTERM
//! or SIGINT new requests are refused (503), requests in flight get `shutdownGrace` to finish (past
//! it they end with an error), then every principal's servers stop and are reaped.
//!
//! Never: log a token, serve without authentication on a non-loopback address, or let one
//! principal's requests reach another principal's servers.
//!
//! Split by job: this module holds the options and the listener (`serve_http`); `requests`
//! admits each request and hands it to its principal's gateway; `refuse` shapes and audits
//! refusals; `shutdown` drains the requests in flight and cuts those past the grace.

mod auth;
mod era;
pub mod fast;
mod handshake;
pub mod jwks;
pub mod jwt;
mod keyset;
pub mod limits;
pub mod metrics;
mod modern;
pub mod origin;
mod principals;
pub mod proxy;
mod refuse;
mod requests;
pub mod sessions;
mod shutdown;
mod standalone;
pub mod tls_client;
pub mod tokens;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;

use crate::gateway::GatewayOptions;
pub use tokens::TokenTable;

use auth::*;
use principals::*;
use refuse::refusal;
pub use refuse::{BUSY_CODE, BUSY_RULE};
use requests::{mcp, metrics_page, readyz};
use shutdown::drain;
pub use shutdown::SHUTDOWN_CODE;

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum Auth {
    /// `Authorization: Bearer TOKEN`: a token of the tokens file, or a JWT access token the
    /// verifier accepts (at least one of the two is set).
    Bearer {
        tokens: Option<TokenTable>,
        jwt: Option<jwt::JwtVerifier>,
    },
    /// `--no-auth`: every request is the principal `anonymous` (loopback listeners only).
    Anonymous,
}

/// Builds a principal's approval chain around its own link to its agent, so that an
/// `elicit` approver asks the agent of the principal whose call escalated, never another's.
pub type ApproverFactory = Arc<
    dyn Fn(
            crate::gateway::agent::link::UpstreamLink,
        ) -> Result<Arc<dyn crate::gateway::stages::ApprovalStage>, String>
        + Send
        + Sync,
>;

/// The HTTP front's settings.
#[derive(Clone)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    pub auth: Auth,
    /// Origins allowed besides the loopback ones a loopback listener allows
    /// (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// A principal's servers stop after this long without a request.
    pub idle_timeout: Duration,
    /// At most this many principals have servers running at once.
    pub max_principals: usize,
    /// The largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// At most this many of one principal's requests in flight at once (429 beyond).
    pub max_requests_per_principal: usize,
    /// On SIGTERM, how long requests in flight get to finish before the servers stop.
    pub shutdown_grace: Duration,
    /// Each principal's requests per minute and burst (429 beyond); `None`: no rate limit.
    pub rate: Option<(u32, u32)>,
    /// When the escalation chain asks the agent (`elicit`): each principal's chain.
    pub approver_for: Option<ApproverFactory>,
    /// Plain `tools/call` POSTs skip rmcp's session machinery (`fast`); `false` sends every
    /// request through rmcp (kept for measuring the difference).
    pub fast_calls: bool,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("listen", &self.listen)
            .field("auth", &self.auth)
            .field("allowed_origins", &self.allowed_origins)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_principals", &self.max_principals)
            .field("max_body_bytes", &self.max_body_bytes)
            .field(
                "max_requests_per_principal",
                &self.max_requests_per_principal,
            )
            .field("shutdown_grace", &self.shutdown_grace)
            .field("rate", &self.rate)
            .field("approver_for", &self.approver_for.is_some())
            .field("fast_calls", &self.fast_calls)
            .finish()
    }
}

impl HttpOptions {
    /// What the options cannot mean, refused before anything listens.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if matches!(self.auth, Auth::Anonymous) && !self.listen.ip().is_loopback() {
            return Err(OptionsError::OpenWithoutAuth(self.listen));
        }
        if self.max_principals == 0 {
            return Err(OptionsError::Zero("maxPrincipals"));
        }
        if self.max_requests_per_principal == 0 {
            return Err(OptionsError::Zero("maxRequestsPerPrincipal"));
        }
        if let Some((per_minute, burst)) = self.rate {
            if per_minute == 0 || burst == 0 {
                return Err(OptionsError::Zero("requestsPerMinute and requestBurst"));
            }
        }
        Ok(())
    }
}

/// What the HTTP options cannot mean (refused before anything listens).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error(
        "--no-auth on {0}: anyone who can reach this address could use every server; listen on \
         127.0.0.1 or give --tokens FILE"
    )]
    OpenWithoutAuth(SocketAddr),
    /// Names the setting(s).
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(transparent)]
    Invalid(#[from] OptionsError),
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        addr: SocketAddr,
        cause: std::io::Error,
    },
    #[error("the HTTP front failed: {0}")]
    Serve(std::io::Error),
}

struct Front {
    template: GatewayOptions,
    http: HttpOptions,
    /// Created on first use. The map's lock is held only to find or add a principal's cell;
    /// its servers start on a task of `starts` that publishes them in the cell (two first
    /// requests of one principal never start two gateways, and no other principal waits).
    principals: tokio::sync::Mutex<HashMap<String, Arc<Cell>>>,
    stopping: CancellationToken,
    /// The principals' starts under way: shutdown cuts them short and waits for them (a
    /// cut start stops its own servers: its gateway is in no cell).
    starts: tokio_util::task::TaskTracker,
    /// Parent of every principal's session token: cancelled when the drain is over.
    sessions_end: CancellationToken,
    /// Cancelled when `shutdownGrace` is over: responses still open end with an error.
    cut: CancellationToken,
    metrics: Arc<metrics::Metrics>,
}

/// Serves MCP over HTTP until SIGINT or SIGTERM; then stops accepting, ends every session and
/// stops every principal's servers.
pub async fn serve_http(template: GatewayOptions, http: HttpOptions) -> Result<(), HttpError> {
    http.validate().map_err(HttpError::Invalid)?;
    if let Auth::Bearer { jwt: Some(v), .. } = &http.auth {
        v.prefetch().await;
    }
    let listener = tokio::net::TcpListener::bind(http.listen)
        .await
        .map_err(|source| HttpError::Bind {
            addr: http.listen,
            cause: source,
        })?;
    let bound = listener.local_addr();
    let listener = listener
        // An answer goes out in several writes (headers, SSE events, the last chunk): with
        // Nagle's algorithm on, each write after the first waited for the client's delayed
        // ACK, about 40 ms per call on a kept-alive connection.
        .tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
            }
        });
    let front = Arc::new(Front {
        template,
        http,
        principals: Default::default(),
        stopping: CancellationToken::new(),
        starts: tokio_util::task::TaskTracker::new(),
        sessions_end: CancellationToken::new(),
        cut: CancellationToken::new(),
        metrics: Arc::default(),
    });
    let router = axum::Router::new()
        .route("/mcp", axum::routing::any(mcp))
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(readyz))
        .route("/metrics", axum::routing::get(metrics_page))
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(resource_metadata),
        )
        .with_state(Arc::clone(&front));
    let reaper = tokio::spawn(reap_idle(Arc::clone(&front)));
    let signal = crate::gateway::termination();
    // Cancelled once the drain is over: from then on the connections left get
    // `CONNECTIONS_BOUND` to close.
    let drained = CancellationToken::new();
    let stop = {
        let front = Arc::clone(&front);
        let drained = drained.clone();
        async move {
            signal.await;
            drain(&front).await;
            drained.cancel();
        }
    };
    // The address bound, which names the port the kernel chose for `--http HOST:0` (what a
    // supervisor or a test harness reads to find the front without racing for a port). Said
    // once SIGTERM drains the front: a supervisor may stop it as soon as it reads this.
    match bound {
        Ok(bound) => tracing::info!("listening on http://{bound}/mcp"),
        Err(e) => tracing::warn!("cannot read the address the front is bound to: {e}"),
    }
    let served = axum::serve(listener, router).with_graceful_shutdown(stop);
    let served = tokio::select! {
        r = served => r.map_err(HttpError::Serve),
        _ = async { drained.cancelled().await; tokio::time::sleep(CONNECTIONS_BOUND).await } => {
            tracing::warn!("connections still open {CONNECTIONS_BOUND:?} after the drain; no longer waited for");
            Ok(())
        }
    };
    // The reaper ends at the drain's start; one stopping idle principals then finishes
    // those stops (side by side, each bounded), rather than leaving their servers to the
    // process's exit.
    let reaper_bound = crate::gateway::shutdown_bound(&front.template.limits) + REAPER_SLACK;
    let mut reaper = reaper;
    if tokio::time::timeout(reaper_bound, &mut reaper)
        .await
        .is_err()
    {
        tracing::warn!("the idle reaper had not ended {reaper_bound:?} after shutdown; aborted");
        reaper.abort();
    }
    let all: Vec<Arc<Principal>> = front
        .principals
        .lock()
        .await
        .drain()
        .filter_map(|(_, c)| c.get())
        .collect();
    tracing::info!("stopping {} principal(s)' servers", all.len());
    // Starts under way when the drain began were cut short then and stop their own servers
    // on their tasks; waited for beside the principals' stops, bounded.
    front.starts.close();
    if !front.starts.is_empty() {
        tracing::info!(
            "waiting for {} principal start(s) to stop their servers",
            front.starts.len()
        );
    }
    let starts = async {
        if tokio::time::timeout(reaper_bound, front.starts.wait())
            .await
            .is_err()
        {
            tracing::warn!("principal starts still stopping {reaper_bound:?} after shutdown");
        }
    };
    tokio::join!(
        futures::future::join_all(all.iter().map(|p| p.stop())),
        starts
    );
    tracing::info!("every principal's servers stopped");
    served
}

/// After the drain, how long open connections (a client that keeps one open) get to close.
const CONNECTIONS_BOUND: Duration = Duration::from_secs(3);
/// Beyond a gateway's own shutdown bound, what the idle reaper gets to finish the stops it
/// began (the egress proxy's stop, scheduling).
const REAPER_SLACK: Duration = Duration::from_secs(2);
