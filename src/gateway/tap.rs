//! The line tap between a downstream server's stdout and its rmcp client.
//!
//! Why: rmcp handles each incoming notification on its own task, so a server's last
//! `notifications/progress` could be handled after the response that follows it and reach the
//! agent after the result (or not at all). The tap reads the server's messages in order and
//! forwards progress upstream (awaiting the write) before it passes on the next line, so the
//! agent always sees a call's progress before its result. It also drops lines longer than
//! rmcp's 16 MiB limit (rmcp would drop them anyway) without ever buffering more than that.
//!
//! Never: reorder, alter or delay any other line; parse anything but progress notifications.

use std::sync::Arc;

use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::downstream::{forward_progress, UpTarget};
use super::progress::ProgressMap;

/// rmcp's own limit for one JSON-RPC line.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Starts the tap; returns the stream rmcp reads the server's messages from.
pub fn start<R>(server: String, input: R, progress: Arc<ProgressMap<UpTarget>>) -> DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (mut to_rmcp, for_rmcp) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 * 1024, input);
        let mut line = Vec::with_capacity(4096);
        loop {
            line.clear();
            match read_line_capped(&mut reader, &mut line, MAX_LINE).await {
                Ok(Line::Eof) => break,
                Ok(Line::TooLong(n)) => {
                    tracing::warn!(server = %server, "dropped a message of {n}+ bytes (over the {MAX_LINE}-byte limit); its request will time out");
                    continue;
                }
                Ok(Line::Complete) => {}
                Err(e) => {
                    tracing::debug!(server = %server, "reading the server's stdout failed: {e}");
                    break;
                }
            }
            if let Some(params) = progress_params(&line) {
                if let Some(target) = progress.route(&params) {
                    forward_progress(&target, params).await;
                }
                continue;
            }
            if to_rmcp.write_all(&line).await.is_err() {
                break;
            }
        }
        // Dropping `to_rmcp` gives rmcp end-of-stream: the server is gone.
    });
    for_rmcp
}

pub(crate) enum Line {
    Complete,
    Eof,
    TooLong(usize),
}

/// Reads one line (with its `\n`) into `buf`; a line over `max` bytes (`MAX_LINE` in the tap,
/// smaller in the fuzz target so the limit is reached) is skipped whole.
pub(crate) async fn read_line_capped<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let n = (&mut *reader)
        .take(max as u64 + 1)
        .read_until(b'\n', buf)
        .await?;
    if n == 0 {
        return Ok(Line::Eof);
    }
    if buf.len() > max && buf.last() != Some(&b'\n') {
        let mut skipped = buf.len();
        loop {
            let chunk = reader.fill_buf().await?;
            if chunk.is_empty() {
                break;
            }
            match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    reader.consume(i + 1);
                    skipped += i + 1;
                    break;
                }
                None => {
                    let len = chunk.len();
                    reader.consume(len);
                    skipped += len;
                }
            }
        }
        buf.clear();
        return Ok(Line::TooLong(skipped));
    }
    Ok(Line::Complete)
}

/// The params of a `notifications/progress` line; `None` for every other message. A cheap
/// substring test first, so other lines are never parsed here. `memmem` rather than a
/// `windows()` scan: every result line passes through here, and the naive scan cost about
/// 5 ns per byte (half a millisecond on a 100 KB `read` result).
pub(crate) fn progress_params(line: &[u8]) -> Option<ProgressNotificationParam> {
    const NEEDLE: &[u8] = b"notifications/progress";
    memchr::memmem::find(line, NEEDLE)?;
    // `jsonrpc` is checked as rmcp checks it: a line rmcp would refuse (another version, or
    // bytes that are not UTF-8 anywhere in it) must not be forwarded as progress either
    // (both found by the jsonrpc_framing fuzz target).
    #[derive(serde::Deserialize)]
    struct Note {
        jsonrpc: String,
        method: String,
        params: ProgressNotificationParam,
        id: Option<serde_json::Value>,
    }
    // UTF-8 first: serde skips the strings of unknown fields without validating them, and
    // rmcp (which keeps them) refuses such a line.
    let text = std::str::from_utf8(line).ok()?;
    let note: Note = serde_json::from_str(text).ok()?;
    (note.jsonrpc == "2.0" && note.method == "notifications/progress" && note.id.is_none())
        .then_some(note.params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_progress_notifications_are_taken() {
        let p = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1,"total":4}}"#;
        let got = progress_params(p).unwrap();
        assert_eq!(got.progress, 1.0);
        let result_mentioning_it = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"notifications/progress"}]}}"#;
        assert!(progress_params(result_mentioning_it).is_none());
        assert!(progress_params(
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#
        )
        .is_none());
        // What rmcp would refuse is not progress either (found by the jsonrpc_framing fuzz
        // target: an invalid `jsonrpc` value, or bytes that are not UTF-8, in it).
        assert!(progress_params(
            b"{\"jsonrpc\":\"E.\xa20\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":3,\"progress\":1}}"
        )
        .is_none());
        assert!(progress_params(
            br#"{"method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#
        )
        .is_none());
        assert!(progress_params(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":3,\"progress\":1,\"x\":\"\xff\"}}"
        )
        .is_none());
    }

    #[tokio::test]
    async fn lines_pass_in_order_and_over_long_ones_are_dropped_whole() {
        let (mut server_out, tap_in) = tokio::io::duplex(1 << 20);
        let map = Arc::new(ProgressMap::default());
        let mut rmcp_in = start("t".into(), tap_in, map);
        let writer = tokio::spawn(async move {
            server_out.write_all(b"{\"a\":1}\n").await.unwrap();
            let long = vec![b'x'; MAX_LINE + 10];
            server_out.write_all(&long).await.unwrap();
            server_out.write_all(b"\n{\"b\":2}\n").await.unwrap();
        });
        let mut got = String::new();
        rmcp_in.read_to_string(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got, "{\"a\":1}\n{\"b\":2}\n");
    }
}
