//! The fast path's reading of a POST: its body's one message read once (`Posted`: every
//! decision the front makes on the body reads it from there), the revision its headers speak
//! (`headers_fit`, in `http/era.rs`), and what it asks (`asked`), with the typed view handed
//! on to the call pipeline. Pure: no I/O, so each rule is unit-tested here.
//!
//! Never: take what rmcp would read differently. Each check says which of rmcp's it mirrors;
//! whatever does not fit goes to rmcp's path, which refuses it with its own error.

use std::borrow::Cow;

use rmcp::model::{CallToolRequestParams, JsonObject, RequestMetaObject};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::gateway::agent::asking::Answered;
use crate::gateway::agent::service::READ_RAW;
use crate::gateway::agent::{front, tasks_v2, versions};
use crate::gateway::call::as_sent::{self, AsSent};

use super::super::limits;

pub(super) use super::super::era::{headers_fit, Era};

/// What a planned POST asks.
pub(super) enum Asked {
    /// A `tools/call`: the typed view, and what goes to the server besides it (the text
    /// when it may go as written; a 2026-07-28 call's fields the view does not model).
    Call(Box<CallToolRequestParams>, AsSent),
    /// A routed request (`service::READ_RAW`: a prompt, a resource read, a subscription, a
    /// completion), its params as the agent wrote them (`answer_read` reads them).
    Read {
        method: &'static str,
        params: Box<RawValue>,
    },
    /// A list (`LISTS`): answered from the catalog, as the stdio front answers it
    /// (`Catalog::listed`: the servers' own JSON, names rewritten). rmcp's `ServerHandler`
    /// can only answer a list typed, which drops what its models do not know (every
    /// `execution` of a tool, so a task-only tool looked like any other).
    List(&'static str),
    /// A `tasks/*` request (`TASKS`): answered as the stdio front answers it
    /// (`front::answer_task`), from the params as the agent wrote them.
    Task {
        method: &'static str,
        params: Option<Box<RawValue>>,
        meta: Option<RequestMetaObject>,
    },
}

/// The `tasks/*` requests the fast path answers (2025-11-25's, and the tasks extension's
/// `tasks/update`, refused as stdio refuses it).
const TASKS: [&str; 5] = [
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "tasks/update",
];

/// The lists the fast path answers.
const LISTS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// A list request's params as the fast path accepts them: none, or these two fields (what
/// rmcp's `PaginatedRequestParams` reads; a cursor is ignored, as rmcp's path ignores it:
/// every list is given whole).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    /// Read only to leave what is not a string to rmcp's path, which refuses it.
    #[serde(rename = "cursor", default)]
    _cursor: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

/// The envelope of a POST body, read to decide.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Envelope<'a> {
    #[serde(borrow)]
    pub(super) jsonrpc: &'a str,
    /// Present whatever it holds: `"id": null` is a request's (rmcp refuses it), not a
    /// notification's absent id.
    #[serde(borrow, default, deserialize_with = "present")]
    pub(super) id: Option<&'a RawValue>,
    /// Borrowed unless written with escapes (`notifications\/cancelled` is the same method
    /// to rmcp, so it is to the fast path too).
    #[serde(borrow)]
    pub(super) method: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) params: Option<&'a RawValue>,
}

/// A member that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A POST body read once: its message's envelope when the body is one JSON-RPC request or
/// notification with only `jsonrpc`, `id`, `method` and `params` (what every client sends);
/// `None` inside otherwise (a batch, a response, an unknown member, not JSON), and then each
/// reader that needs more falls back to its own lenient read of the body.
pub(in crate::gateway::agent::http) struct Posted<'a>(Option<Envelope<'a>>);

impl<'a> Posted<'a> {
    pub(in crate::gateway::agent::http) fn read(body: &'a [u8]) -> Self {
        Posted(serde_json::from_slice(body).ok())
    }

    pub(super) fn envelope(&self) -> Option<&Envelope<'a>> {
        self.0.as_ref()
    }

    /// Whether the body was read as one message.
    pub(in crate::gateway::agent::http) fn is_one(&self) -> bool {
        self.0.is_some()
    }

    /// The method of the one message.
    pub(in crate::gateway::agent::http) fn method(&self) -> Option<&str> {
        self.0.as_ref().map(|e| &*e.method)
    }

    /// The one notification's method (a message without an id).
    pub(super) fn notification(&self) -> Option<&str> {
        self.0
            .as_ref()
            .filter(|e| e.id.is_none())
            .map(|e| &*e.method)
    }

    /// The ids of the requests the body carries (`limits::request_ids` for a body that is
    /// not one message).
    pub(in crate::gateway::agent::http) fn request_ids(&self, body: &[u8]) -> Vec<Value> {
        match &self.0 {
            Some(env) => env
                .id
                .and_then(|id| serde_json::from_str::<Value>(id.get()).ok())
                .filter(|id| !id.is_null())
                .into_iter()
                .collect(),
            None => limits::request_ids(body),
        }
    }
}

/// A session's common `tools/call` params, read in one pass: only these three fields, each
/// once, typed as `CallToolRequestParams` types them (what `front::call_params` gives for
/// such params, with nothing left over). The name is borrowed, so a name written with
/// escapes does not fit; such params, and any others, are read by `front::call_params`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastParams<'a> {
    name: &'a str,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

/// A body that is one JSON-RPC response with a string id (the agent's answer to a question,
/// `agent/asking.rs`): the id, and the result or the error it carries.
pub(super) fn reply(body: &[u8]) -> Option<(String, Answered)> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Reply {
        jsonrpc: String,
        id: String,
        #[serde(default)]
        result: Option<Box<RawValue>>,
        #[serde(default)]
        error: Option<Value>,
    }
    let reply: Reply = serde_json::from_slice(body).ok()?;
    if reply.jsonrpc != "2.0" {
        return None;
    }
    let answered = match (reply.result, reply.error) {
        (Some(result), None) => Answered::Result(result),
        (None, Some(error)) => Answered::Error(error),
        _ => return None,
    };
    Some((reply.id, answered))
}

/// What a request asks when the fast path takes its method and params in `era`, with the
/// `_meta` it carries; `None`: rmcp's path.
pub(super) fn asked(
    era: Era,
    method: &str,
    params: Option<&RawValue>,
) -> Option<(Asked, Option<RequestMetaObject>)> {
    if method == "tools/call" {
        // The common call (a name, arguments, a `_meta`) is read in one pass; any other
        // (a task, a 2026-07-28 retry's `inputResponses` and `requestState`, a field
        // Palisade does not know) as the stdio front reads it, its other fields forwarded.
        let common = match era {
            Era::Sessions => fast_params(params?).map(|(typed, text)| {
                let sent = AsSent {
                    extra: serde_json::Map::new(),
                    text,
                };
                (typed, sent)
            }),
            Era::Modern => None,
        };
        let (typed, sent) = match common {
            Some(read) => read,
            None => {
                let (typed, sent) = front::call_params(params).ok()?;
                if !meta_fits(era, typed.meta.as_ref()) {
                    return None;
                }
                (typed, sent)
            }
        };
        let meta = typed.meta.clone();
        return Some((Asked::Call(Box::new(typed), sent), meta));
    }
    if let Some(method) = LISTS.iter().find(|m| **m == method) {
        let meta = match params {
            None => None,
            Some(p) => serde_json::from_str::<ListParams>(p.get()).ok()?.meta,
        };
        return meta_fits(era, meta.as_ref()).then_some((Asked::List(method), meta));
    }
    if let Some(method) = TASKS.iter().find(|m| **m == method) {
        let meta = match params {
            None => None,
            Some(p) => front::request_meta(p).ok()?,
        };
        // The tasks extension's requests reach rmcp's path unless the agent declared it
        // (rmcp refuses them then).
        if era == Era::Modern && !meta.as_ref().is_some_and(tasks_v2::declared) {
            return None;
        }
        let task = Asked::Task {
            method,
            params: params.map(RawValue::to_owned),
            meta: meta.clone(),
        };
        return meta_fits(era, meta.as_ref()).then_some((task, meta));
    }
    let method = READ_RAW.iter().find(|m| **m == method)?;
    let params = params?;
    let meta = front::request_meta(params).ok()?;
    let read = Asked::Read {
        method,
        params: params.to_owned(),
    };
    meta_fits(era, meta.as_ref()).then_some((read, meta))
}

/// Whether a request's `_meta` is the fast path's to serve: a progress token, if any, that
/// reads as one (else rmcp's path says why), and, in a session, no key of the per-request
/// envelope (`versions::carries_envelope`: rmcp checks those and may serve the request
/// outside the session; a 2026-07-28 request's envelope is read by `modern::fits`).
fn meta_fits(era: Era, meta: Option<&RequestMetaObject>) -> bool {
    meta.is_none_or(|m| {
        (era == Era::Modern || !versions::carries_envelope(m))
            && (!m.contains_key("progressToken") || m.get_progress_token().is_some())
    })
}

/// Whether a request asks for progress (its answer is then a stream).
pub(super) fn asks_progress(meta: Option<&RequestMetaObject>) -> bool {
    meta.is_some_and(|m| m.get_progress_token().is_some())
}

/// The typed view of params with only a name, arguments (an object, if any) and a `_meta`
/// that fits (`meta_fits`); `None`: rmcp's path (which says why, if it refuses).
/// The typed view, and the text when it may go to the server as written (`as_sent`).
fn fast_params(params: &RawValue) -> Option<(CallToolRequestParams, Option<Box<RawValue>>)> {
    let p = serde_json::from_str::<FastParams<'_>>(params.get()).ok()?;
    if !meta_fits(Era::Sessions, p.meta.as_ref()) {
        return None;
    }
    // The members the decoder kept: the top level's (serde refuses a field given twice, and
    // any unknown one), and those inside `arguments` and `_meta`.
    let mut top = 0;
    let _ = crate::gateway::json_scan::object_members(params.get().as_bytes(), |_, _| {
        top += 1;
        Some(())
    });
    let inside =
        |m: Option<&serde_json::Map<String, serde_json::Value>>| m.map_or(0, as_sent::members_of);
    let decoded = top + inside(p.arguments.as_ref()) + inside(p.meta.as_ref().map(|m| &m.0 .0));
    let text = as_sent::checked(params, decoded, as_sent::Named::Top);
    let mut typed = CallToolRequestParams::new(p.name.to_owned());
    typed.arguments = p.arguments;
    typed.meta = p.meta;
    Some((typed, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2026_call_is_read_whole_and_a_session_call_without_its_envelope() {
        let raw = |s: &str| RawValue::from_string(s.into()).unwrap();
        let envelope = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        // A retry's fields travel with a 2026-07-28 call.
        let retry = raw(&format!(
            r#"{{"name":"fs__stat","inputResponses":{{"a":{{}}}},"requestState":"s",{envelope}}}"#
        ));
        let (asked_, meta) = asked(Era::Modern, "tools/call", Some(&retry)).unwrap();
        assert!(meta.is_some());
        let Asked::Call(typed, _) = asked_ else {
            panic!("not a call")
        };
        assert_eq!(typed.name, "fs__stat");
        // A session's call with a task (or a field Palisade does not know) is read whole
        // too, the field forwarded; params the typed view refuses are rmcp's to refuse.
        let task = raw(r#"{"name":"fs__stat","task":{"ttl":1},"future":1}"#);
        let Some((Asked::Call(_, sent), _)) = asked(Era::Sessions, "tools/call", Some(&task))
        else {
            panic!("not a call")
        };
        assert_eq!(sent.extra.len(), 2);
        let bad = raw(r#"{"name":"fs__stat","arguments":[1]}"#);
        assert!(asked(Era::Sessions, "tools/call", Some(&bad)).is_none());
        // The envelope in a session's request is rmcp's to judge.
        let in_session = raw(&format!(r#"{{"name":"fs__stat",{envelope}}}"#));
        assert!(asked(Era::Sessions, "tools/call", Some(&in_session)).is_none());
        // Lists, with or without params, in both eras.
        assert!(asked(Era::Sessions, "tools/list", None).is_some());
        let list = raw(&format!(r#"{{"cursor":"c",{envelope}}}"#));
        assert!(asked(Era::Modern, "resources/list", Some(&list)).is_some());
        assert!(asked(Era::Sessions, "tools/list", Some(&raw(r#"{"cursor":1}"#))).is_none());
        assert!(asked(Era::Sessions, "tools/list", Some(&raw(r#"{"more":1}"#))).is_none());
        // What the fast path does not answer.
        assert!(asked(Era::Modern, "server/discover", Some(&list)).is_none());
    }

    #[test]
    fn a_body_is_read_once_and_what_it_does_not_take_is_read_leniently() {
        let call = br#"{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{}}"#;
        let posted = Posted::read(call);
        assert!(posted.is_one());
        assert_eq!(posted.method(), Some("tools/call"));
        assert_eq!(posted.notification(), None);
        assert_eq!(posted.request_ids(call), vec![Value::from("c-1")]);
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let posted = Posted::read(note);
        assert_eq!(posted.notification(), Some("notifications/initialized"));
        assert!(posted.request_ids(note).is_empty());
        // A method written with escapes is the same method, as rmcp reads it.
        let escaped = br#"{"jsonrpc":"2.0","method":"notifications\/cancelled"}"#;
        assert_eq!(
            Posted::read(escaped).notification(),
            Some("notifications/cancelled")
        );
        // A response is never one message: it has no method.
        let response = br#"{"jsonrpc":"2.0","id":"palisade-question-1","result":{}}"#;
        assert!(!Posted::read(response).is_one());
        // A batch, or a member the envelope does not know: the ids are read leniently.
        let batch =
            br#"[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":3,"result":{}}]"#;
        let posted = Posted::read(batch);
        assert!(!posted.is_one());
        assert_eq!(posted.request_ids(batch), vec![Value::from(4)]);
        let odd = br#"{"jsonrpc":"2.0","id":5,"method":"ping","x":1}"#;
        assert_eq!(Posted::read(odd).request_ids(odd), vec![Value::from(5)]);
        // `"id": null` is not a notification (rmcp reads it as a request and refuses it).
        let null = br#"{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled"}"#;
        let posted = Posted::read(null);
        assert!(posted.is_one());
        assert_eq!(posted.notification(), None);
        assert!(posted.request_ids(null).is_empty());
    }

    #[test]
    fn a_reply_is_one_response_with_a_string_id_and_a_result_or_an_error() {
        let got =
            |b: &str| reply(b.as_bytes()).map(|(id, a)| (id, matches!(a, Answered::Result(_))));
        assert_eq!(
            got(r#"{"jsonrpc":"2.0","id":"q-1","result":{"action":"accept"}}"#),
            Some(("q-1".into(), true))
        );
        assert_eq!(
            got(r#"{"jsonrpc":"2.0","id":"q-1","error":{"code":-1,"message":"no"}}"#),
            Some(("q-1".into(), false))
        );
        // rmcp's own (number ids), both or neither, a request, another member: not ours.
        for b in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"q","result":{},"error":{}}"#,
            r#"{"jsonrpc":"2.0","id":"q"}"#,
            r#"{"jsonrpc":"2.0","id":"q","method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":"q","result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":"q","result":{}}]"#,
        ] {
            assert!(got(b).is_none(), "{b}");
        }
    }

    #[test]
    fn only_plain_call_params_fit() {
        let fits = |s: &str| fast_params(&RawValue::from_string(s.into()).unwrap()).is_some();
        assert!(fits(r#"{"name":"fs__stat","arguments":{"path":"/x"}}"#));
        assert!(fits(r#"{"name":"fs__stat","_meta":{"trace":"a"}}"#));
        // A progress token is answered on the POST's own stream; one that is not a token
        // is rmcp's to refuse.
        assert!(fits(r#"{"name":"fs__stat","_meta":{"progressToken":1}}"#));
        assert!(!fits(
            r#"{"name":"fs__stat","_meta":{"progressToken":[1]}}"#
        ));
        // A 2026-07-28 call is driven in rounds, and any envelope key is rmcp's to check.
        assert!(!fits(
            r#"{"name":"fs__stat","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
        ));
        assert!(!fits(
            r#"{"name":"fs__stat","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#
        ));
        // A bare `protocolVersion` is no envelope key: an ordinary `_meta` member.
        assert!(fits(
            r#"{"name":"fs__stat","_meta":{"protocolVersion":"2026-07-28"}}"#
        ));
        // A task-augmented call, or a field Palisade does not know.
        assert!(!fits(r#"{"name":"fs__stat","task":{"ttl":1}}"#));
        assert!(!fits(r#"{"name":"fs__stat","future":1}"#));
        assert!(!fits(r#"{"arguments":{}}"#));
        // What the typed view refuses, or what the borrowed read could not take, is rmcp's.
        assert!(!fits(r#"{"name":"fs__stat","arguments":[1]}"#));
        assert!(!fits(r#"{"name":"fs__stat","_meta":5}"#));
        assert!(!fits(r#"{"name":"fs__stat","name":"fs__read"}"#));
        assert!(!fits(r#"{"name":"fs__st\u0061t"}"#));
        assert!(fits(r#"{"name":"fs__stat","arguments":null,"_meta":null}"#));
    }

    #[test]
    fn the_view_handed_on_is_the_one_the_stdio_front_reads() {
        for s in [
            r#"{"name":"fs__stat","arguments":{"path":"/x","n":1.50,"deep":{"b":1,"a":[2]}}}"#,
            r#"{"_meta":{"trace":"a"},"name":"fs__stat"}"#,
            r#"{"name":"fs__stat","arguments":null,"_meta":null}"#,
        ] {
            let raw = RawValue::from_string(s.into()).unwrap();
            let fast = fast_params(&raw).unwrap();
            let (typed, sent) = front::call_params(Some(&raw)).unwrap();
            assert_eq!(fast.0, typed, "{s}");
            assert!(sent.extra.is_empty(), "{s}");
            assert_eq!(
                fast.1.as_deref().map(RawValue::get),
                sent.text.as_deref().map(RawValue::get),
                "{s}"
            );
            // Byte for byte, key order included.
            assert_eq!(
                serde_json::to_string(&fast.0).unwrap(),
                serde_json::to_string(&typed).unwrap()
            );
        }
    }
}
