//! A fast call's answer, shaped as rmcp's path shapes it: one SSE event in a body of known
//! length (`whole`), or a stream of the call's notifications and questions ending with it
//! (`streamed`); a 2026-07-28 error that rmcp answers under another status than 200 goes
//! alone, as JSON, under that status. The body holds the request's slot under the
//! principal's cap until it has been handed to the connection.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::model::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::request_stream::{Lines, RequestStream};

use super::super::modern;
use super::reading::Era;

/// How long a stream stays quiet before it gets a comment, as rmcp's streams do: a proxy
/// with an idle timeout would otherwise cut a call waiting on a human's answer.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The comment (an SSE line a client skips).
const KEEP_ALIVE_EVENT: &[u8] = b":\n\n";

/// What a finished call gives: its response line and its error's code if it is an error;
/// `None` when the agent cancelled it (JSON-RPC: no answer, the body ends without one).
pub(super) type Answered = Option<(Vec<u8>, Option<ErrorCode>)>;

/// The answer alone, in a body of known length. The client going away (this future
/// dropped) cancels the call.
pub(super) async fn whole(
    era: Era,
    finished: impl Future<Output = Answered>,
    ct: CancellationToken,
    held: impl Send + 'static,
) -> Response {
    let _cancel_on_drop = ct.drop_guard();
    match finished.await {
        Some((line, code)) => match refused_in_kind(era, code) {
            Some(status) => json(status, line, held),
            None => sse_whole(one_event(&line), held),
        },
        None => sse_whole(Vec::new(), held),
    }
}

/// The call's notifications and questions as they come, then its answer, on a stream of
/// its own; the client going away (the body dropped) cancels the call. A 2026-07-28
/// request's status is only known from its first message, as on rmcp's path: the response
/// waits for it, and an error refused in kind that comes first is answered by `whole`'s rule.
pub(super) async fn streamed(
    era: Era,
    finished: impl Future<Output = Answered> + Send + 'static,
    stream: RequestStream,
    mut lines: Lines,
    ct: CancellationToken,
    held: impl Send + 'static,
) -> Response {
    let cancel_on_drop = ct.drop_guard();
    let mut finished = Box::pin(finished);
    let mut first = None;
    let mut done = None;
    if era == Era::Modern {
        tokio::select! {
            // What the call sent before its answer comes first, as it does on the stream.
            biased;
            line = lines.next() => first = line,
            answered = &mut finished => match answered {
                Some((line, code)) => match refused_in_kind(era, code) {
                    Some(status) => {
                        // The call has ended: nothing is left to cancel.
                        drop(cancel_on_drop.disarm());
                        return json(status, line, held);
                    }
                    None => done = Some(Some((line, code))),
                },
                None => done = Some(None),
            },
        }
    }
    tokio::spawn(async move {
        let answered = match done {
            Some(answered) => answered,
            None => finished.await,
        };
        match answered {
            Some((line, _)) => stream.finish(line).await,
            // Ended though a question of the call's may still hold a sender.
            None => stream.end().await,
        }
    });
    let lines = futures::stream::iter(first).chain(lines);
    let events = kept_alive(lines, KEEP_ALIVE).map(move |event| {
        let _kept = (&cancel_on_drop, &held);
        Ok::<_, std::convert::Infallible>(event)
    });
    sse(Body::from_stream(events), None)
}

/// `lines` as SSE events, with a comment after every `quiet` without one.
fn kept_alive(
    lines: impl Stream<Item = Vec<u8>> + Unpin,
    quiet: Duration,
) -> impl Stream<Item = Vec<u8>> {
    futures::stream::unfold(lines, move |mut lines| async move {
        tokio::select! {
            biased;
            line = lines.next() => line.map(|line| (one_event(&line), lines)),
            () = tokio::time::sleep(quiet) => Some((KEEP_ALIVE_EVENT.to_vec(), lines)),
        }
    })
}

/// The status rmcp gives an answer that is not 200: a 2026-07-28 request's error of a kind
/// it refuses by status (`modern::error_status`). A session's errors are always 200.
fn refused_in_kind(era: Era, code: Option<ErrorCode>) -> Option<StatusCode> {
    match (era, code) {
        (Era::Modern, Some(code)) => {
            Some(modern::error_status(code)).filter(|s| *s != StatusCode::OK)
        }
        _ => None,
    }
}

/// The error alone, as JSON, under `status`: how rmcp answers a 2026-07-28 request refused
/// in kind.
fn json(status: StatusCode, line: Vec<u8>, held: impl Send + 'static) -> Response {
    let line = match line.strip_suffix(b"\n") {
        Some(stripped) => stripped.to_vec(),
        None => line,
    };
    let length = line.len().to_string();
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::CONTENT_LENGTH, length),
        ],
        holding(line, held),
    )
        .into_response()
}

/// A 200 SSE response with `body`, of `length` when it is known; headed as rmcp heads its
/// own (nginx buffers a response unless told not to).
fn sse(body: Body, length: Option<usize>) -> Response {
    let head = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        (header::HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    match length {
        Some(length) => (
            StatusCode::OK,
            head,
            [(header::CONTENT_LENGTH, length.to_string())],
            body,
        )
            .into_response(),
        None => (StatusCode::OK, head, body).into_response(),
    }
}

/// `event` as the whole body of a 200 SSE response, holding `held` until it is sent.
fn sse_whole(event: Vec<u8>, held: impl Send + 'static) -> Response {
    let length = event.len();
    sse(holding(event, held), Some(length))
}

/// A body of known bytes that keeps `held` (the request's slot under the principal's cap)
/// until the body is done with, as rmcp's path keeps it: an answer counts as in flight until
/// it has been handed to the connection, so a client that does not read cannot pile answers
/// up past its cap. (Its length is given by the caller: a stream's is not known.)
fn holding(bytes: Vec<u8>, held: impl Send + 'static) -> Body {
    let chunk = futures::stream::once(std::future::ready(Ok::<_, std::convert::Infallible>(
        axum::body::Bytes::from(bytes),
    )));
    let release = futures::stream::once(async move {
        drop(held);
        None
    })
    .filter_map(std::future::ready);
    Body::from_stream(chunk.chain(release))
}

/// One JSON-RPC message (a line) as the whole body of an SSE response: what rmcp's answer
/// to a request looks like, so that a client reading only SSE answers reads this one too.
pub(in crate::gateway::agent::http) fn one_event(line: &[u8]) -> Vec<u8> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut body = Vec::with_capacity(line.len() + 24);
    body.extend_from_slice(b"event: message\ndata: ");
    let start = body.len();
    body.extend_from_slice(line);
    // SSE ends a line at a lone CR too, and JSON allows a raw CR only as whitespace between
    // tokens: a space keeps the message's meaning and the event whole.
    if line.contains(&b'\r') {
        for b in &mut body[start..] {
            if *b == b'\r' {
                *b = b' ';
            }
        }
    }
    body.extend_from_slice(b"\n\n");
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_a_comment_and_a_busy_one_none() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let mut events = Box::pin(kept_alive(tokio_stream_of(rx), Duration::from_secs(15)));
        tx.send(b"{}".to_vec()).await.unwrap();
        assert_eq!(events.next().await.unwrap(), one_event(b"{}"));
        let quiet = tokio::time::Instant::now();
        assert_eq!(events.next().await.unwrap(), KEEP_ALIVE_EVENT);
        assert_eq!(quiet.elapsed(), Duration::from_secs(15));
        tx.send(b"[]".to_vec()).await.unwrap();
        assert_eq!(events.next().await.unwrap(), one_event(b"[]"));
        drop(tx);
        assert_eq!(events.next().await, None, "the stream ends with its lines");
    }

    fn tokio_stream_of(
        mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    ) -> impl Stream<Item = Vec<u8>> + Unpin {
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    #[test]
    fn the_answer_is_one_sse_event() {
        assert_eq!(
            one_event(b"{\"id\":1}\n"),
            b"event: message\ndata: {\"id\":1}\n\n".to_vec()
        );
        // A raw CR (JSON whitespace) would end the SSE line: it becomes a space.
        assert_eq!(
            one_event(b"{\"id\":1,\r\"result\":{}}\n"),
            b"event: message\ndata: {\"id\":1, \"result\":{}}\n\n".to_vec()
        );
    }
}
