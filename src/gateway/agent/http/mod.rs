//! Why: agents on other machines, and many agents at once, reach Palisade over MCP Streamable
//! HTTP (`serve --http ADDR`) at `/mcp`. Each request is checked in this order, and a refusal
//! never reaches a server: the `Origin` (403; DNS rebinding), the bearer token (401, with
//! `WWW-Authenticate`), the principal cap (503), the principal's request rate and cap
//! (429, see `limits`). Each principal then gets a gateway of its own: its own server
//! processes, session sandbox directory, roots, remembered approvals, approval chain and
//! relay budgets, started on first use and stopped after `idleTimeout` without requests. Every audit record carries
//! the principal. rmcp's Streamable HTTP service speaks the protocol (sessions, SSE, DELETE)
//! inside each principal's gateway; a plain `tools/call` on a session it holds skips its
//! session machinery and runs into the stdio front's pipeline (`fast`). On SIGTERM or SIGINT new requests are refused (503),
//! requests in flight get `shutdownGrace` to finish (past it they end with an error), then
//! every principal's servers stop and are reaped.
//!
//! Never: log a token, serve without authentication on a non-loopback address, or let one
//! principal's requests reach another principal's servers.

mod auth;
pub mod fast;
pub mod jwks;
pub mod jwt;
pub mod limits;
pub mod metrics;
pub mod origin;
mod principals;
pub mod proxy;
pub mod tls_client;
pub mod tokens;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::gateway::stages::{request_id_string, CallOutcome, CallRecord, PolicyVerdict};
use crate::gateway::GatewayOptions;
pub use tokens::TokenTable;

use auth::*;
use principals::*;

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
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the HTTP front failed: {0}")]
    Serve(std::io::Error),
}

struct Front {
    template: GatewayOptions,
    http: HttpOptions,
    /// Created on first use. The map's lock is held only to find or add a principal's cell;
    /// its servers start inside the cell (two first requests of one principal never start two
    /// gateways, and no other principal waits for them).
    principals: tokio::sync::Mutex<HashMap<String, Arc<Cell>>>,
    stopping: CancellationToken,
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
            source,
        })?
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
    let served = axum::serve(listener, router).with_graceful_shutdown(stop);
    let served = tokio::select! {
        r = served => r.map_err(HttpError::Serve),
        _ = async { drained.cancelled().await; tokio::time::sleep(CONNECTIONS_BOUND).await } => {
            tracing::warn!("connections still open {CONNECTIONS_BOUND:?} after the drain; closed");
            Ok(())
        }
    };
    reaper.abort();
    let all: Vec<Arc<Principal>> = front
        .principals
        .lock()
        .await
        .drain()
        .filter_map(|(_, c)| c.get().cloned())
        .collect();
    for p in all {
        p.stop().await;
    }
    tracing::info!("every principal's servers stopped");
    served
}

/// After the drain, how long open connections (a client that keeps one open) get to close.
const CONNECTIONS_BOUND: Duration = Duration::from_secs(3);

/// Shutdown, first part: refuse new requests (503, `/readyz` too), give the requests in
/// flight `shutdownGrace` to finish; past it, end the responses still open with a JSON-RPC
/// error saying so (not a silently cut stream) and stop the servers of those principals;
/// then end every MCP session (SSE streams included).
async fn drain(front: &Front) {
    front.stopping.cancel();
    let grace = front.http.shutdown_grace;
    let busy = |principals: &[Arc<Principal>]| -> usize {
        principals.iter().map(|p| p.cap.in_flight()).sum()
    };
    let principals: Vec<Arc<Principal>> = front
        .principals
        .lock()
        .await
        .values()
        .filter_map(|c| c.get().cloned())
        .collect();
    tracing::info!(
        in_flight = busy(&principals),
        "shutdown requested: new requests refused; waiting up to {grace:?} for those in flight"
    );
    let deadline = tokio::time::Instant::now() + grace;
    while busy(&principals) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    let left = busy(&principals);
    if left > 0 {
        tracing::warn!(
            in_flight = left,
            "shutdownGrace ({grace:?}) is over: ending the requests still in flight with an error"
        );
        let still: Vec<&Arc<Principal>> = principals
            .iter()
            .filter(|p| p.cap.in_flight() > 0)
            .collect();
        front.cut.cancel();
        // Give those errors a moment to be sent.
        let deadline = tokio::time::Instant::now() + ERRORS_BOUND;
        while busy(&principals) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        for p in still {
            p.stop().await;
        }
    }
    front.sessions_end.cancel();
}

const DRAIN_POLL: Duration = Duration::from_millis(20);
/// How long calls cut by shutdown get for their error to reach the client.
const ERRORS_BOUND: Duration = Duration::from_secs(1);

async fn readyz(State(front): State<Arc<Front>>) -> Response {
    if front.stopping.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

/// `/metrics`: the same checks as `/mcp` (tool names and counts are not for everyone).
async fn metrics_page(State(front): State<Arc<Front>>, req: Request<Body>) -> Response {
    if let Err(r) = admit(&front, req.headers()).await {
        return *r;
    }
    let map = front.principals.lock().await;
    let mut servers: std::collections::BTreeMap<String, u64> = Default::default();
    for p in map.values().filter_map(|c| c.get()) {
        let gateway = p.gateway.lock().unwrap_or_else(|e| e.into_inner());
        for st in gateway.iter().flat_map(|g| g.status()) {
            *servers.entry(status_label(&st.status).into()).or_default() += 1;
        }
    }
    let text = front.metrics.render(map.len(), &servers);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}

fn status_label(s: &crate::gateway::state::Status) -> &'static str {
    use crate::gateway::state::Status;
    match s {
        Status::Starting => "starting",
        Status::Running => "running",
        Status::Restarting { .. } => "restarting",
        Status::Failed { .. } => "failed",
        Status::Refused { .. } => "refused",
        Status::Stopped => "stopped",
    }
}

/// The front's checks, in order: shutting down, Origin/Host, the bearer token. The
/// request's principal, or the refusal to send (counted by reason).
async fn admit(front: &Front, headers: &HeaderMap) -> Result<String, Box<Response>> {
    if front.stopping.is_cancelled() {
        front.metrics.refused("stopping");
        return Err(Box::new(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "palisade is shutting down",
        )));
    }
    if let Err(why) = origin::check(headers, front.http.listen, &front.http.allowed_origins) {
        tracing::warn!("refused a request: {why}");
        front.metrics.refused("forbidden_origin_or_host");
        return Err(Box::new(refusal(StatusCode::FORBIDDEN, &why.to_string())));
    }
    authenticate(&front.http.auth, headers)
        .await
        .map_err(|refused| {
            let why = match refused {
                Refused::Unauthorized(why) => why,
                Refused::Unavailable(why) => {
                    tracing::warn!("refused a request: {why}");
                    front.metrics.refused("jwks_unavailable");
                    return Box::new(refusal(StatusCode::SERVICE_UNAVAILABLE, &why));
                }
            };
            front.metrics.refused("unauthorized");
            let mut r = refusal(StatusCode::UNAUTHORIZED, &why);
            let challenge = match &front.http.auth {
                Auth::Bearer { jwt: Some(_), .. } => format!(
                    "Bearer realm=\"palisade\", resource_metadata=\"{}\"",
                    metadata_url(headers)
                ),
                _ => "Bearer realm=\"palisade\"".to_string(),
            };
            if let Ok(v) = header::HeaderValue::from_str(&challenge) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            Box::new(r)
        })
}

async fn mcp(State(front): State<Arc<Front>>, req: Request<Body>) -> Response {
    let principal = match admit(&front, req.headers()).await {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let entry = match principal_entry(&front, &principal).await {
        Ok(e) => e,
        Err(r) => return r,
    };
    // GET (a standalone SSE stream, long-lived by design) and DELETE take no slot.
    let (req, slot, ids) = if req.method() == Method::POST {
        let (parts, bytes, slot, ids) = match admit_post(&front, &principal, &entry, req).await {
            Ok(admitted) => admitted,
            Err(r) => return *r,
        };
        entry.touch();
        if let Some(call) = entry.fast.plan(&parts.headers, &bytes).await {
            let grace = front.http.shutdown_grace;
            let response = entry
                .fast
                .serve(call, &front.cut, |id| cut_error(id, grace))
                .await;
            drop(slot);
            return response;
        }
        if ids.is_empty() {
            if let Some(response) = entry.fast.cancel(&parts.headers, &bytes).await {
                return response;
            }
        }
        let initialized = fast::initialized_session(&parts.headers, &bytes);
        let req = Request::from_parts(parts, Body::from(bytes));
        if let Some(session) = initialized {
            let response = entry.service.handle(req).await.map(Body::new);
            if response.status() == StatusCode::ACCEPTED {
                entry
                    .fast
                    .sessions
                    .wait_registered(&session, REGISTRATION_BOUND)
                    .await;
            }
            drop(slot);
            return response;
        }
        (req, slot, ids)
    } else {
        (req, None, Vec::new())
    };
    entry.touch();
    let response = entry.service.handle(req).await;
    entry.touch();
    let response = response.map(Body::new);
    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    match slot {
        None => response,
        Some(slot) => {
            let cut = CutAnswer {
                ids: if sse { ids } else { Vec::new() },
                cut: front.cut.clone(),
                grace: front.http.shutdown_grace,
            };
            response.map(|body| held(body, slot, cut))
        }
    }
}

/// How long the 202 to `notifications/initialized` waits for the session to be known to the
/// fast path (its calls go through rmcp's path until then).
const REGISTRATION_BOUND: Duration = Duration::from_secs(2);

/// A POST admitted under the principal's rate and request cap: the request's parts and its
/// body (read, at most `maxBodyBytes`), its slot (none for a body of replies over the cap), and the ids
/// of the requests it carries; or the refusal.
async fn admit_post(
    front: &Front,
    principal: &str,
    entry: &Arc<Principal>,
    req: Request<Body>,
) -> Result<
    (
        axum::http::request::Parts,
        axum::body::Bytes,
        Option<Slot>,
        Vec<Value>,
    ),
    Box<Response>,
> {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, front.http.max_body_bytes).await else {
        return Err(Box::new(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is over maxBodyBytes ({})",
                front.http.max_body_bytes
            ),
        )));
    };
    let ids = limits::request_ids(&bytes);
    if let (Some(rate), false) = (&entry.rate, ids.is_empty()) {
        if let Err(wait) = rate.take(ids.len(), Instant::now()) {
            let asked = match limits::classify(&bytes) {
                limits::Carried::Requests(asked) => asked,
                limits::Carried::Replies => Vec::new(),
            };
            let why = format!(
                "too many requests from principal {principal} (requestsPerMinute {}); \
                 retry in {}s",
                rate.per_minute(),
                wait.as_secs().max(1)
            );
            return Err(Box::new(too_many(
                front,
                principal,
                "principal_rate",
                &why,
                wait,
                &asked,
            )));
        }
    }
    let slot = match entry.cap.try_enter() {
        Some(permit) => Some(Slot {
            _permit: permit,
            principal: Arc::clone(entry),
        }),
        None => {
            if let limits::Carried::Requests(asked) = limits::classify(&bytes) {
                let why = format!(
                    "too many requests in flight for principal {principal} \
                     (maxRequestsPerPrincipal {}); retry when one of them has finished",
                    entry.cap.max()
                );
                let wait = Duration::from_secs(1);
                return Err(Box::new(too_many(
                    front,
                    principal,
                    "principal_busy",
                    &why,
                    wait,
                    &asked,
                )));
            }
            None
        }
    };
    Ok((parts, bytes, slot, ids))
}

/// What a response stream cut at shutdown ends with: an SSE event per request it was to
/// answer, a JSON-RPC error saying why.
struct CutAnswer {
    ids: Vec<Value>,
    cut: CancellationToken,
    grace: Duration,
}

/// The response body, holding the request's slot until it ends, and ended early (with
/// `CutAnswer`'s errors) when the shutdown grace is over.
fn held(body: Body, slot: Slot, cut: CutAnswer) -> Body {
    let stream = body
        .into_data_stream()
        .take_until(cut.cut.clone().cancelled_owned());
    let tail = futures::stream::once(async move {
        let _slot = slot;
        if !cut.cut.is_cancelled() || cut.ids.is_empty() {
            return None;
        }
        let events: String = cut
            .ids
            .iter()
            .map(|id| {
                let e = String::from_utf8_lossy(&cut_error(&id.to_string(), cut.grace))
                    .trim_end()
                    .to_string();
                format!("event: message\ndata: {e}\n\n")
            })
            .collect();
        Some(Ok(axum::body::Bytes::from(events)))
    })
    .filter_map(futures::future::ready);
    Body::from_stream(stream.chain(tail))
}

/// The JSON-RPC error answering request `id` (JSON text) cut by shutdown after `grace`.
fn cut_error(id: &str, grace: Duration) -> Vec<u8> {
    let message = format!(
        "palisade is shutting down: the call did not finish within shutdownGrace ({grace:?})"
    );
    let error = rmcp::ErrorData::new(rmcp::model::ErrorCode(SHUTDOWN_CODE as i32), message, None);
    crate::gateway::agent::front::error_line(id, &error)
}

/// The JSON-RPC error code of a call cut by shutdown after `shutdownGrace`.
pub const SHUTDOWN_CODE: i64 = -32006;

/// The refusal of a principal's request over `maxRequestsPerPrincipal` or its rate: 429
/// with `Retry-After`, one JSON-RPC error per request (with its id), one audit record each.
fn too_many(
    front: &Front,
    principal: &str,
    reason: &'static str,
    why: &str,
    wait: Duration,
    asked: &[limits::Asked],
) -> Response {
    front.metrics.refused(reason);
    let retry = wait.as_secs().max(1);
    tracing::warn!(principal, "refused a request: {why}");
    let records: Vec<CallRecord> = if asked.is_empty() {
        vec![busy_record(principal, None, why)]
    } else {
        asked
            .iter()
            .map(|a| busy_record(principal, Some(a), why))
            .collect()
    };
    for rec in &records {
        if let Err(e) = front.template.stages.audit.record(rec) {
            tracing::error!(principal, "cannot audit a refused request: {e}");
        }
    }
    let error = |id: Value| {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": BUSY_CODE, "message": why, "data": {"retryAfterSeconds": retry}},
        })
    };
    let body = match asked {
        [one] => error(one.id.clone()),
        [] => error(Value::Null),
        many => Value::Array(many.iter().map(|a| error(a.id.clone())).collect()),
    };
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::RETRY_AFTER, retry.to_string()),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The JSON-RPC error code of a request refused by the principal's request cap or rate (the
/// implementation-defined server-error range).
pub const BUSY_CODE: i64 = -32005;

/// `policyDecision.rule` of a request refused by the principal's request cap or rate.
pub const BUSY_RULE: &str = "http-request-cap";

/// The audit record of a refused request: a call names its server and tool; another
/// request its method as the tool; a body that is not JSON-RPC `(not JSON-RPC)`.
fn busy_record(principal: &str, asked: Option<&limits::Asked>, why: &str) -> CallRecord {
    let (server, tool, id, args) = match asked {
        Some(a) => {
            let (server, tool) = match &a.tool {
                Some(t) => crate::gateway::registry::split_name(t).unwrap_or(("", t.as_str())),
                None => ("", a.method.as_str()),
            };
            let id = serde_json::from_value::<rmcp::model::RequestId>(a.id.clone())
                .map(|id| request_id_string(&id))
                .unwrap_or_else(|_| a.id.to_string());
            (server, tool, id, a.arguments.clone())
        }
        None => ("", "(not JSON-RPC)", String::new(), Default::default()),
    };
    let mut rec = CallRecord::new(
        server,
        tool,
        id,
        args,
        PolicyVerdict {
            rule: Some(BUSY_RULE.into()),
            ..PolicyVerdict::deny(why)
        },
        CallOutcome::Denied {
            reason: why.to_string(),
        },
    );
    rec.principal = Some(principal.to_string());
    rec
}

/// An HTTP refusal with a JSON-RPC error body (clients show its message).
fn refusal(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32001, "message": message},
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
