//! Which revision of the protocol a POST speaks, and whether its headers are the fast path's
//! to read, from its headers alone: shared by the fast path and by the session table (which
//! notes whether a session's answers will fit), so that neither imports the other.

use axum::http::{header, HeaderMap};
use rmcp::model::ProtocolVersion;

pub(crate) const VERSION_HEADER: &str = "mcp-protocol-version";

/// Which revision a POST speaks, by its `MCP-Protocol-Version` header.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// None, or a known one before 2026-07-28: the request belongs to a session.
    Sessions,
    /// 2026-07-28: no session; the request carries its envelope (`modern.rs`).
    Modern,
}

/// The headers the fast path serves exactly as rmcp would (else rmcp answers, with its own
/// 406, 415 or 400 where it refuses).
pub(crate) fn headers_fit(headers: &HeaderMap) -> Option<Era> {
    let json_body = json_body(headers);
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let value = value.to_str().ok()?;
        // Weights and quoting are rmcp's to read.
        if value.contains('"') || value.to_ascii_lowercase().contains("q=") {
            return None;
        }
        for entry in value.split(',') {
            let essence = entry.split(';').next().unwrap_or("").trim();
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    if !(json_body && json && sse) {
        return None;
    }
    version_era(headers)
}

/// The era the version header names: none, or one known version; `None` for anything else
/// (rmcp refuses an unknown one, and two).
fn version_era(headers: &HeaderMap) -> Option<Era> {
    let mut versions = headers.get_all(VERSION_HEADER).iter();
    let Some(version) = versions.next() else {
        return Some(Era::Sessions);
    };
    let version = version
        .to_str()
        .ok()
        .filter(|_| versions.next().is_none())?;
    if version == ProtocolVersion::V_2026_07_28.as_str() {
        return Some(Era::Modern);
    }
    let known = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|k| k.as_str() == version);
    (known && version < ProtocolVersion::V_2026_07_28.as_str()).then_some(Era::Sessions)
}

fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(e, _)| e);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// Whether a session's POST with these headers may carry an answer to a question of
/// Palisade's, which the fast path's `reply` then takes (and a session registered with such
/// headers may be asked on its GET by Palisade itself). Looser than `headers_fit`, and
/// looser than rmcp on `Accept` (its weights are not read): the answer's response is an
/// empty 202, and rmcp's session, which never asked the question, would drop the answer
/// (a client whose later POSTs add a weight lost its answer that way).
pub(crate) fn answers_fit(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',') {
            let essence = entry.split(';').next().unwrap_or("").trim();
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse && json_body(headers) && version_era(headers) == Some(Era::Sessions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    const BASE: [(&str, &str); 2] = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];

    #[test]
    fn plain_headers_fit_and_anything_rmcp_reads_differently_does_not() {
        assert!(headers_fit(&headers(&BASE)) == Some(Era::Sessions));
        let with = |extra: (&'static str, &'static str)| {
            let mut h = headers(&BASE);
            h.append(extra.0, extra.1.parse().unwrap());
            headers_fit(&h)
        };
        assert!(with(("mcp-protocol-version", "2025-11-25")) == Some(Era::Sessions));
        assert!(with(("mcp-protocol-version", "2026-07-28")) == Some(Era::Modern));
        assert!(with(("mcp-protocol-version", "2031-01-01")).is_none());
        let mut twice = headers(&BASE);
        twice.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        twice.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        assert!(headers_fit(&twice).is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]))
        .is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "text/plain"),
            ("accept", "application/json, text/event-stream"),
        ]))
        .is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
        ]))
        .is_none());
    }

    #[test]
    fn an_answer_fits_whatever_weights_its_accept_gives_but_not_another_era_or_body() {
        assert!(answers_fit(&headers(&BASE)));
        let weighted = headers(&[
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json;q=0.9"),
            ("accept", "text/event-stream;q=0.5"),
        ]);
        assert!(headers_fit(&weighted).is_none());
        assert!(answers_fit(&weighted));
        let with = |extra: (&'static str, &'static str)| {
            let mut h = headers(&BASE);
            h.append(extra.0, extra.1.parse().unwrap());
            answers_fit(&h)
        };
        assert!(with(("mcp-protocol-version", "2025-11-25")));
        assert!(!with(("mcp-protocol-version", "2026-07-28")));
        assert!(!with(("mcp-protocol-version", "2031-01-01")));
        assert!(!answers_fit(&headers(&[
            ("content-type", "text/plain"),
            ("accept", "application/json, text/event-stream"),
        ])));
        assert!(!answers_fit(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ])));
    }
}
