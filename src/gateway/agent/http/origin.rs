//! The checks the MCP specification requires of HTTP servers against DNS rebinding: a
//! request that carries an `Origin` is served only when that origin is allowed (one given
//! with `--allow-origin`, or, on a loopback listener, a loopback origin); a request without
//! `Origin` (not a browser) passes. On a loopback listener the `Host` must be a loopback name
//! too: a rebound name pointing at 127.0.0.1 carries its own.
//!
//! Pure.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap};

/// Why a request is refused before authentication (the text is the 403's body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginRefusal {
    #[error("host `{0}` is not a loopback name on a loopback listener (DNS rebinding?)")]
    HostNotLoopback(String),
    #[error("the Origin header is not text")]
    NotText,
    #[error("origin `{0}` is not allowed (give --allow-origin {0} to allow it)")]
    NotAllowed(String),
}

/// `Ok` when the request's origin (and, on loopback, its host) may be served.
pub fn check(
    headers: &HeaderMap,
    listen: SocketAddr,
    allowed: &[String],
) -> Result<(), OriginRefusal> {
    if listen.ip().is_loopback() {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !is_loopback_origin(&format!("http://{host}")) {
            return Err(OriginRefusal::HostNotLoopback(host.to_string()));
        }
    }
    let Some(value) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = value
        .to_str()
        .map_err(|_| OriginRefusal::NotText)?
        .trim()
        .trim_end_matches('/');
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
    {
        return Ok(());
    }
    if listen.ip().is_loopback() && is_loopback_origin(origin) {
        return Ok(());
    }
    Err(OriginRefusal::NotAllowed(origin.to_string()))
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_origin(o: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ORIGIN, o.parse().unwrap());
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        h
    }

    #[test]
    fn foreign_origins_are_refused_loopback_ones_pass_on_loopback() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(check(&HeaderMap::new(), public, &[]).is_ok());
        let mut rebound = HeaderMap::new();
        rebound.insert(header::HOST, "evil.example:8080".parse().unwrap());
        assert!(check(&rebound, local, &[]).is_err());
        assert!(check(&rebound, public, &[]).is_ok());
        assert!(check(&with_origin("http://localhost:3000"), local, &[]).is_ok());
        assert!(check(&with_origin("http://[::1]:3000"), local, &[]).is_ok());
        assert!(check(&with_origin("https://evil.example"), local, &[]).is_err());
        assert!(check(&with_origin("http://localhost.evil.example"), local, &[]).is_err());
        assert!(check(&with_origin("http://localhost:3000"), public, &[]).is_err());
        let allowed = vec!["https://app.example.com".to_string()];
        assert!(check(&with_origin("https://app.example.com"), public, &allowed).is_ok());
        assert!(check(
            &with_origin("https://app.example.com.evil"),
            public,
            &allowed
        )
        .is_err());
    }
}
