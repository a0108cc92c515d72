//! Where one line of the agent's goes: relayed by Palisade (a call, a task request, a routed
//! request; an extension's messages, to the one server that keeps its own names), a
//! cancellation, or rmcp's session. Read from the line's envelope (`Head`); an extension's
//! messages are told by rmcp's reading of the line (a method its models do not know).

use std::borrow::Cow;

use rmcp::service::RxJsonRpcMessage;
use rmcp::RoleServer;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::gateway::agent::asking::Answered;
use crate::gateway::state::Shared;

/// The parts of a line the front reads to decide where it goes.
#[derive(Deserialize)]
pub(super) struct Head<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub params: Option<&'a RawValue>,
    /// A response's: the agent answering a question of Palisade's (`agent/asking.rs`).
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

impl Head<'_> {
    /// The id and what the agent sent, when this line answers a question of Palisade's (a
    /// response whose id Palisade gave; rmcp's own requests have number ids).
    pub fn answer(&self) -> Option<(Cow<'_, str>, Answered)> {
        if self.method.is_some() {
            return None;
        }
        let id: Cow<'_, str> = serde_json::from_str(self.id?.get()).ok()?;
        if !crate::gateway::agent::asking::is_question_id(&id) {
            return None;
        }
        let answered = match (self.result, self.error) {
            (Some(result), None) => Answered::Result(result.to_owned()),
            (None, Some(error)) => Answered::Error(serde_json::from_str(error.get()).ok()?),
            _ => return None,
        };
        Some((id, answered))
    }
}

/// Where one line of the agent's goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// A request Palisade relays itself: a call, a task request, a routed request
    /// (`service::READ_RAW`).
    Relay,
    /// A cancellation, maybe of a relayed request.
    Cancel,
    /// rmcp's session takes it.
    Session,
}

/// The task requests Palisade relays itself (`tasks/update` answered with its refusal).
pub(super) fn is_task_method(method: &str) -> bool {
    crate::gateway::call::task_relay::METHODS.contains(&method) || method == "tasks/update"
}

pub(super) fn route(method: Option<&str>, has_id: bool) -> Route {
    match method {
        Some("tools/call") if has_id => Route::Relay,
        Some(m) if has_id && is_task_method(m) => Route::Relay,
        Some(m) if has_id && crate::gateway::agent::service::READ_RAW.contains(&m) => Route::Relay,
        Some("notifications/cancelled") if !has_id => Route::Cancel,
        _ => Route::Session,
    }
}

/// Whether `msg` is a request of a method rmcp does not know (an extension's), other than
/// the stand-in for an over-long line.
pub(super) fn is_extension(msg: &RxJsonRpcMessage<RoleServer>) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Request(r)
            if matches!(&r.request, rmcp::model::ClientRequest::CustomRequest(c)
                if c.method != crate::gateway::agent::frame::OVERSIZED_METHOD)
    )
}

/// Whether `msg` is a notification of a method rmcp does not know (an extension's).
pub(super) fn is_extension_note(msg: &RxJsonRpcMessage<RoleServer>) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Notification(n)
            if matches!(&n.notification, rmcp::model::ClientNotification::CustomNotification(_))
    )
}

/// Sends an extension's notification to the server that keeps its own names, as written.
pub(super) fn notify_extension(head: &Head<'_>, shared: &Shared) {
    let Some(method) = head.method.as_deref() else {
        return;
    };
    let Some(slot) = shared.slots.iter().find(|s| s.filters.unprefixed) else {
        return;
    };
    let Some(live) = slot.snapshot().live else {
        return;
    };
    let (method, params) = (method.to_string(), head.params.map(ToOwned::to_owned));
    tokio::spawn(async move {
        live.conn.peer.notify_raw(&method, params.as_deref()).await;
    });
}

/// Whether an extension's request has a server to go to (the one that keeps its own names)
/// and the session is open.
pub(super) fn extensions_relayed(shared: &Shared) -> bool {
    shared.upstream.get().is_some() && shared.slots.iter().any(|s| s.filters.unprefixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_task_requests_are_relayed_the_rest_goes_to_the_session() {
        assert_eq!(route(Some("tools/call"), true), Route::Relay);
        assert_eq!(route(Some("tasks/result"), true), Route::Relay);
        assert_eq!(route(Some("tools/list"), true), Route::Session);
        assert_eq!(route(Some("prompts/get"), true), Route::Relay);
        assert_eq!(route(Some("completion/complete"), true), Route::Relay);
        assert_eq!(route(Some("initialize"), true), Route::Session);
        // A notification is never a relayed request, whatever its method.
        assert_eq!(route(Some("tools/call"), false), Route::Session);
        assert_eq!(route(Some("notifications/cancelled"), false), Route::Cancel);
        // A response from the agent (to a request of ours) has no method.
        assert_eq!(route(None, true), Route::Session);
    }
}
