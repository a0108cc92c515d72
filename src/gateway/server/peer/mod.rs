//! The gateway's JSON-RPC client for one downstream server: Palisade's own, not rmcp's.
//!
//! Why our own: rmcp's client parses every message into its typed models, which drop what
//! they do not know (a tool's `execution`, a future result field) and re-encode what they
//! keep (`"priority": 1` became `1.0`, keys re-ordered). The gateway must relay what it does
//! not police as it was sent, so this peer reads only the envelope of each line (`id`,
//! `method`, where `params`/`result` lie: `envelope.rs`) and hands results on as the bytes
//! received: the line the tap read moves into the reply (`RawJson`), never copied; callers
//! take typed views of the few they police. It also removes two hops per message (rmcp's
//! service task and the tap's pipe to it).
//!
//! Shape: callers write their lines to the server's stdin themselves (`LineOut`, watched for
//! stalls), and `start` spawns a reader task (`tap::read_lines` charges and polices each line,
//! then `dispatch` routes it: a response to the request waiting for it, progress in stream
//! order, other notifications and the server's own requests to the `Inbound` handler).
//!
//! Never: send a request without a timeout; leave a waiting request unanswered when the
//! server goes (every pending sender is dropped, which the waiter reads as "closed"); hold a
//! lock across an await; write anything on stdout of our own.

mod dispatch;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ErrorData, NumberOrString, ProgressToken, RequestId};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::gateway::line_out::LineOut;
use crate::gateway::raw_json::RawJson;
use crate::gateway::server::fault::ProcessFaults;
use dispatch::Dispatch;

/// What a request got back.
#[derive(Debug)]
pub enum Reply {
    /// The `result`, as the bytes the server sent (a slice of the line it came in).
    Result(RawJson),
    /// The server's JSON-RPC error.
    Error(ErrorData),
}

/// Why a request got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReply {
    Timeout,
    Cancelled,
    /// The server's connection ended (or was never writable).
    Closed,
}

/// What the server sends the gateway besides responses, handled by the owner.
pub trait Inbound: Send + Sync + 'static {
    /// A request from the server (`roots/list`, sampling, elicitation, `ping`…). `cancel`
    /// fires when the server cancels it or goes away.
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        id: RequestId,
        cancel: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ErrorData>> + Send + 'a>>;

    /// A notification other than progress (which the reader routes itself, in order).
    fn notification<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

    /// A progress notification, awaited before the next line is read so that a call's
    /// progress always reaches the agent before its result.
    fn progress<'a>(&'a self, line: &'a [u8]) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// One downstream connection's request side. Shared by every caller (`Arc`).
pub struct ServerPeer {
    server: String,
    /// The server's stdin. A server that stops reading stalls its callers (backpressure, not
    /// a buffer), whose requests time out.
    out: LineOut,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    /// Requests the server sent us that are still being answered, by id (as JSON text).
    inbound: Mutex<HashMap<String, CancellationToken>>,
    next_id: AtomicU64,
    /// Fires when the connection ends (reader at EOF or fault, writer failed or stopped).
    closed: CancellationToken,
    /// Fires to close the server's stdin (a graceful stop).
    stop: CancellationToken,
}

impl Drop for ServerPeer {
    fn drop(&mut self) {
        // Nobody can send on it any more: the server's stdin closes.
        self.stop.cancel();
    }
}

impl std::fmt::Debug for ServerPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPeer")
            .field("server", &self.server)
            .field("closed", &self.closed.is_cancelled())
            .finish()
    }
}

#[derive(Serialize)]
struct OutRequest<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

#[derive(Serialize)]
struct OutNotification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

#[derive(Serialize)]
struct OutResponse<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorData>,
}

impl ServerPeer {
    /// Starts the reader task over a server's pipes.
    pub fn start<R, W>(
        server: &str,
        stdout: R,
        stdin: W,
        faults: Arc<ProcessFaults>,
        inbound: Arc<dyn Inbound>,
    ) -> Arc<ServerPeer>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let closed = CancellationToken::new();
        let stop = CancellationToken::new();
        let stdin = crate::gateway::server::stdin_watch::Watched::new(stdin, faults.stdin.clone());
        // A failed write means the server is gone: the connection is closed.
        let out = LineOut::new(Box::new(stdin), closed.clone());
        let peer = Arc::new(ServerPeer {
            server: server.to_string(),
            out: out.clone(),
            pending: Mutex::new(HashMap::new()),
            inbound: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            closed: closed.clone(),
            stop: stop.clone(),
        });
        // The server's stdin closes at a stop and when the connection has ended (the server
        // may still answer after its stdin closes; the reader ends the connection at its EOF).
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = closed.cancelled() => {}
            }
            out.shutdown().await;
        });
        let reader_peer = peer.clone();
        tokio::spawn(async move {
            let sink = Dispatch {
                peer: reader_peer.clone(),
                inbound,
            };
            crate::gateway::server::tap::read_lines(&reader_peer.server, stdout, &faults, &sink)
                .await;
            reader_peer.end();
        });
        peer
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// True once the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves when the connection ends.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    /// A token cancelled when the connection ends (for work done on the server's behalf).
    pub fn connection_token(&self) -> CancellationToken {
        self.closed.child_token()
    }

    /// Closes the server's stdin (it should exit); waiting requests end as closed.
    pub fn close(&self) {
        self.stop.cancel();
    }

    /// The connection ended: every waiting request is told (its sender dropped).
    fn end(&self) {
        self.closed.cancel();
        let waiting: Vec<_> = self.lock_pending().drain().collect();
        drop(waiting);
        for (_, ct) in self.lock_inbound().drain() {
            ct.cancel();
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Reply>>> {
        // Plain map edits: a poisoned lock still holds a consistent map.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_inbound(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inbound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id the next request will carry (a progress token is minted from it before sending).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The progress token a request with `id` carries downstream.
    pub fn progress_token(id: u64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(id as i64))
    }

    /// Sends request `id` (from `next_id`) and waits for its reply, at most `timeout`;
    /// `cancel` abandons it. Either way the server is told (`notifications/cancelled`).
    pub async fn request(
        &self,
        id: u64,
        method: &str,
        params: Option<&Value>,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<Reply, NoReply> {
        let line = encode(&OutRequest {
            jsonrpc: "2.0",
            id,
            method,
            params,
        });
        self.request_line(id, line, timeout, cancel).await
    }

    /// As `request`, with params that are JSON text already (written as they are).
    pub async fn request_text(
        &self,
        id: u64,
        method: &str,
        params: &str,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<Reply, NoReply> {
        let mut line = Vec::with_capacity(params.len() + method.len() + 64);
        line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        line.extend_from_slice(id.to_string().as_bytes());
        line.extend_from_slice(b",\"method\":");
        // A method name of ours: serialising a string cannot fail.
        line.extend_from_slice(&serde_json::to_vec(method).unwrap_or_default());
        line.extend_from_slice(b",\"params\":");
        line.extend_from_slice(params.as_bytes());
        line.extend_from_slice(b"}\n");
        self.request_line(id, line, timeout, cancel).await
    }

    /// Sends `line`, request `id`, and waits for its reply (see `request`).
    async fn request_line(
        &self,
        id: u64,
        line: Vec<u8>,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<Reply, NoReply> {
        if self.is_closed() {
            return Err(NoReply::Closed);
        }
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(id, tx);
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let deadline = tokio::time::Instant::now() + timeout;
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(NoReply::Cancelled),
            _ = tokio::time::sleep_until(deadline) => Err(NoReply::Timeout),
            r = async {
                if self.out.send(line).await.is_err() {
                    return Err(NoReply::Closed);
                }
                rx.await.map_err(|_| NoReply::Closed)
            } => r,
        };
        if outcome.is_err() {
            self.lock_pending().remove(&id);
        }
        match outcome {
            Err(why @ (NoReply::Timeout | NoReply::Cancelled)) => {
                let reason = if why == NoReply::Timeout {
                    "timed out"
                } else {
                    "cancelled by the client"
                };
                let params = serde_json::json!({"requestId": id, "reason": reason});
                self.notify("notifications/cancelled", Some(&params)).await;
                Err(why)
            }
            other => other,
        }
    }

    /// Sends a notification; dropped (with a debug line) when the connection is gone or the
    /// write queue stays full for a second.
    pub async fn notify(&self, method: &str, params: Option<&Value>) {
        let line = encode(&OutNotification {
            jsonrpc: "2.0",
            method,
            params,
        });
        self.send_note(method, line).await
    }

    /// As `notify`, with params as the agent wrote them (an extension's notification).
    pub async fn notify_raw(&self, method: &str, params: Option<&RawValue>) {
        let line = match params {
            Some(p) => crate::gateway::server::note_line::line(method, p.get()),
            None => encode(&OutNotification {
                jsonrpc: "2.0",
                method,
                params: None,
            }),
        };
        self.send_note(method, line).await
    }

    async fn send_note(&self, method: &str, line: Vec<u8>) {
        match tokio::time::timeout(Duration::from_secs(1), self.out.send(line)).await {
            Ok(Ok(())) => {}
            _ => {
                tracing::debug!(server = %self.server, "{method} not sent: the connection is gone or not reading")
            }
        }
    }

    async fn respond(&self, id: &RequestId, answer: Result<Box<RawValue>, ErrorData>) {
        let (result, error) = match &answer {
            Ok(v) => (Some(&**v), None),
            Err(e) => (None, Some(e)),
        };
        let line = encode(&OutResponse {
            jsonrpc: "2.0",
            id,
            result,
            error,
        });
        if self.out.send(line).await.is_err() {
            tracing::debug!(server = %self.server, "answer to the server's request not sent: the connection is gone");
        }
    }
}

fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serializing our own structs of strings, numbers and `Value`s cannot fail.
    let mut line = serde_json::to_vec(msg).unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorCode;
    use tokio::io::AsyncWriteExt;

    struct Quiet;
    impl Inbound for Quiet {
        fn request<'a>(
            &'a self,
            method: &'a str,
            _params: Option<&'a RawValue>,
            _id: RequestId,
            _cancel: CancellationToken,
        ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ErrorData>> + Send + 'a>> {
            Box::pin(async move {
                Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    method.to_string(),
                    None,
                ))
            })
        }
        fn notification<'a>(
            &'a self,
            _method: &'a str,
            _params: Option<&'a RawValue>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
            Box::pin(async {})
        }
        fn progress<'a>(
            &'a self,
            _line: &'a [u8],
        ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
            Box::pin(async {})
        }
    }

    /// A result arrives as the bytes the server wrote: number spellings, key order and
    /// fields no model knows survive (the reason this peer exists).
    #[tokio::test]
    async fn results_are_relayed_as_the_bytes_received() {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let (server_in, gateway_out) = tokio::io::duplex(1 << 16);
        let (mut server_out, gateway_in) = tokio::io::duplex(1 << 16);
        let faults = Arc::new(ProcessFaults::new("t", u64::MAX / 16));
        let peer = ServerPeer::start("t", gateway_in, gateway_out, faults, Arc::new(Quiet));
        let server = tokio::spawn(async move {
            let mut lines = BufReader::new(server_in).lines();
            let req = lines.next_line().await.unwrap().unwrap();
            let v: Value = serde_json::from_str(&req).unwrap();
            let reply = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"z":1,"priority":1.0,"execution":{{"taskSupport":"required"}}}}}}"#,
                v["id"]
            );
            server_out.write_all(reply.as_bytes()).await.unwrap();
            server_out.write_all(b"\n").await.unwrap();
            server_out
        });
        let id = peer.next_id();
        let got = peer
            .request(id, "tools/list", None, Duration::from_secs(5), None)
            .await
            .unwrap();
        let Reply::Result(raw) = got else {
            panic!("{got:?}")
        };
        assert_eq!(
            raw.get(),
            r#"{"z":1,"priority":1.0,"execution":{"taskSupport":"required"}}"#
        );
        let _ = server.await;
    }

    #[tokio::test]
    async fn a_request_to_a_server_that_goes_away_ends_as_closed() {
        let (server_in, gateway_out) = tokio::io::duplex(1 << 16);
        let (server_out, gateway_in) = tokio::io::duplex(1 << 16);
        let faults = Arc::new(ProcessFaults::new("t", u64::MAX / 16));
        let peer = ServerPeer::start("t", gateway_in, gateway_out, faults, Arc::new(Quiet));
        let id = peer.next_id();
        let call = peer.request(id, "tools/list", None, Duration::from_secs(30), None);
        let gone = async {
            tokio::task::yield_now().await;
            drop(server_out);
            drop(server_in);
        };
        let (got, ()) = tokio::join!(call, gone);
        assert_eq!(got.unwrap_err(), NoReply::Closed);
        assert!(peer.is_closed());
    }
}
