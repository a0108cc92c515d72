//! A session's `initialize` over HTTP: rmcp's answer, with the `tasks` capability the
//! running servers declare added to it, as the stdio front adds it (`FrontTransport`).
//!
//! Why: rmcp's typed `ServerCapabilities` has no `tasks`, so an agent on a session was never
//! told that a task-augmented call would be taken, and a client that checks (as the spec
//! asks) never sent one.
//!
//! Never: change anything else of the answer, or hold it past `WAIT` (it is passed on as
//! it came then).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

/// How long the handshake's answer may take to end before it is passed on unpatched.
const WAIT: Duration = Duration::from_secs(10);
/// The most of it read to patch (an `initialize` answer is a few hundred bytes).
const MOST: usize = 1 << 20;

/// Whether a POST body is one `initialize` request: from its message as the front read it,
/// or, when that read did not take the body (a member it does not know), by its method alone.
pub(super) fn is_initialize(posted: &super::fast::Posted<'_>, body: &[u8]) -> bool {
    if posted.is_one() {
        return posted.method() == Some("initialize");
    }
    has_initialize_method(body)
}

/// Whether a body is one object whose `method` is `initialize`, whatever else it holds and
/// however the method is spelt (`"initiali\u007ae"` is `initialize` to rmcp too).
fn has_initialize_method(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method<'_>>(body)
        .is_ok_and(|m| m.method.as_deref() == Some("initialize"))
}

/// rmcp's answer to `initialize` with `tasks` put into its capabilities; as it came when it
/// is not one (an error, another status), does not end within `WAIT`, or is over `MOST`.
pub(super) async fn with_tasks(response: Response, tasks: Value) -> Response {
    let (mut parts, body) = response.into_parts();
    if !parts.status.is_success() {
        return Response::from_parts(parts, body);
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut stream = body.into_data_stream();
    let mut read: Vec<Bytes> = Vec::new();
    let mut size = 0;
    let whole = loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                size += chunk.len();
                read.push(chunk);
                if size > MOST {
                    break false;
                }
            }
            Ok(None) => break true,
            // The stream failed: what was read goes on, then the failure.
            Ok(Some(Err(e))) => {
                let rest = futures::stream::once(async move { Err(e) });
                let read = futures::stream::iter(read.into_iter().map(Ok::<_, axum::Error>));
                return Response::from_parts(parts, Body::from_stream(read.chain(rest)));
            }
            Err(_) => {
                tracing::warn!("the answer to initialize did not end; it goes on without `tasks`");
                break false;
            }
        }
    };
    if !whole {
        // As it came: what was read, then the rest as it comes.
        let read = futures::stream::iter(read.into_iter().map(Ok::<_, axum::Error>));
        return Response::from_parts(parts, Body::from_stream(read.chain(stream)));
    }
    let bytes = read.concat();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let patched = if sse {
        patch_events(text, &tasks)
    } else {
        patch_message(text, &tasks)
    };
    match patched {
        Some(p) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(p))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// The SSE text with `tasks` put into the capabilities of the one event that is an
/// `initialize` result; `None` when no event is.
fn patch_events(text: &str, tasks: &Value) -> Option<String> {
    let mut patched = false;
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            let Some(data) = line.strip_prefix("data:") else {
                return line.to_string();
            };
            if patched {
                return line.to_string();
            }
            match patch_message(data.strip_prefix(' ').unwrap_or(data), tasks) {
                Some(p) => {
                    patched = true;
                    format!("data: {p}")
                }
                None => line.to_string(),
            }
        })
        .collect();
    patched.then(|| lines.join("\n"))
}

/// One JSON-RPC message with `tasks` put into its result's capabilities, if it is a result
/// with capabilities that has none yet.
fn patch_message(text: &str, tasks: &Value) -> Option<String> {
    let mut v: Value = serde_json::from_str(text).ok()?;
    let caps = v.pointer_mut("/result/capabilities")?.as_object_mut()?;
    if caps.contains_key("tasks") {
        return None;
    }
    caps.insert("tasks".into(), tasks.clone());
    serde_json::to_string(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handshake_is_recognised_by_its_method() {
        let is = |body: &[u8]| is_initialize(&super::super::fast::Posted::read(body), body);
        assert!(is(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#
        ));
        assert!(is(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{},"x":1}"#
        ));
        // The method written with escapes is the same method, with or without a member the
        // front does not read.
        assert!(is(
            br#"{"jsonrpc":"2.0","id":0,"method":"initiali\u007ae","params":{}}"#
        ));
        assert!(is(
            br#"{"jsonrpc":"2.0","id":0,"method":"initiali\u007ae","params":{},"x":1}"#
        ));
        assert!(!is(br#"{"jsonrpc":"2.0","id":0,"method":"tools/list"}"#));
        assert!(!is(br#"[{"method":"initialize"}]"#));
    }

    #[test]
    fn tasks_go_into_the_result_event_and_nothing_else_changes() {
        let tasks = json!({"requests": {"tools": {"call": {}}}});
        let text = "id: 0\nretry: 3000\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"p\"}}}\n\n";
        let patched = patch_events(text, &tasks).unwrap();
        assert_eq!(
            patched,
            "id: 0\nretry: 3000\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{},\"tasks\":{\"requests\":{\"tools\":{\"call\":{}}}}},\"serverInfo\":{\"name\":\"p\"}}}\n\n"
        );
        // An error, or capabilities that already say `tasks`: left as they are.
        let error =
            "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{\"code\":1,\"message\":\"x\"}}\n\n";
        assert!(patch_events(error, &tasks).is_none());
        let has = r#"{"result":{"capabilities":{"tasks":{}}}}"#;
        assert!(patch_message(has, &tasks).is_none());
    }
}
