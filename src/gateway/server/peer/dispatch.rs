//! The reader's side of a server's connection: each line the tap passes on routed by its
//! envelope alone (`envelope.rs`). A response goes to the request waiting for it, its result
//! kept as a slice of the line; progress goes in stream order, awaited before the next line
//! (a call's progress reaches the agent before its result); a cancellation ends the server's
//! request it names; other notifications and the server's own requests go to the `Inbound`
//! handler, each request answered on its own task.
//!
//! Never: answer a request the server cancelled, or answer one twice.

use std::sync::Arc;

use rmcp::model::RequestId;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Inbound, Reply, ServerPeer};
use crate::gateway::raw_json::RawJson;
use crate::gateway::server::envelope::{Kind, LineText};

/// The id we gave a request, from the id the server echoes (a number, or its decimal string).
fn our_id(text: &str) -> Option<u64> {
    text.parse::<u64>()
        .ok()
        .or_else(|| serde_json::from_str::<String>(text).ok()?.parse().ok())
}

/// Where `part`, a slice of `whole`, lies in it (`None` if it is not one).
fn span_in(whole: &str, part: &str) -> Option<std::ops::Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let span = start..start + part.len();
    // In bounds and on character boundaries: then it is `part` itself (same start, length).
    whole.get(span.clone()).map(|_| span)
}

/// Routes each line the tap passes on.
pub(super) struct Dispatch {
    pub peer: Arc<ServerPeer>,
    pub inbound: Arc<dyn Inbound>,
}

impl crate::gateway::server::tap::LineSink for Dispatch {
    async fn line(&self, line: Vec<u8>) {
        // Checked once here; the text (and a result's span of it) moves on as it is.
        let Ok(line) = LineText::new(line) else {
            tracing::debug!(server = %self.peer.server, "unreadable message ignored: not UTF-8");
            return;
        };
        let kind = line.classify();
        let text = line.as_str();
        match kind {
            Kind::Response { id, reply, said } => {
                let Some(id) = our_id(id) else {
                    tracing::debug!(server = %self.peer.server, "response to an id we never sent: {id}");
                    return;
                };
                let Some(tx) = self.peer.lock_pending().remove(&id) else {
                    // Timed out or cancelled already.
                    return;
                };
                let reply = match reply {
                    Ok(result) => Reply::Result(match span_in(text, result) {
                        Some(span) => RawJson::received(line.into_string(), span, said),
                        // Not a slice of the line (never, from the scanner or serde): a copy.
                        None => RawJson::received(result.to_string(), 0..result.len(), said),
                    }),
                    Err(e) => Reply::Error(e),
                };
                let _ = tx.send(reply);
            }
            Kind::Notification { method, params } => {
                if method == "notifications/progress" {
                    self.inbound.progress(text.as_bytes()).await;
                    return;
                }
                if method == "notifications/cancelled" {
                    let id = params
                        .and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
                        .and_then(|m| m.get("requestId").map(Value::to_string));
                    if let Some(ct) = id.and_then(|id| self.peer.lock_inbound().remove(&id)) {
                        ct.cancel();
                    }
                    return;
                }
                self.inbound.notification(method, params).await;
            }
            Kind::Request { id, method, params } => {
                let Ok(id) = serde_json::from_str::<RequestId>(id.get()) else {
                    tracing::debug!(server = %self.peer.server, "request with an unusable id ignored");
                    return;
                };
                let key = serde_json::to_string(&id).unwrap_or_default();
                let ct = self.peer.closed.child_token();
                self.peer.lock_inbound().insert(key.clone(), ct.clone());
                let method = method.to_string();
                let params: Option<Box<RawValue>> = params.map(RawValue::to_owned);
                let peer = self.peer.clone();
                let inbound = self.inbound.clone();
                tokio::spawn(async move {
                    let answer = inbound
                        .request(&method, params.as_deref(), id.clone(), ct.clone())
                        .await;
                    peer.lock_inbound().remove(&key);
                    // A request the server cancelled (or a connection gone) gets no answer.
                    if !ct.is_cancelled() {
                        peer.respond(&id, answer).await;
                    }
                });
            }
            Kind::Invalid(why) => {
                tracing::debug!(server = %self.peer.server, "unreadable message ignored: {why}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::server::envelope::classify;

    #[test]
    fn lines_are_classified_by_their_envelope_only() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":3,"result":{"x":1.0,"a":1}}"#),
            Kind::Response { .. }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":"r1","method":"roots/list"}"#),
            Kind::Request {
                method: "roots/list",
                ..
            }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
            Kind::Notification {
                method: "notifications/tools/list_changed",
                ..
            }
        ));
        assert!(matches!(classify(b"not json"), Kind::Invalid(_)));
        assert!(matches!(
            classify(br#"{"jsonrpc":"1.0","method":"x"}"#),
            Kind::Invalid(_)
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1}"#),
            Kind::Invalid(_)
        ));
    }

    #[test]
    fn echoed_ids_are_ours_as_numbers_or_decimal_strings() {
        let n = serde_json::value::to_raw_value(&7).unwrap();
        let s = serde_json::value::to_raw_value(&"7").unwrap();
        let x = serde_json::value::to_raw_value(&"seven").unwrap();
        assert_eq!(our_id(n.get()), Some(7));
        assert_eq!(our_id(s.get()), Some(7));
        assert_eq!(our_id(x.get()), None);
    }
}
