//! The fast path's reading of a 2026-07-28 POST (`fast/`): which ones it may take, the
//! peer such a request runs with, and the HTTP status of its error.
//!
//! Why: a 2026-07-28 request has no session, so rmcp answers it through a one-request
//! service of the typed `ServerHandler`, and the typed models dropped what they do not know
//! of a tool result, a list, a prompt or a read. The fast path answers it as stdio answers
//! a 2026-07-28 agent (`front::answer_call`, `answer_routed`, the catalog's lists).
//!
//! Never: take a request rmcp would refuse. It takes one only when every header rmcp checks
//! agrees with the body as rmcp reads it (`MCP-Protocol-Version` the body's own version,
//! one `Mcp-Method` naming the method, one plain `Mcp-Name` naming the tool, prompt or URI,
//! no `Mcp-Param-*` header, no session) and the body's `_meta` holds the whole envelope.
//! Anything else goes to rmcp's path, which says why it refuses.

use axum::http::{HeaderMap, StatusCode};
use rmcp::model::{
    ClientJsonRpcMessage, ErrorCode, InitializeRequestParams, ProtocolVersion, RequestMetaObject,
    ServerJsonRpcMessage,
};
use rmcp::service::RunningService;
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::value::RawValue;

use crate::gateway::agent::service::Upstream;

const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
const PARAM_HEADER_PREFIX: &str = "mcp-param-";
/// How rmcp marks a header value written in Base64 (left to rmcp to decode).
const BASE64_PREFIX: &str = "=?base64?";

/// Whether a 2026-07-28 request (`method`, `params`, its `_meta` read as `meta`; a call's
/// tool name as the fast path read it, `named`) is the fast path's by its headers and
/// envelope.
pub(super) fn fits(
    headers: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
    named: Option<&str>,
    meta: Option<&RequestMetaObject>,
) -> bool {
    let Some(meta) = meta else {
        return false;
    };
    let modern = ProtocolVersion::V_2026_07_28;
    let version_agrees = meta
        .protocol_version()
        .is_some_and(|v| v.as_str() == modern.as_str());
    version_agrees
        && meta.missing_required_keys(&modern).is_empty()
        && !headers.contains_key(super::sessions::SESSION_HEADER)
        && !headers
            .keys()
            .any(|k| k.as_str().starts_with(PARAM_HEADER_PREFIX))
        && sole(headers, METHOD_HEADER) == Some(method)
        && name_fits(headers, method, params, named)
}

/// The one value of header `name`, if it has exactly one, readable.
fn sole<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// `Mcp-Name`: where the method names something (a tool, a prompt, a URI, a task), one plain
/// header naming that (rmcp's SEP-2243 check); elsewhere, none (rmcp ignores it; the fast
/// path leaves it to rmcp).
fn name_fits(
    headers: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
    named: Option<&str>,
) -> bool {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return !headers.contains_key(NAME_HEADER),
    };
    let read;
    let named = match named {
        Some(name) => name,
        None => match params.and_then(|p| named_by(p, key)) {
            Some(name) => {
                read = name;
                &read
            }
            None => return false,
        },
    };
    sole(headers, NAME_HEADER).is_some_and(|h| !h.starts_with(BASE64_PREFIX) && h == named)
}

/// The string member `key` of `params`, as rmcp reads it.
fn named_by(params: &RawValue, key: &str) -> Option<String> {
    let v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(params.get()).ok()?;
    v.get(key)?.as_str().map(str::to_owned)
}

/// The HTTP status rmcp gives a 2026-07-28 request's error answer (a JSON body, not SSE,
/// when it is not 200).
pub(super) fn error_status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// A request's own agent peer, as rmcp gives a sessionless request one: a service that
/// receives nothing, kept while the request runs (dropping it ends it). What the pipeline
/// sends the agent during a 2026-07-28 request goes elsewhere: its progress on the request's
/// own stream (`RequestStream`), its questions as input-required results, a server's
/// notifications to the principal's linked agent; anything sent on this peer is dropped.
pub(super) fn request_peer(upstream: Upstream) -> RunningService<RoleServer, Upstream> {
    let info = InitializeRequestParams::new(Default::default(), Default::default())
        .with_protocol_version(ProtocolVersion::V_2026_07_28);
    rmcp::service::serve_directly(upstream, NothingIn, Some(info))
}

/// The transport of `request_peer`'s service: nothing comes in, what goes out is dropped.
struct NothingIn;

impl Transport<RoleServer> for NothingIn {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), std::io::Error>> + Send + 'static {
        tracing::debug!(
            "a message for a 2026-07-28 request's agent outside its answer was dropped: {:?}",
            std::mem::discriminant(&item)
        );
        std::future::ready(Ok(()))
    }

    fn receive(&mut self) -> impl std::future::Future<Output = Option<ClientJsonRpcMessage>> {
        std::future::pending()
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn meta(v: serde_json::Value) -> RequestMetaObject {
        serde_json::from_value(v).unwrap()
    }

    fn envelope() -> RequestMetaObject {
        meta(serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }))
    }

    #[test]
    fn a_request_whose_headers_agree_with_its_body_fits() {
        let params = RawValue::from_string(r#"{"name":"fs__stat"}"#.into()).unwrap();
        let call = |pairs: &[(&'static str, &str)], m: &RequestMetaObject| {
            fits(&headers(pairs), "tools/call", Some(&params), None, Some(m))
        };
        let good = [("mcp-method", "tools/call"), ("mcp-name", "fs__stat")];
        assert!(call(&good, &envelope()));
        // A call's name as the fast path already read it is the one compared.
        let h = headers(&good);
        assert!(fits(
            &h,
            "tools/call",
            Some(&params),
            Some("fs__stat"),
            Some(&envelope())
        ));
        assert!(!fits(
            &h,
            "tools/call",
            Some(&params),
            Some("fs__read"),
            Some(&envelope())
        ));
        // Each header rmcp checks, missing, contradicting or repeated: rmcp's path.
        assert!(!call(&good[..1], &envelope()));
        assert!(!call(
            &[("mcp-method", "tools/list"), ("mcp-name", "fs__stat")],
            &envelope()
        ));
        assert!(!call(
            &[("mcp-method", "tools/call"), ("mcp-name", "fs__read")],
            &envelope()
        ));
        assert!(!call(
            &[
                ("mcp-method", "tools/call"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "fs__stat")
            ],
            &envelope()
        ));
        assert!(!call(
            &[
                ("mcp-method", "tools/call"),
                ("mcp-name", "=?base64?ZnNfX3N0YXQ=?=")
            ],
            &envelope()
        ));
        let mut with = good.to_vec();
        with.push(("mcp-param-path", "/x"));
        assert!(!call(&with, &envelope()));
        let mut with = good.to_vec();
        with.push(("mcp-session-id", "s"));
        assert!(!call(&with, &envelope()));
        // An envelope without the client's capabilities, or of another version.
        let partial = meta(serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"
        }));
        assert!(!call(&good, &partial));
        let other = meta(serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2025-11-25",
            "io.modelcontextprotocol/clientCapabilities": {}
        }));
        assert!(!call(&good, &other));
        // A list names nothing: no Mcp-Name.
        let h = headers(&[("mcp-method", "tools/list")]);
        assert!(fits(&h, "tools/list", None, None, Some(&envelope())));
        let h = headers(&[("mcp-method", "tools/list"), ("mcp-name", "x")]);
        assert!(!fits(&h, "tools/list", None, None, Some(&envelope())));
        // A task by its id.
        let task = RawValue::from_string(r#"{"taskId":"s__1"}"#.into()).unwrap();
        let h = headers(&[("mcp-method", "tasks/get"), ("mcp-name", "s__1")]);
        assert!(fits(&h, "tasks/get", Some(&task), None, Some(&envelope())));
        let h = headers(&[("mcp-method", "tasks/get")]);
        assert!(!fits(&h, "tasks/get", Some(&task), None, Some(&envelope())));
        // A read is named by its URI.
        let read = RawValue::from_string(r#"{"uri":"file:///a"}"#.into()).unwrap();
        let h = headers(&[("mcp-method", "resources/read"), ("mcp-name", "file:///a")]);
        assert!(fits(
            &h,
            "resources/read",
            Some(&read),
            None,
            Some(&envelope())
        ));
    }

    #[test]
    fn errors_get_rmcps_statuses() {
        assert_eq!(
            error_status(ErrorCode::METHOD_NOT_FOUND),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            error_status(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(error_status(ErrorCode::INVALID_PARAMS), StatusCode::OK);
    }
}
