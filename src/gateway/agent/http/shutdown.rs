//! Shutdown of the HTTP front: new requests refused, those in flight given `shutdownGrace`,
//! and past it each response still open ended with a JSON-RPC error saying so (not a
//! silently cut stream). Apart from the listener so the drain and the cut read on their own.
//!
//! Never: end a response past the grace without an error naming the shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::*;

/// Shutdown, first part: refuse new requests (503, `/readyz` too), give the requests in
/// flight `shutdownGrace` to finish; past it, end the responses still open with a JSON-RPC
/// error saying so (not a silently cut stream) and stop the servers of those principals;
/// then end every MCP session (SSE streams included).
pub(super) async fn drain(front: &Front) {
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
        .filter_map(|c| c.get())
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
        // Side by side: each stop is bounded, and one principal's does not wait for another's.
        futures::future::join_all(still.iter().map(|p| p.stop())).await;
    }
    tracing::info!("drain over: sessions end");
    front.sessions_end.cancel();
}

const DRAIN_POLL: Duration = Duration::from_millis(20);
/// How long calls cut by shutdown get for their error to reach the client.
const ERRORS_BOUND: Duration = Duration::from_secs(1);

/// What a response stream cut at shutdown ends with: an SSE event per request it was to
/// answer, a JSON-RPC error saying why.
pub(super) struct CutAnswer {
    pub(super) ids: Vec<Value>,
    pub(super) cut: CancellationToken,
    pub(super) grace: Duration,
}

/// The response body, holding the request's slot until it ends, and ended early (with
/// `CutAnswer`'s errors) when the shutdown grace is over.
pub(super) fn held(body: Body, slot: Slot, cut: CutAnswer) -> Body {
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
pub(super) fn cut_error(id: &str, grace: Duration) -> Vec<u8> {
    let message = format!(
        "palisade is shutting down: the call did not finish within shutdownGrace ({grace:?})"
    );
    let error = rmcp::ErrorData::new(rmcp::model::ErrorCode(SHUTDOWN_CODE as i32), message, None);
    crate::gateway::agent::front::error_line(id, &error)
}

/// The JSON-RPC error code of a call cut by shutdown after `shutdownGrace`.
pub const SHUTDOWN_CODE: i64 = -32006;
