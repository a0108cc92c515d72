//! The agent's connection on a byte stream (stdio, or an in-process pipe): Palisade reads
//! each line's envelope itself and answers the requests it relays (`tools/call`, `tasks/*`,
//! and from an agent before 2026-07-28 `prompts/get`, `resources/read`,
//! `resources/(un)subscribe`, `completion/complete`) from the raw line, handing everything
//! else to rmcp's session (handshake, lists, logging, and the requests Palisade sends the
//! agent).
//!
//! Why: rmcp parses a request into its typed model before any handler sees it, and drops
//! what the model does not know: a `tools/call`'s `task` (2025-11-25 tasks) never reached a
//! server, so a tool that requires tasks could not be used, and any newer request field was
//! lost the same way. The calls also skip two task hops through rmcp's service.
//!
//! Shape: a reader task splits lines (the length cap is applied before, `frame`), each
//! answer is written by the task that made it (`LineOut`, one whole line at a time), and
//! `FrontTransport` is the rmcp transport over both. A relayed request runs
//! on its own task with its own cancellation; `notifications/cancelled` for it cancels it;
//! the agent's end (EOF) cancels every one still running.
//!
//! Never: write a line that is not a whole JSON-RPC message; answer a request twice; leave a
//! relayed request running after the agent has gone.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::{mrtr, task_bridge, tasks_v2, versions};
use crate::gateway::call::as_sent::{self, AsSent};
use crate::gateway::line_out::{LineOut, OutLine};
use crate::gateway::raw_json::RawJson;
use crate::gateway::state::Shared;

/// Messages queued for rmcp's session before the reader waits.
const RMCP_QUEUE: usize = 64;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Relayed requests still running, by their id (as JSON text), with their cancellation.
type Running = Arc<Mutex<HashMap<String, CancellationToken>>>;

/// rmcp's side of the front: the messages Palisade does not relay itself, and the way back.
pub struct FrontTransport {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: LineOut,
    shared: Arc<Shared>,
}

/// Starts the reader task over the agent's stream.
pub fn start<R, W>(reader: R, writer: W, shared: Arc<Shared>) -> FrontTransport
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let out = LineOut::new(Box::new(writer), CancellationToken::new());
    shared.upstream.set_lines(out.clone());
    let (in_tx, in_rx) = mpsc::channel(RMCP_QUEUE);
    tokio::spawn(read_lines(reader, in_tx, out.clone(), shared.clone()));
    FrontTransport {
        incoming: in_rx,
        out,
        shared,
    }
}

/// The parts of a line the front reads to decide where it goes.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Where one line of the agent's goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// A request Palisade relays itself: a call, a task request, a routed request
    /// (`service::READ_RAW`).
    Relay,
    /// A cancellation, maybe of a relayed request.
    Cancel,
    /// rmcp's session takes it.
    Session,
}

/// The task requests Palisade relays itself (`tasks/update` answered with its refusal).
fn is_task_method(method: &str) -> bool {
    crate::gateway::call::task_relay::METHODS.contains(&method) || method == "tasks/update"
}

fn route(method: Option<&str>, has_id: bool) -> Route {
    match method {
        Some("tools/call") if has_id => Route::Relay,
        Some(m) if has_id && is_task_method(m) => Route::Relay,
        Some(m) if has_id && crate::gateway::agent::service::READ_RAW.contains(&m) => Route::Relay,
        Some("notifications/cancelled") if !has_id => Route::Cancel,
        _ => Route::Session,
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    reader: R,
    to_session: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    out: LineOut,
    shared: Arc<Shared>,
) {
    let running: Running = Arc::default();
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("the agent's stream failed: {e}");
                break;
            }
        }
        let line = trim(&buf);
        if line.is_empty() {
            continue;
        }
        let Ok(head) = serde_json::from_slice::<Head>(line) else {
            // Not JSON: there is no id to answer, and answering garbage invites a storm.
            tracing::debug!("ignoring an unparsable line from the agent");
            continue;
        };
        match route(head.method.as_deref(), head.id.is_some()) {
            // Before any session exists (a 2026-07-28 agent's first request), rmcp's session
            // takes the request: it is what opens the session.
            Route::Relay if shared.upstream.get().is_some() => {
                relay(&head, &shared, &out, &running)
            }
            Route::Cancel if cancel_relayed(head.params, &running) => {}
            Route::Relay | Route::Cancel | Route::Session => {
                match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
                    // An extension's request, for the server that keeps its own names:
                    // relayed as written, as the others are.
                    Ok(msg) if is_extension(&msg) && extensions_relayed(&shared) => {
                        relay(&head, &shared, &out, &running)
                    }
                    Ok(msg) if is_extension_note(&msg) && extensions_relayed(&shared) => {
                        notify_extension(&head, &shared)
                    }
                    Ok(msg) => {
                        if to_session.send(msg).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::debug!("a message from the agent does not fit MCP: {e}");
                        if let Some(id) = head.id {
                            let err = ErrorData::invalid_request(
                                format!("not a valid MCP message: {e}"),
                                None,
                            );
                            let _ = out.send(error_line(id.get(), &err)).await;
                        }
                    }
                }
            }
        }
    }
    // The agent has gone: nothing it asked for is still wanted.
    for (_, ct) in lock(&running).drain() {
        ct.cancel();
    }
}

/// Whether `msg` is a request of a method rmcp does not know (an extension's), other than
/// the stand-in for an over-long line.
fn is_extension(msg: &RxJsonRpcMessage<RoleServer>) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Request(r)
            if matches!(&r.request, rmcp::model::ClientRequest::CustomRequest(c)
                if c.method != crate::gateway::agent::frame::OVERSIZED_METHOD)
    )
}

/// Whether `msg` is a notification of a method rmcp does not know (an extension's).
fn is_extension_note(msg: &RxJsonRpcMessage<RoleServer>) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Notification(n)
            if matches!(&n.notification, rmcp::model::ClientNotification::CustomNotification(_))
    )
}

/// Sends an extension's notification to the server that keeps its own names, as written.
fn notify_extension(head: &Head<'_>, shared: &Shared) {
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
fn extensions_relayed(shared: &Shared) -> bool {
    shared.upstream.get().is_some() && shared.slots.iter().any(|s| s.filters.unprefixed)
}

fn trim(buf: &[u8]) -> &[u8] {
    let line = buf.strip_suffix(b"\n").unwrap_or(buf);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(UTF8_BOM).unwrap_or(line)
}

fn lock(running: &Running) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
    // Each change is one insert or remove: a panic elsewhere cannot leave it half-changed.
    running
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The map key of a request id: its JSON text, normalised through `RequestId`.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// Cancels the relayed request a `notifications/cancelled` names; `false` when it names
/// none of ours (rmcp's session then takes the notification).
fn cancel_relayed(params: Option<&RawValue>, running: &Running) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Cancelled {
        request_id: RequestId,
    }
    let Some(Ok(c)) = params.map(|p| serde_json::from_str::<Cancelled>(p.get())) else {
        return false;
    };
    match lock(running).get(&id_key(&c.request_id)) {
        Some(ct) => {
            ct.cancel();
            true
        }
        None => false,
    }
}

/// Starts one relayed request on its own task.
fn relay(head: &Head<'_>, shared: &Arc<Shared>, out: &LineOut, running: &Running) {
    let (Some(raw_id), Some(method)) = (head.id, head.method.as_deref()) else {
        return;
    };
    let raw_id: Box<RawValue> = raw_id.to_owned();
    let out = out.clone();
    let Ok(id) = serde_json::from_str::<RequestId>(raw_id.get()) else {
        let err =
            ErrorData::invalid_request("the request id is neither a string nor a number", None);
        tokio::spawn(async move {
            let _ = out.send(error_line(raw_id.get(), &err)).await;
        });
        return;
    };
    let method = method.to_string();
    let params: Option<Box<RawValue>> = head.params.map(ToOwned::to_owned);
    let shared = shared.clone();
    let running = running.clone();
    let ct = CancellationToken::new();
    let key = id_key(&id);
    lock(&running).insert(key.clone(), ct.clone());
    tokio::spawn(async move {
        let answer = match shared.upstream.get() {
            None => Err(ErrorData::invalid_request(
                "the session is not initialized: send `initialize` first",
                None,
            )),
            Some(peer) => {
                let mut ctx = RequestContext::new(id, peer);
                ctx.ct = ct;
                answer(&shared, &method, params.as_deref(), ctx).await
            }
        };
        lock(&running).remove(&key);
        let line = match answer {
            Ok(result) => result_out(raw_id.get(), result),
            Err(e) => error_line(raw_id.get(), &e).into(),
        };
        let _ = out.send(line).await;
    });
}

/// Answers one relayed request.
async fn answer(
    shared: &Arc<Shared>,
    method: &str,
    params: Option<&RawValue>,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    use crate::gateway::call::answer::raw_json;
    if method == "tools/call" {
        let (typed, sent) = call_params(params)?;
        return answer_call(shared, typed, sent, ctx).await;
    }
    // Every other request's `_meta` is read from its params, as rmcp's session would.
    if let Some(meta) = params.and_then(request_meta) {
        ctx.meta = meta;
    }
    if crate::gateway::agent::service::READ_RAW.contains(&method) {
        versions::check_envelope(&ctx.meta)?;
        let upstream = crate::gateway::agent::service::Upstream {
            shared: shared.clone(),
            sessions: None,
        };
        let result = upstream.answer_read(method, params, &ctx).await?;
        if versions::is_modern(&ctx.meta) {
            return Ok(versions::stamp_raw(method, result).into());
        }
        Ok(result.into())
    } else if !is_task_method(method) {
        // Only an extension's request is relayed otherwise (see `read_lines`).
        let upstream = crate::gateway::agent::service::Upstream {
            shared: shared.clone(),
            sessions: None,
        };
        upstream
            .pass_through(method, params, &ctx)
            .await
            .map(RawJson::from)
    } else {
        versions::check_envelope(&ctx.meta)?;
        let modern = versions::is_modern(&ctx.meta);
        let mut result = if modern && tasks_v2::declared(&ctx.meta) {
            task_bridge::answer(shared, method, params, &ctx).await?
        } else if method == "tasks/update" {
            return Err(task_bridge::not_updatable());
        } else {
            crate::gateway::call::task_relay::handle(shared, method, params, &ctx).await?
        };
        if modern {
            versions::stamp_result(method, &mut result);
        }
        Ok(raw_json(&result))
    }
}

/// Answers one `tools/call` from its params already read (`call_params`, or the HTTP
/// front's fast path, which reads them once while deciding to take the call).
pub(crate) async fn answer_call(
    shared: &Arc<Shared>,
    mut typed: rmcp::model::CallToolRequestParams,
    sent: AsSent,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    use crate::gateway::call::answer::raw_json;
    if let Some(meta) = typed.meta.take() {
        ctx.meta = meta;
    }
    versions::check_envelope(&ctx.meta)?;
    let modern = versions::is_modern(&ctx.meta);
    // Counted while it runs: shutdown waits for it so that its audit record is written.
    let _in_flight = shared.calls.token();
    if modern {
        let mut sent = sent;
        // A tool that must run as a task, for an agent with the tasks extension: the
        // server is asked for a 2025-11-25 task, and its handle is given in 2026-07-28.
        let as_task = tasks_v2::declared(&ctx.meta)
            && !sent.extra.contains_key("task")
            && task_bridge::requires_task(shared, &typed.name);
        if as_task {
            // The agent's text does not ask for the task: the params go on re-encoded.
            sent = AsSent::fields(sent.extra);
            sent.extra.insert("task".into(), Value::Object(Map::new()));
        }
        // Its rounds (questions for the agent) are driven by `mrtr`.
        let mut result = mrtr::drive::call(shared.clone(), typed, sent, ctx).await?;
        if as_task {
            if let Some(task) = tasks_v2::created(&result) {
                result = task;
            }
        }
        versions::stamp_result("tools/call", &mut result);
        Ok(raw_json(&result))
    } else {
        // The common case: the result goes on as the bytes the pipeline gives.
        crate::gateway::call::pipeline::call_tool(shared, typed, &sent, ctx).await
    }
}

/// The `_meta` of a request's params, when it has one.
pub(crate) fn request_meta(params: &RawValue) -> Option<rmcp::model::RequestMetaObject> {
    #[derive(Deserialize)]
    struct WithMeta {
        #[serde(rename = "_meta")]
        meta: Option<rmcp::model::RequestMetaObject>,
    }
    serde_json::from_str::<WithMeta>(params.get()).ok()?.meta
}

/// The params fields the typed view of a `tools/call` models; the rest travel as sent.
const MODELED: [&str; 5] = [
    "_meta",
    "name",
    "arguments",
    "inputResponses",
    "requestState",
];

/// A `tools/call`'s params: the typed view policy reads, the fields it does not model, and
/// the text itself when it may go to the server as written (`as_sent::checked`).
pub(crate) fn call_params(
    params: Option<&RawValue>,
) -> Result<(rmcp::model::CallToolRequestParams, AsSent), ErrorData> {
    let invalid =
        |e: serde_json::Error| ErrorData::invalid_params(format!("tools/call: {e}"), None);
    let raw =
        params.ok_or_else(|| ErrorData::invalid_params("tools/call: params are missing", None))?;
    let mut all: Map<String, Value> = serde_json::from_str(raw.get()).map_err(invalid)?;
    let text = as_sent::checked(raw, as_sent::members_of(&all), as_sent::Named::Top);
    let extra: Map<String, Value> = all
        .iter()
        .filter(|(k, _)| !MODELED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    all.retain(|k, _| MODELED.contains(&k.as_str()));
    let typed = serde_json::from_value(Value::Object(all)).map_err(invalid)?;
    Ok((typed, AsSent { extra, text }))
}

/// The agent's answer line up to its result: `{"jsonrpc":"2.0","id":ID,"result":`.
fn result_head(id: &str, extra: usize) -> Vec<u8> {
    let mut line = Vec::with_capacity(id.len() + 32 + extra);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    line.extend_from_slice(id.as_bytes());
    line.extend_from_slice(b",\"result\":");
    line
}

const RESULT_TAIL: &[u8] = b"}\n";

/// The answer line for a result, as one buffer (the HTTP front's body).
pub(crate) fn result_line(id: &str, result: &RawJson) -> Vec<u8> {
    let body = result.get();
    let mut line = result_head(id, body.len() + RESULT_TAIL.len());
    line.extend_from_slice(body.as_bytes());
    line.extend_from_slice(RESULT_TAIL);
    line
}

/// The answer line for a result, its bytes left where they are (in the server's line, for
/// a relayed result): written around them, never copied.
pub(crate) fn result_out(id: &str, result: RawJson) -> OutLine {
    let (body, span) = result.into_parts();
    OutLine::framed(result_head(id, 0), body, span, RESULT_TAIL)
}

pub(crate) fn error_line(id: &str, error: &ErrorData) -> Vec<u8> {
    let body = serde_json::to_string(error).unwrap_or_else(|_| {
        format!(
            "{{\"code\":{},\"message\":\"internal error\"}}",
            ErrorCode::INTERNAL_ERROR.0
        )
    });
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{body}}}\n").into_bytes()
}

/// Why a message could not be sent to the agent.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    #[error("the agent's connection is closed")]
    Closed,
    #[error("cannot encode a message for the agent: {0}")]
    Encode(#[from] serde_json::Error),
}

impl FrontTransport {
    /// A message of rmcp's as one line; `initialize`'s answer also declares the `tasks`
    /// capability the servers have (rmcp's typed capabilities cannot carry it).
    fn encode(&self, item: &TxJsonRpcMessage<RoleServer>) -> Result<Vec<u8>, serde_json::Error> {
        // `server/discover` (2026-07-28) describes the same capabilities.
        let is_initialize = matches!(
            item,
            JsonRpcMessage::Response(r) if matches!(
                r.result,
                ServerResult::InitializeResult(_) | ServerResult::DiscoverResult(_)
            )
        );
        // Only the handshake's answer is patched: every other message is encoded as is.
        let tasks = is_initialize.then(|| self.tasks_capability()).flatten();
        let is_discover = matches!(
            item,
            JsonRpcMessage::Response(r) if matches!(r.result, ServerResult::DiscoverResult(_))
        );
        let mut line = match tasks {
            Some(tasks) => {
                let mut v = serde_json::to_value(item)?;
                if let Some(Value::Object(caps)) = v.pointer_mut("/result/capabilities") {
                    // A 2026-07-28 agent is also offered the tasks extension, bridged.
                    if is_discover && crate::gateway::call::tasks::takes_tool_tasks(Some(&tasks)) {
                        tasks_v2::declare(caps);
                    }
                    caps.insert("tasks".into(), tasks);
                }
                serde_json::to_vec(&v)?
            }
            None => serde_json::to_vec(item)?,
        };
        line.push(b'\n');
        Ok(line)
    }

    fn tasks_capability(&self) -> Option<Value> {
        self.shared.tasks_capability()
    }
}

impl Transport<RoleServer> for FrontTransport {
    type Error = FrontError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), FrontError>> + Send + 'static {
        let line = self.encode(&item);
        let out = self.out.clone();
        async move { out.send(line?).await.map_err(|_| FrontError::Closed) }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), FrontError> {
        self.incoming.close();
        Ok(())
    }
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

    #[test]
    fn unmodeled_call_fields_are_kept_apart_as_sent() {
        let raw = RawValue::from_string(
            r#"{"name":"s__slow","arguments":{"n":1.50},"task":{"ttl":60000},"_meta":{"progressToken":7},"future":true}"#
                .into(),
        )
        .unwrap();
        let (typed, sent) = call_params(Some(&raw)).unwrap();
        assert_eq!(typed.name, "s__slow");
        assert!(typed.meta.is_some());
        assert_eq!(sent.extra.len(), 2);
        assert_eq!(sent.extra["task"], serde_json::json!({"ttl": 60000}));
        assert_eq!(sent.extra["future"], Value::Bool(true));
        assert_eq!(sent.text.as_deref().map(RawValue::get), Some(raw.get()));
    }

    #[test]
    fn a_call_without_a_name_is_invalid_params() {
        let raw = RawValue::from_string(r#"{"arguments":{}}"#.into()).unwrap();
        let e = call_params(Some(&raw)).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(
            call_params(None).unwrap_err().code,
            ErrorCode::INVALID_PARAMS
        );
    }

    #[test]
    fn lines_keep_the_id_as_sent() {
        let raw = crate::gateway::call::answer::raw_json(&serde_json::json!({"x": 1}));
        let line = result_line("\"a-1\"", &raw);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"result\":{\"x\":1}}\n"
        );
        let err = ErrorData::invalid_params("no", None);
        let v: Value = serde_json::from_slice(&error_line("7", &err)).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], -32602);
    }

    #[test]
    fn carriage_returns_and_a_bom_are_trimmed() {
        assert_eq!(trim(b"\xEF\xBB\xBF{}\r\n"), b"{}");
        assert_eq!(trim(b"{}"), b"{}");
    }
}
