//! The line reader over a downstream server's stdout, in front of the peer's dispatch
//! (`peer/`).
//!
//! Why: it is where a server's stdout is policed: every byte is charged to the process's
//! output-rate budget (`fault.rs`), and a line longer than the 16 MiB limit of one JSON-RPC
//! message is a protocol fault of the server (recorded in its `ProcessFaults`; the supervisor
//! kills and restarts it, and calls in flight are told why) rather than a message silently
//! dropped whose request would only time out. The reader never buffers more than the cap,
//! however long the line, and hands lines on one at a time, awaiting each, so a call's
//! progress is always delivered before its result. Bytes are read from the pipe straight
//! into the buffer a line leaves in (no intermediate chunk buffer), and a large line leaves
//! with that buffer: the peer moves it on to the agent's writer without copying it.
//!
//! Never: reorder, alter or delay a line beyond the backpressure below; parse anything here
//! beyond the progress filter (which reads the envelope as the peer does, `envelope.rs`).

use std::future::Future;

use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::gateway::server::envelope::{classify, Kind};
use crate::gateway::server::fault::ProcessFaults;

use super::MAX_LINE;

/// The least room left for one read; less, and the buffer grows first.
const MIN_READ: usize = 64 * 1024;
/// A line this long that fills the buffer from its start is handed on with the buffer
/// itself (not copied out).
const HAND_OFF: usize = 64 * 1024;

/// Where the reader hands each complete line (with its newline), owned: a response's result
/// moves on inside it.
pub trait LineSink: Send + Sync {
    fn line(&self, line: Vec<u8>) -> impl Future<Output = ()> + Send;
}

/// Reads the server's stdout until EOF or its first fault, handing each line to `sink`.
pub async fn read_lines<R, S>(server: &str, input: R, faults: &ProcessFaults, sink: &S)
where
    R: AsyncRead + Unpin + Send,
    S: LineSink,
{
    // Grows to the pipe's size at once when a line outgrows its first read: a large result
    // then arrives in the reads the pipe allows, into one buffer, without regrowing.
    let mut reader = LineReader::new(input, crate::gateway::pipe_size::WANTED as usize);
    loop {
        let line = match reader.next_line(MAX_LINE).await {
            Ok(Line::Eof) => break,
            Ok(Line::TooLong(n)) => {
                faults.protocol_fault(format!(
                    "it sent a message longer than {n} bytes, over the {MAX_LINE}-byte limit \
                     of one JSON-RPC line (protocol fault)"
                ));
                break;
            }
            Ok(Line::Complete(line)) => {
                if !faults.charge(line.len()) {
                    break;
                }
                line
            }
            Err(e) => {
                tracing::debug!(server = %server, "reading the server's stdout failed: {e}");
                break;
            }
        };
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
        sink.line(line).await;
    }
}

/// One read of [`LineReader::next_line`].
pub(crate) enum Line {
    /// A whole line with its `\n` (or the stream's last bytes, without one).
    Complete(Vec<u8>),
    Eof,
    /// A line passed the cap: how many bytes of it were taken (`max + 1`).
    TooLong(usize),
}

/// Splits a stream into lines, reading straight into the buffer a line is handed on in:
/// a line that fills the buffer from its start (a large result, as servers write one
/// message at a time) leaves with the buffer itself; shorter ones are copied out and the
/// buffer is reused.
pub(crate) struct LineReader<R> {
    input: R,
    buf: Vec<u8>,
    /// Where the line being read starts in `buf`.
    start: usize,
    /// `buf[start..scanned]` holds no newline.
    scanned: usize,
    /// What the buffer grows by at least once a line outgrows it.
    grow: usize,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(input: R, grow: usize) -> LineReader<R> {
        LineReader {
            input,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            grow: grow.max(1),
            eof: false,
        }
    }

    /// The next line. One over `max` bytes (`MAX_LINE` in the tap, smaller in the fuzz
    /// target so the limit is reached) is not read further: `TooLong` as soon as the cap is
    /// passed (the server is at fault and will be stopped), so neither the buffer nor the
    /// time spent grows with the line.
    pub(crate) async fn next_line(&mut self, max: usize) -> std::io::Result<Line> {
        loop {
            if let Some(k) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let end = self.scanned + k + 1;
                if end - self.start > max + 1 {
                    return Ok(Line::TooLong(max + 1));
                }
                return Ok(Line::Complete(self.take(end)));
            }
            self.scanned = self.buf.len();
            let have = self.buf.len() - self.start;
            if have > max {
                return Ok(Line::TooLong(max + 1));
            }
            if self.eof {
                if have == 0 {
                    return Ok(Line::Eof);
                }
                let end = self.buf.len();
                return Ok(Line::Complete(self.take(end)));
            }
            self.make_room();
            // Never past the cap of the line being read.
            let limit = (max + 1 - have) as u64;
            if (&mut self.input)
                .take(limit)
                .read_buf(&mut self.buf)
                .await?
                == 0
            {
                self.eof = true;
            }
        }
    }

    /// `buf[start..end]` as an owned line; the reader moves past it.
    fn take(&mut self, end: usize) -> Vec<u8> {
        let rest = self.buf.len() - end;
        let line = if self.start == 0 && end >= HAND_OFF && rest < end {
            // The buffer leaves with the line; what follows it (usually nothing) is copied.
            let next = self.buf[end..].to_vec();
            let mut line = std::mem::replace(&mut self.buf, next);
            line.truncate(end);
            line
        } else {
            let line = self.buf[self.start..end].to_vec();
            self.start = end;
            line
        };
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            // A large line copied out leaves a large buffer: give it back.
            if self.buf.capacity() > 4 * self.grow {
                self.buf = Vec::new();
            }
        }
        self.scanned = self.start;
        line
    }

    /// Room for the next read: a partial line after consumed ones moves to the front, and the
    /// buffer grows (to `grow` at once, then doubling) when little room is left. The extra
    /// `MIN_READ` keeps a result of exactly `grow` bytes plus its envelope in one buffer (a
    /// 1 MiB result in a 1 MiB buffer was regrown, and copied, for its last 90 bytes).
    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        if self.buf.capacity() - self.buf.len() < MIN_READ.min(self.grow) {
            let more = self.buf.len().max(self.grow) + MIN_READ;
            self.buf.reserve(more);
        }
    }
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
    progress_note(line).map(|(params, _)| params)
}

/// As `progress_params`, with the params' text as the server wrote it (a slice of `line`).
pub(crate) fn progress_note(line: &[u8]) -> Option<(ProgressNotificationParam, &str)> {
    const NEEDLE: &[u8] = b"notifications/progress";
    memchr::memmem::find(line, NEEDLE)?;
    // The envelope as the peer reads it (`envelope::classify`): a line that is not UTF-8
    // (rmcp refuses it), whose `jsonrpc` is not "2.0", or that has an `id` member at all,
    // even `null` (rmcp refuses a notification with one), is no progress notification (all
    // found by the jsonrpc_framing fuzz target).
    match classify(line) {
        Kind::Notification {
            method: "notifications/progress",
            params: Some(params),
        } => Some((serde_json::from_str(params.get()).ok()?, params.get())),
        _ => None,
    }
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
        async fn line(&self, line: Vec<u8>) {
            self.0.lock().unwrap().extend_from_slice(&line);
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

    /// Large lines leave with the reader's buffer, small ones are copied out of it: either
    /// way every line arrives whole, in order, however the pipe splits the stream.
    #[tokio::test]
    async fn large_and_small_lines_arrive_whole_whatever_the_reads() {
        use tokio::io::AsyncWriteExt;
        let line = |n: usize, c: u8| [vec![c; n], b"\n".to_vec()].concat();
        let lines = [
            line(10, b'a'),
            line(100_000, b'b'),
            line(3, b'c'),
            line(300_000, b'd'),
            line(HAND_OFF - 1, b'e'),
            line(HAND_OFF, b'f'),
            vec![b'g'; 70_000],
        ];
        let stream = lines.concat();
        for (write, grow) in [(7_000, 4096), (65_536, 1 << 20), (1 << 20, 100)] {
            let (mut w, r) = tokio::io::duplex(write);
            let data = stream.clone();
            let writer = tokio::spawn(async move { w.write_all(&data).await });
            let mut reader = LineReader::new(r, grow);
            let mut got = Vec::new();
            loop {
                match reader.next_line(MAX_LINE).await.unwrap() {
                    Line::Complete(l) => got.push(l),
                    Line::Eof => break,
                    Line::TooLong(n) => panic!("too long: {n}"),
                }
            }
            writer.await.unwrap().unwrap();
            assert_eq!(got.len(), lines.len(), "write {write}, grow {grow}");
            for (g, l) in got.iter().zip(&lines) {
                assert!(
                    g == l,
                    "a {}-byte line came out as {} bytes",
                    l.len(),
                    g.len()
                );
            }
        }
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
