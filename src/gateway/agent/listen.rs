//! A 2026-07-28 agent's `subscriptions/listen` (over stdio): the stream on which it hears that
//! the gateway's lists changed.
//!
//! 2026-07-28 has no session to send notifications in: a client that wants them opens a
//! `subscriptions/listen` request naming the kinds it wants. The gateway acknowledges first
//! (`notifications/subscriptions/acknowledged`, with the kinds it will honour: the three list
//! kinds), then sends each catalog change of a wanted kind, every frame tagged with the
//! listen request's id under `_meta["io.modelcontextprotocol/subscriptionId"]`. The stream
//! ends when the agent cancels the request (no answer, as for any cancelled request) or the
//! gateway shuts down (an empty result).
//!
//! Never: send a kind the agent did not ask for; leave the stream running after the agent's
//! end (the front cancels every running request then).

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::gateway::line_out::LineOut;
use crate::gateway::state::{Changed, Shared};

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The list kinds a listen request asks for that the gateway honours, under their filter
/// names. Pure.
pub fn honoured(params: Option<&RawValue>) -> Map<String, Value> {
    let wanted: Map<String, Value> = params
        .and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
        .and_then(|p| p.get("notifications").cloned())
        .and_then(|n| match n {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ]
    .into_iter()
    .filter(|k| wanted.get(*k) == Some(&Value::Bool(true)))
    .map(|k| (k.to_string(), Value::Bool(true)))
    .collect()
}

/// The notifications one catalog change sends on a stream that honours `kinds`. Pure.
pub fn notifications(changed: Changed, kinds: &Map<String, Value>) -> Vec<&'static str> {
    [
        (
            changed.tools,
            "toolsListChanged",
            "notifications/tools/list_changed",
        ),
        (
            changed.prompts,
            "promptsListChanged",
            "notifications/prompts/list_changed",
        ),
        (
            changed.resources,
            "resourcesListChanged",
            "notifications/resources/list_changed",
        ),
    ]
    .into_iter()
    .filter(|(hit, kind, _)| *hit && kinds.contains_key(*kind))
    .map(|(_, _, method)| method)
    .collect()
}

/// One notification line of the stream `id` (the listen request's id, as JSON text).
fn frame(method: &str, id: &str, params: Map<String, Value>) -> Vec<u8> {
    let mut params = params;
    let mut meta = Map::new();
    // The id as the agent sent it (a number or a string); unreadable ids never get here.
    meta.insert(
        SUBSCRIPTION_ID.into(),
        serde_json::from_str(id).unwrap_or(Value::Null),
    );
    params.insert("_meta".into(), Value::Object(meta));
    let msg = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params});
    let mut line = serde_json::to_vec(&msg).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Serves one listen stream until `ct` (the agent's cancel or end) or the gateway's
/// shutdown; the result line to send at the end, if any.
pub async fn stream(
    shared: &Shared,
    id: &str,
    params: Option<&RawValue>,
    out: &LineOut,
    ct: &CancellationToken,
) -> Option<Value> {
    let kinds = honoured(params);
    // Subscribed before the acknowledgement: no change after it can be missed.
    let mut events = shared.list_events.subscribe();
    let mut ack = Map::new();
    ack.insert("notifications".into(), Value::Object(kinds.clone()));
    if out
        .send(frame("notifications/subscriptions/acknowledged", id, ack))
        .await
        .is_err()
    {
        return None;
    }
    loop {
        let changed = tokio::select! {
            _ = ct.cancelled() => return None,
            _ = shared.shutdown.cancelled() => return Some(Value::Object(Map::new())),
            e = events.recv() => match e {
                Ok(c) => c,
                // Fell behind: say every kind changed (a list again is always safe).
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Changed {
                    tools: true,
                    prompts: true,
                    resources: true,
                },
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Some(Value::Object(Map::new()))
                }
            },
        };
        for method in notifications(changed, &kinds) {
            if out.send(frame(method, id, Map::new())).await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    #[test]
    fn only_the_list_kinds_asked_for_are_honoured() {
        let asked = raw(serde_json::json!({"notifications": {
            "toolsListChanged": true, "promptsListChanged": false, "taskIds": ["x"]}}));
        let kinds = honoured(Some(&asked));
        assert_eq!(
            Value::Object(kinds.clone()),
            serde_json::json!({"toolsListChanged": true})
        );
        let all = Changed {
            tools: true,
            prompts: true,
            resources: true,
        };
        assert_eq!(
            notifications(all, &kinds),
            ["notifications/tools/list_changed"]
        );
        assert!(honoured(None).is_empty());
    }

    #[test]
    fn every_frame_carries_the_listen_requests_id() {
        let line = frame("notifications/tools/list_changed", "\"l-1\"", Map::new());
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["params"]["_meta"][SUBSCRIPTION_ID], "l-1");
        let line = frame("x", "7", Map::new());
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["params"]["_meta"][SUBSCRIPTION_ID], 7);
    }
}
