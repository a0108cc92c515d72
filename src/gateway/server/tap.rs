//! The line reader over a downstream server's stdout, in front of the peer's dispatch
//! (`peer.rs`).
//!
//! Why: it is where a server's stdout is policed: every byte is charged to the process's
//! output-rate budget (`fault.rs`), and a line longer than the 16 MiB limit of one JSON-RPC
//! message is a protocol fault of the server (recorded in its `ProcessFaults`; the supervisor
//! kills and restarts it, and calls in flight are told why) rather than a message silently
//! dropped whose request would only time out. The reader never buffers more than the cap,
//! however long the line, and hands lines on one at a time, awaiting each, so a call's
//! progress is always delivered before its result.
//!
//! Never: reorder, alter or delay a line beyond the backpressure below; parse anything here.

use std::future::Future;

use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use crate::gateway::server::fault::ProcessFaults;

/// The limit of one JSON-RPC line (rmcp's, kept so both directions agree).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// The line buffer kept between messages.
const KEEP_CAPACITY: usize = 64 * 1024;

/// Where the reader hands each complete line (with its newline).
pub trait LineSink: Send + Sync {
    fn line(&self, line: &[u8]) -> impl Future<Output = ()> + Send;
}

/// Reads the server's stdout until EOF or its first fault, handing each line to `sink`.
pub async fn read_lines<R, S>(server: &str, input: R, faults: &ProcessFaults, sink: &S)
where
    R: AsyncRead + Unpin + Send,
    S: LineSink,
{
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
            }
            Err(e) => {
                tracing::debug!(server = %server, "reading the server's stdout failed: {e}");
                break;
            }
        }
        // A request from the server is held while its stdin is full: its answer would queue
        // for a writer that cannot write (see stdin_watch.rs).
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
        sink.line(&line).await;
        // A large message leaves a large buffer: give it back.
        if line.capacity() > KEEP_CAPACITY {
            line.shrink_to(KEEP_CAPACITY);
        }
    }
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
        /// Present at all, even as `null`: rmcp refuses a notification with an `id` (an
        /// `Option` would read `"id": null` as absent; found by the fuzz target).
        #[serde(default)]
        id: Present,
    }
    #[derive(Default)]
    struct Present(bool);
    impl<'de> serde::Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            serde::de::IgnoredAny::deserialize(d).map(|_| Present(true))
        }
    }
    // UTF-8 first: serde skips the strings of unknown fields without validating them, and
    // rmcp (which keeps them) refuses such a line.
    let text = std::str::from_utf8(line).ok()?;
    let note: Note = serde_json::from_str(text).ok()?;
    (note.jsonrpc == "2.0" && note.method == "notifications/progress" && !note.id.0)
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
        // An `id` member, even `null`, makes it no notification to rmcp (fuzz regression
        // `progress-with-null-id`).
        assert!(progress_params(
            br#"{"jsonrpc":"2.0","id":null,"method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#
        )
        .is_none());
        assert!(progress_params(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":3,\"progress\":1,\"x\":\"\xff\"}}"
        )
        .is_none());
    }

    /// Collects the lines handed on, for the tests.
    #[derive(Default)]
    struct Collect(std::sync::Mutex<Vec<u8>>);
    impl LineSink for Collect {
        async fn line(&self, line: &[u8]) {
            self.0.lock().unwrap().extend_from_slice(line);
        }
    }

    #[tokio::test]
    async fn lines_pass_in_order_until_an_over_long_one_which_is_a_fault() {
        use tokio::io::AsyncWriteExt;
        let (mut server_out, tap_in) = tokio::io::duplex(1 << 20);
        let faults = ProcessFaults::new("t", u64::MAX / 16);
        let writer = tokio::spawn(async move {
            server_out.write_all(b"{\"a\":1}\n").await.unwrap();
            let long = vec![b'x'; MAX_LINE + 10];
            // The reader stops at the cap: the rest of the write may fail.
            let _ = server_out.write_all(&long).await;
            let _ = server_out.write_all(b"\n{\"b\":2}\n").await;
        });
        let got = Collect::default();
        read_lines("t", tap_in, &faults, &got).await;
        assert_eq!(
            String::from_utf8(got.0.into_inner().unwrap()).unwrap(),
            "{\"a\":1}\n",
            "nothing after the over-long line is handed on"
        );
        let fault = faults.fault().unwrap();
        assert!(fault.contains("protocol fault"), "{fault}");
        writer.abort();
    }

    #[tokio::test]
    async fn output_over_the_rate_limit_is_a_fault() {
        use tokio::io::AsyncWriteExt;
        let (mut server_out, tap_in) = tokio::io::duplex(1 << 20);
        // 1 byte/s: the burst is one line cap, so 17 MiB of small lines trips it.
        let faults = ProcessFaults::new("t", 1);
        let writer = tokio::spawn(async move {
            let line = [b"{\"n\":\"".as_slice(), &[b'y'; 1000], b"\"}\n"].concat();
            for _ in 0..(17 * 1024) {
                if server_out.write_all(&line).await.is_err() {
                    break;
                }
            }
        });
        let got = Collect::default();
        read_lines("t", tap_in, &faults, &got).await;
        let n = got.0.into_inner().unwrap().len();
        assert!(n <= MAX_LINE + 1, "{n}");
        assert!(faults.fault().unwrap().contains("output-rate limit"));
        writer.abort();
    }
}
