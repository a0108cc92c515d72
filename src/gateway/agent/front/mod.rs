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
//! Shape: a reader task splits lines (the length cap is applied before, `frame`) and sends
//! each where `route` says; a relayed request is answered by `answer` on its own task with
//! its own cancellation (`notifications/cancelled` for it cancels it; the agent's end, EOF,
//! cancels every one still running), and its answer is written as one whole line (`lines`,
//! `LineOut`). `FrontTransport` is rmcp's transport over the rest.
//!
//! Never: write a line that is not a whole JSON-RPC message; answer a request twice; leave a
//! relayed request running after the agent has gone.
//!
//! Palisade's own questions to the agent (a server's relayed sampling or elicitation) go on
//! the same stream (`agent/asking.rs`), and the reader hands their answers back as the agent
//! wrote them, before rmcp's session could re-type them.

mod answer;
mod lines;
mod route;

use std::sync::Arc;

use rmcp::model::{ErrorData, JsonRpcMessage, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::{asking, tasks_v2};
use crate::gateway::busy_poll::BusyPoll;
use crate::gateway::line_out::LineOut;
use crate::gateway::state::Shared;

pub(crate) use answer::{answer_call, answer_routed, answer_task};
// The HTTP front's fast path reads a 2026-07-28 call as this front reads one.
pub(crate) use answer::{call_params, request_meta};
pub(crate) use lines::{error_line, result_line};

use answer::{cancel_relayed, relay, Running};
use route::{
    extensions_relayed, is_extension, is_extension_note, notify_extension, route, Head, Route,
};

/// Messages queued for rmcp's session before the reader waits.
const RMCP_QUEUE: usize = 64;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// rmcp's side of the front: the messages Palisade does not relay itself, and the way back.
pub struct FrontTransport {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: LineOut,
    shared: Arc<Shared>,
}

/// Starts the reader task over the agent's stream.
pub fn start<R, W>(
    reader: R,
    writer: W,
    shared: Arc<Shared>,
    busy: Option<Arc<BusyPoll>>,
) -> FrontTransport
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let out = LineOut::new(Box::new(writer), CancellationToken::new());
    shared.upstream.set_lines(out.clone());
    let (in_tx, in_rx) = mpsc::channel(RMCP_QUEUE);
    tokio::spawn(read_lines(reader, in_tx, out.clone(), shared.clone(), busy));
    FrontTransport {
        incoming: in_rx,
        out,
        shared,
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    reader: R,
    to_session: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    out: LineOut,
    shared: Arc<Shared>,
    busy: Option<Arc<BusyPoll>>,
) {
    let running: Running = Running::default();
    let busy = busy.as_ref();
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
        if let Some((id, answered)) = head.answer() {
            let questions = shared.upstream.questions();
            if questions.answer(asking::LINES_SESSION, &id, answered) {
                continue;
            }
            // A late answer (its question gave up): rmcp's session knows no such id either.
            tracing::debug!("an answer from the agent to no open question ({id})");
            continue;
        }
        match route(head.method.as_deref(), head.id.is_some()) {
            // Before any session exists (a 2026-07-28 agent's first request), rmcp's session
            // takes the request: it is what opens the session.
            Route::Relay if shared.upstream.get().is_some() => {
                relay(&head, &shared, &out, &running, busy)
            }
            Route::Cancel if cancel_relayed(head.params, &running) => {}
            Route::Relay | Route::Cancel | Route::Session => {
                match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
                    // An extension's request, for the server that keeps its own names:
                    // relayed as written, as the others are.
                    Ok(msg) if is_extension(&msg) && extensions_relayed(&shared) => {
                        relay(&head, &shared, &out, &running, busy)
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
    // The agent has gone: nothing it asked for is still wanted, and nothing Palisade asked
    // it will be answered.
    running.cancel_all();
    shared.upstream.lines_ended();
}

fn trim(buf: &[u8]) -> &[u8] {
    let line = buf.strip_suffix(b"\n").unwrap_or(buf);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(UTF8_BOM).unwrap_or(line)
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
    fn carriage_returns_and_a_bom_are_trimmed() {
        assert_eq!(trim(b"\xEF\xBB\xBF{}\r\n"), b"{}");
        assert_eq!(trim(b"{}"), b"{}");
    }
}
