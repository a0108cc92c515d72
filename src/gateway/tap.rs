//! The line tap between a downstream server's stdout and its rmcp client.
//!
//! Why: rmcp handles each incoming notification on its own task, so a server's last
//! `notifications/progress` could be handled after the response that follows it and reach the
//! agent after the result (or not at all). The tap reads the server's messages in order and
//! forwards progress upstream (awaiting the write) before it passes on the next line, so the
//! agent always sees a call's progress before its result.
//!
//! It is also where a server's stdout is policed: every byte is charged to the process's
//! output-rate budget (`fault.rs`), and a line longer than rmcp's 16 MiB limit is a protocol
//! fault of the server (recorded in its `ProcessFaults`; the supervisor kills and restarts
//! it, and calls in flight are told why) rather than a message silently dropped whose request
//! would only time out. The tap never buffers more than the cap, however long the line.
//!
//! Never: reorder, alter or delay any other line; parse anything but progress notifications.

use std::sync::Arc;

use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::downstream::{forward_progress, UpTarget};
use super::fault::ProcessFaults;
use super::progress::ProgressMap;

/// rmcp's own limit for one JSON-RPC line.
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// The line buffer kept between messages.
const KEEP_CAPACITY: usize = 64 * 1024;

/// Starts the tap; returns the stream rmcp reads the server's messages from. The stream
/// ends (rmcp sees the server gone) at the server's EOF or at its first fault.
pub fn start<R>(
    server: String,
    input: R,
    progress: Arc<ProgressMap<UpTarget>>,
    faults: Arc<ProcessFaults>,
) -> DuplexStream
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
                    faults.protocol_fault(format!(
                        "it sent a message longer than {n} bytes, over the {MAX_LINE}-byte limit \
                         of one JSON-RPC line (protocol fault)"
                    ));
                    break;
                }
                Ok(Line::Complete) => {
                    if !faults.charge(line.len()) {
                        break;
                    }
                    // A large message leaves a large buffer: give it back.
                    if line.capacity() > KEEP_CAPACITY {
                        line.shrink_to(KEEP_CAPACITY);
                    }
                }
                Err(e) => {
                    tracing::debug!(server = %server, "reading the server's stdout failed: {e}");
                    break;
                }
            }
            // A request from the server is held while its stdin is full: rmcp would queue
            // the answer for a writer that cannot write (see stdin_watch.rs).
            if faults.stdin.is_stalled()
                && is_request(&line)
                && !faults.stdin.wait_flowing(faults.stall_limit).await
            {
                faults.protocol_fault(format!(
                    "it kept sending requests without reading its stdin for {}s (protocol fault)",
                    faults.stall_limit.as_secs()
                ));
                break;
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

/// Reads one line (with its `\n`) into `buf`. A line over `max` bytes (`MAX_LINE` in the tap,
/// smaller in the fuzz target so the limit is reached) is not read further: `TooLong` as soon
/// as the cap is passed (the server is at fault and will be stopped), so neither the buffer
/// nor the time spent grows with the line.
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
        let seen = buf.len();
        buf.clear();
        buf.shrink_to(KEEP_CAPACITY);
        return Ok(Line::TooLong(seen));
    }
    Ok(Line::Complete)
}

/// True for a line that may be a request (it has a `"method"` and an `"id"`): a substring
/// test, never a parse; a response that merely mentions both is held too, which only delays it.
fn is_request(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"\"method\"").is_some()
        && memchr::memmem::find(line, b"\"id\"").is_some()
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
    async fn lines_pass_in_order_until_an_over_long_one_which_is_a_fault() {
        let (mut server_out, tap_in) = tokio::io::duplex(1 << 20);
        let map = Arc::new(ProgressMap::default());
        let faults = Arc::new(ProcessFaults::new("t", u64::MAX / 16));
        let mut rmcp_in = start("t".into(), tap_in, map, faults.clone());
        let writer = tokio::spawn(async move {
            server_out.write_all(b"{\"a\":1}\n").await.unwrap();
            let long = vec![b'x'; MAX_LINE + 10];
            // The tap stops reading at the cap: the rest of the write may fail.
            let _ = server_out.write_all(&long).await;
            let _ = server_out.write_all(b"\n{\"b\":2}\n").await;
        });
        let mut got = String::new();
        rmcp_in.read_to_string(&mut got).await.unwrap();
        assert_eq!(
            got, "{\"a\":1}\n",
            "nothing after the over-long line reaches rmcp"
        );
        let fault = faults.fault().unwrap();
        assert!(fault.contains("protocol fault"), "{fault}");
        writer.abort();
    }

    #[tokio::test]
    async fn output_over_the_rate_limit_is_a_fault() {
        let (mut server_out, tap_in) = tokio::io::duplex(1 << 20);
        let map = Arc::new(ProgressMap::default());
        // 1 byte/s: the burst is one line cap, so 17 MiB of small lines trips it.
        let faults = Arc::new(ProcessFaults::new("t", 1));
        let mut rmcp_in = start("t".into(), tap_in, map, faults.clone());
        let writer = tokio::spawn(async move {
            let line = [b"{\"n\":\"".as_slice(), &[b'y'; 1000], b"\"}\n"].concat();
            for _ in 0..(17 * 1024) {
                if server_out.write_all(&line).await.is_err() {
                    break;
                }
            }
        });
        let mut sink = Vec::new();
        rmcp_in.read_to_end(&mut sink).await.unwrap();
        assert!(sink.len() <= MAX_LINE + 1, "{}", sink.len());
        assert!(faults.fault().unwrap().contains("output-rate limit"));
        writer.abort();
    }
}
