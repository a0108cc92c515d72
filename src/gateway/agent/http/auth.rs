//! Who is calling: the bearer token (a token file entry, or a JWT checked against the
//! JWKS), and the RFC 9728 protected-resource metadata a 401 names.
//! Never: log a token; let a request without a valid token through.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::*;

/// Why a request has no principal.
pub(super) enum Refused {
    /// 401: no token, or not a valid one.
    Unauthorized(String),
    /// 503: a JWT that cannot be checked now (the JWKS URL could not be fetched).
    Unavailable(String),
}

/// The request's principal, or why it has none. Never logs the token.
pub(super) async fn authenticate(auth: &Auth, headers: &HeaderMap) -> Result<String, Refused> {
    let (tokens, jwt) = match auth {
        Auth::Anonymous => return Ok("anonymous".into()),
        Auth::Bearer { tokens, jwt } => (tokens, jwt),
    };
    let unauthorized = |why: &str| Refused::Unauthorized(why.to_string());
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("authentication required: send Authorization: Bearer TOKEN"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| unauthorized("the Authorization header is not `Bearer TOKEN`"))?;
    if let Some(p) = tokens.as_ref().and_then(|t| t.principal(token)) {
        return Ok(p.to_string());
    }
    let Some(v) = jwt else {
        return Err(unauthorized("the bearer token is not valid"));
    };
    let principal = v.verify(token).await.map_err(|e| match e {
        jwt::JwtError::Invalid(why) => {
            Refused::Unauthorized(format!("the access token is not valid: {why}"))
        }
        unavailable @ jwt::JwtError::Unavailable(_) => {
            Refused::Unavailable(unavailable.to_string())
        }
    })?;
    // A JWT's subject that names a principal of the tokens file would be given that
    // principal's servers, sandbox directory, approvals and sessions: refused instead.
    if tokens.as_ref().is_some_and(|t| t.names(&principal)) {
        tracing::warn!(
            principal = %principal,
            "a JWT's subject is also a principal of the tokens file: refused (rename the \
             tokens file's entry, or give that person one way in)"
        );
        return Err(unauthorized(
            "the access token's subject is also a principal of the tokens file; the two \
             cannot share servers",
        ));
    }
    Ok(principal)
}

/// Where this resource's RFC 9728 metadata is, as the client reached it.
pub(super) fn metadata_url(headers: &HeaderMap) -> String {
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
pub(super) async fn resource_metadata(State(front): State<Arc<Front>>) -> Response {
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
