//! Why: agents on other machines, and many agents at once, reach Palisade over MCP Streamable
//! HTTP (`serve --http ADDR`) at `/mcp`. Each request is checked in this order, and a refusal
//! never reaches a server: the `Origin` (403; DNS rebinding), the bearer token (401, with
//! `WWW-Authenticate`), the principal cap (503). Each principal then gets a gateway of its
//! own: its own server processes, session sandbox directory, roots, remembered approvals and
//! relay budgets, started on first use and stopped after `idleTimeout` without requests.
//! Every audit record carries the principal. rmcp's Streamable HTTP service speaks the
//! protocol (sessions, SSE, DELETE) inside each principal's gateway.
//!
//! Never: log a token, serve without authentication on a non-loopback address, or let one
//! principal's requests reach another principal's servers.

pub mod jwt;
pub mod metrics;
pub mod origin;
pub mod tokens;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::stages::{AuditError, AuditSink, CallRecord};
use super::upstream::Upstream;
use super::{Gateway, GatewayOptions};
pub use tokens::TokenTable;

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

/// The HTTP front's settings.
#[derive(Debug, Clone)]
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
}

impl HttpOptions {
    /// What the options cannot mean, refused before anything listens.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.auth, Auth::Anonymous) && !self.listen.ip().is_loopback() {
            return Err(format!(
                "--no-auth on {}: anyone who can reach this address could use every server; \
                 listen on 127.0.0.1 or give --tokens FILE",
                self.listen
            ));
        }
        if self.max_principals == 0 {
            return Err("maxPrincipals must be at least 1".into());
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the HTTP front failed: {0}")]
    Serve(std::io::Error),
}

/// One principal's gateway and its MCP service.
struct Principal {
    gateway: Mutex<Option<Gateway>>,
    service: StreamableHttpService<Upstream, LocalSessionManager>,
    /// Ends the principal's MCP sessions (SSE streams included) when it is reaped.
    sessions: CancellationToken,
    last_used: Mutex<Instant>,
    in_flight: AtomicUsize,
}

impl Principal {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    async fn stop(&self) {
        self.sessions.cancel();
        let gateway = self
            .gateway
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(g) = gateway {
            g.shutdown().await;
        }
    }
}

type Cell = tokio::sync::OnceCell<Arc<Principal>>;

struct Front {
    template: GatewayOptions,
    http: HttpOptions,
    /// Created on first use. The map's lock is held only to find or add a principal's cell;
    /// its servers start inside the cell (two first requests of one principal never start two
    /// gateways, and no other principal waits for them).
    principals: tokio::sync::Mutex<HashMap<String, Arc<Cell>>>,
    stopping: CancellationToken,
    metrics: Arc<metrics::Metrics>,
}

/// Serves MCP over HTTP until SIGINT or SIGTERM; then stops accepting, ends every session and
/// stops every principal's servers.
pub async fn serve_http(template: GatewayOptions, http: HttpOptions) -> Result<(), HttpError> {
    http.validate().map_err(HttpError::Invalid)?;
    let listener = tokio::net::TcpListener::bind(http.listen)
        .await
        .map_err(|source| HttpError::Bind {
            addr: http.listen,
            source,
        })?;
    let front = Arc::new(Front {
        template,
        http,
        principals: Default::default(),
        stopping: CancellationToken::new(),
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
    let signal = super::termination();
    let stop = {
        let front = Arc::clone(&front);
        async move {
            signal.await;
            tracing::info!("shutdown requested: no new requests; ending sessions");
            front.stopping.cancel();
            for p in front
                .principals
                .lock()
                .await
                .values()
                .filter_map(|c| c.get())
            {
                p.sessions.cancel();
            }
        }
    };
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .map_err(HttpError::Serve);
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
    served
}

async fn readyz(State(front): State<Arc<Front>>) -> Response {
    if front.stopping.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

/// `/metrics`: the same checks as `/mcp` (tool names and counts are not for everyone).
async fn metrics_page(State(front): State<Arc<Front>>, req: Request<Body>) -> Response {
    if let Err(r) = admit(&front, req.headers()) {
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

fn status_label(s: &super::state::Status) -> &'static str {
    use super::state::Status;
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
fn admit(front: &Front, headers: &HeaderMap) -> Result<String, Box<Response>> {
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
        return Err(Box::new(refusal(StatusCode::FORBIDDEN, &why)));
    }
    authenticate(&front.http.auth, headers).map_err(|why| {
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
    let principal = match admit(&front, req.headers()) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let entry = match principal_entry(&front, &principal).await {
        Ok(e) => e,
        Err(r) => return r,
    };
    entry.in_flight.fetch_add(1, Ordering::SeqCst);
    entry.touch();
    let response = entry.service.handle(req).await;
    entry.touch();
    entry.in_flight.fetch_sub(1, Ordering::SeqCst);
    response.map(Body::new)
}

/// The request's principal, or why it has none. Never logs the token.
fn authenticate(auth: &Auth, headers: &HeaderMap) -> Result<String, String> {
    let (tokens, jwt) = match auth {
        Auth::Anonymous => return Ok("anonymous".into()),
        Auth::Bearer { tokens, jwt } => (tokens, jwt),
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or("authentication required: send Authorization: Bearer TOKEN")?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or("the Authorization header is not `Bearer TOKEN`")?;
    if let Some(p) = tokens.as_ref().and_then(|t| t.principal(token)) {
        return Ok(p.to_string());
    }
    match jwt {
        Some(v) => v
            .verify(token)
            .map_err(|why| format!("the access token is not valid: {why}")),
        None => Err("the bearer token is not valid".into()),
    }
}

/// Where this resource's RFC 9728 metadata is, as the client reached it.
fn metadata_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}/.well-known/oauth-protected-resource")
}

/// RFC 9728 protected-resource metadata (only in resource-server mode).
async fn resource_metadata(State(front): State<Arc<Front>>) -> Response {
    match &front.http.auth {
        Auth::Bearer { jwt: Some(v), .. } => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            v.metadata().to_string(),
        )
            .into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn principal_entry(front: &Front, name: &str) -> Result<Arc<Principal>, Response> {
    let cell = {
        let mut map = front.principals.lock().await;
        match map.get(name) {
            Some(c) => Arc::clone(c),
            None => {
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
                c
            }
        }
    };
    match cell.get_or_try_init(|| start_principal(front, name)).await {
        Ok(p) => Ok(Arc::clone(p)),
        Err(r) => {
            // Forget the failed start, so that a later request tries again.
            let mut map = front.principals.lock().await;
            if map
                .get(name)
                .is_some_and(|c| Arc::ptr_eq(c, &cell) && !c.initialized())
            {
                map.remove(name);
            }
            Err(r)
        }
    }
}

async fn start_principal(front: &Front, name: &str) -> Result<Arc<Principal>, Response> {
    let mut opts = front.template.clone();
    opts.sandbox_dir = opts.sandbox_dir.join("principals").join(name);
    // Its own link to its own agent: notifications and relayed requests of its servers
    // never go to another principal's session.
    opts.upstream = super::upstream_link::UpstreamLink::default();
    opts.stages.audit = Arc::new(PrincipalAudit {
        inner: Arc::clone(&opts.stages.audit),
        principal: name.to_string(),
        metrics: Arc::clone(&front.metrics),
    });
    let gateway = Gateway::start(opts).await.map_err(|e| {
        tracing::error!(
            principal = name,
            "cannot start the principal's gateway: {e}"
        );
        refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot start your servers: {e}"),
        )
    })?;
    let shared = Arc::clone(&gateway.shared);
    let sessions = front.stopping.child_token();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(sessions.clone())
        .with_max_request_body_bytes(front.http.max_body_bytes)
        // Origin and Host are checked before authentication, by `origin::check`.
        .disable_allowed_origins()
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || {
            Ok(Upstream {
                shared: Arc::clone(&shared),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    tracing::info!(principal = name, "servers started for a new principal");
    Ok(Arc::new(Principal {
        gateway: Mutex::new(Some(gateway)),
        service,
        sessions,
        last_used: Mutex::new(Instant::now()),
        in_flight: AtomicUsize::new(0),
    }))
}

/// Stops the servers of principals idle for longer than `idleTimeout`.
async fn reap_idle(front: Arc<Front>) {
    let tick =
        (front.http.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        tokio::time::sleep(tick).await;
        let idle: Vec<(String, Arc<Principal>)> = {
            let mut map = front.principals.lock().await;
            let names: Vec<String> = map
                .iter()
                .filter(|(_, c)| {
                    c.get().is_some_and(|p| {
                        p.in_flight.load(Ordering::SeqCst) == 0
                            && p.idle_for() > front.http.idle_timeout
                    })
                })
                .map(|(n, _)| n.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| {
                    let p = map.remove(&n)?.get().cloned()?;
                    Some((n, p))
                })
                .collect()
        };
        for (name, p) in idle {
            tracing::info!(principal = %name, "idle: stopping its servers");
            p.stop().await;
        }
    }
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

/// Stamps each record with the principal whose call it is.
/// Also counts each record for `/metrics`.
struct PrincipalAudit {
    inner: Arc<dyn AuditSink>,
    principal: String,
    metrics: Arc<metrics::Metrics>,
}

impl AuditSink for PrincipalAudit {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        let mut rec = rec.clone();
        rec.principal = Some(self.principal.clone());
        self.metrics.record(&rec);
        self.inner.record(&rec)
    }
}
