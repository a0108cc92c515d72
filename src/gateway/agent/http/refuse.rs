//! The front's refusals: an HTTP status with a JSON-RPC error body, and for a principal over
//! its rate or request cap a 429 with `Retry-After`, one error per request and one audit
//! record each. Apart from the admission so what a refusal says and records reads in one place.
//!
//! Never: refuse a request over the cap or rate without an audit record.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::gateway::stages::{
    request_id_string, CallOutcome, CallRecord, PolicyVerdict, RecordServer,
};

use super::*;

/// The refusal of a principal's request over `maxRequestsPerPrincipal` or its rate: 429
/// with `Retry-After`, one JSON-RPC error per request (with its id), one audit record each.
pub(super) fn too_many(
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
        RecordServer::unstamped(server),
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
pub(super) fn refusal(status: StatusCode, message: &str) -> Response {
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
