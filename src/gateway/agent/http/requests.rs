//! One HTTP request through the front: the checks in order (shutting down, Origin/Host, the
//! bearer token, the principal's rate and request cap), then its principal's gateway (the
//! fast path for a plain `tools/call`, rmcp's Streamable HTTP service otherwise); plus
//! `/readyz` and `/metrics`. Apart from the listener so the admission order reads in one place.
//!
//! Never: let a refused request reach a server, or one principal's request another's gateway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::refuse::too_many;
use super::shutdown::{cut_error, held, CutAnswer};
use super::*;

pub(super) async fn readyz(State(front): State<Arc<Front>>) -> Response {
    if front.stopping.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

/// `/metrics`: the same checks as `/mcp` (tool names and counts are not for everyone).
pub(super) async fn metrics_page(State(front): State<Arc<Front>>, req: Request<Body>) -> Response {
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
        Status::Stopping => "stopping",
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

pub(super) async fn mcp(State(front): State<Arc<Front>>, req: Request<Body>) -> Response {
    let principal = match admit(&front, req.headers()).await {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let entry = match principal_entry(&front, &principal).await {
        Ok(e) => e,
        Err(r) => return r,
    };
    // A session's `initialize`: its answer gets the servers' `tasks` capability.
    let mut handshake = false;
    // A GET of a session: its standalone stream, where Palisade adds what servers send. Not
    // a GET that resumes a request's own stream (rmcp's event ids of those read
    // `INDEX/REQUEST`; the standalone stream's are a bare index): that stream ends with its
    // request.
    let resumes_a_request = req
        .headers()
        .get(header::HeaderName::from_static("last-event-id"))
        .is_some_and(|v| v.as_bytes().contains(&b'/'));
    let standalone_of = (req.method() == Method::GET && !resumes_a_request)
        .then(|| {
            req.headers()
                .get(super::sessions::SESSION_HEADER)?
                .to_str()
                .ok()
                .map(str::to_string)
        })
        .flatten();
    // GET (a standalone SSE stream, long-lived by design) and DELETE take no slot.
    let (req, slot, ids) = if req.method() == Method::POST {
        let (parts, bytes) = match read_body(&front, req).await {
            Ok(read) => read,
            Err(r) => return *r,
        };
        // Read once: every decision below reads the body's message from here.
        let posted = fast::Posted::read(&bytes);
        let ids = posted.request_ids(&bytes);
        let slot = match admit_post(&front, &principal, &entry, &bytes, &ids) {
            Ok(slot) => slot,
            Err(r) => return *r,
        };
        entry.touch();
        if let Some(call) = entry.fast.plan(&parts.headers, &posted).await {
            let grace = front.http.shutdown_grace;
            return entry
                .fast
                .serve(call, &front.cut, move |id| cut_error(id, grace), slot)
                .await;
        }
        if ids.is_empty() {
            if let Some(response) = entry.fast.cancel(&parts.headers, &posted).await {
                return response;
            }
            // A response has no method, so a body read as one message is never one.
            if !posted.is_one() {
                if let Some(response) = entry.fast.reply(&parts.headers, &bytes).await {
                    return response;
                }
            }
        }
        let initialized = fast::initialized_session(&parts.headers, &posted);
        handshake = handshake::is_initialize(&posted, &bytes);
        let req = Request::from_parts(parts, Body::from(bytes.clone()));
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
    let mut response = response.map(Body::new);
    if let Some(tasks) = handshake
        .then(|| entry.fast.shared.tasks_capability())
        .flatten()
    {
        response = handshake::with_tasks(response, tasks).await;
    }
    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if let Some(session) = standalone_of.filter(|_| sse && response.status() == StatusCode::OK) {
        if let Some(lines) = entry.fast.sessions.open_for_get(&session) {
            response = response.map(|body| super::standalone::merged(body, lines));
        }
    }
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

/// A POST's parts and its body, read whole (at most `maxBodyBytes`); or the refusal.
async fn read_body(
    front: &Front,
    req: Request<Body>,
) -> Result<(axum::http::request::Parts, axum::body::Bytes), Box<Response>> {
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, front.http.max_body_bytes).await {
        Ok(bytes) => Ok((parts, bytes)),
        Err(_) => Err(Box::new(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is over maxBodyBytes ({})",
                front.http.max_body_bytes
            ),
        ))),
    }
}

/// A POST body admitted under the principal's rate and request cap (`ids`: the requests it
/// carries): its slot (none for a body of replies over the cap); or the refusal.
fn admit_post(
    front: &Front,
    principal: &str,
    entry: &Arc<Principal>,
    bytes: &[u8],
    ids: &[Value],
) -> Result<Option<Slot>, Box<Response>> {
    if let (Some(rate), false) = (&entry.rate, ids.is_empty()) {
        if let Err(wait) = rate.take(ids.len(), Instant::now()) {
            let asked = match limits::classify(bytes) {
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
            if let limits::Carried::Requests(asked) = limits::classify(bytes) {
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
    Ok(slot)
}
