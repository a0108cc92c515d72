//! Entry points for the fuzz targets (`fuzz/`) and their corpus replay test
//! (`tests/fuzz_corpus.rs`): crate-private pieces of the gateway, exposed only so that the
//! fuzzers drive the very code the gateway runs. Hidden from the docs; not an API.
//!
//! Must never hold logic of its own beyond adapting inputs: a check that ran against a copy
//! would prove nothing about the real code.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::gateway::agent::frame::LineCap;
use crate::gateway::server::tap::{self, Line};

pub use crate::gateway::agent::frame::{HEAD as UPSTREAM_HEAD, OVERSIZED_METHOD};
pub use crate::gateway::server::MAX_LINE;
pub use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};

/// What the tap's line reader made of one line of a server's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line passed on to rmcp (with its `\n`, unless it was the last bytes of the stream).
    Line(Vec<u8>),
    /// A line over the limit, dropped whole; how many bytes were skipped.
    TooLong(usize),
}

/// Runs the tap's line reader (`gateway::server::tap::LineReader`) over `data`, delivered
/// `chunk` bytes per read, its buffer growing by `buffer` bytes, with a line limit of `max`.
pub fn frame_lines(data: &[u8], chunk: usize, buffer: usize, max: usize) -> Vec<Frame> {
    let sizes = [chunk.max(1)];
    let reader = Pieces {
        data,
        sizes: &sizes,
        next: 0,
    };
    let mut reader = tap::LineReader::new(reader, buffer.max(1));
    let mut out = Vec::new();
    // The reader never returns Pending, so a single poll of each read completes it.
    futures::executor::block_on(async {
        loop {
            match reader.next_line(max).await {
                Ok(Line::Eof) | Err(_) => break,
                // As in the tap: an over-long line is the server's protocol fault, and
                // nothing after it is read.
                Ok(Line::TooLong(n)) => {
                    out.push(Frame::TooLong(n));
                    break;
                }
                Ok(Line::Complete(line)) => out.push(Frame::Line(line)),
            }
        }
    });
    out
}

/// The tap's progress-notification filter (`gateway::server::tap::progress_params`): true when the
/// line is taken out of the stream as a progress notification.
pub fn is_progress(line: &[u8]) -> bool {
    tap::progress_params(line).is_some()
}

/// The peer's reading of a line (`envelope::LineText`) against UTF-8's and `classify`'s
/// answers on any bytes: the same text, or none, and the same classification. Panics when
/// they differ (a printable line skips two checks, so a wrong skip would show here), or when
/// the result probe read with the envelope disagrees with serde's.
pub fn line_text_agrees(line: &[u8]) {
    use crate::gateway::server::envelope::{classify, Kind, LineText};
    let read = LineText::new(line.to_vec());
    assert_eq!(
        read.as_ref().ok().map(LineText::as_str),
        std::str::from_utf8(line).ok(),
        "text of {}",
        String::from_utf8_lossy(line)
    );
    if let Ok(read) = read {
        let kind = read.classify();
        assert_eq!(
            format!("{kind:?}"),
            format!("{:?}", classify(line)),
            "{}",
            String::from_utf8_lossy(line)
        );
        // What the envelope's walk read of a result object is what serde reads of it.
        if let Kind::Response {
            reply: Ok(result),
            said: Some(said),
            ..
        } = kind
        {
            assert_eq!(
                Some(said),
                crate::gateway::call::probe::serde_probe(result),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

/// A reader that hands out `data` in pieces of the given sizes, in turn (cycling), so the
/// fuzzer chooses every point where a pipe splits the stream.
struct Pieces<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    next: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let size = self.sizes.get(self.next).copied().unwrap_or(usize::MAX);
        self.next = (self.next + 1) % self.sizes.len().max(1);
        let n = size.max(1).min(self.data.len()).min(buf.remaining());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Runs the upstream length cap (`gateway::agent::frame::LineCap`, between serve's stdin
/// and rmcp) over `data` with a limit of `max` bytes per line: the client's pipe hands out
/// `reads[0]`, `reads[1]`, ... bytes per read (cycling), and rmcp asks for `outs[0]`,
/// `outs[1]`, ... bytes per read (cycling, each clamped to 1 byte..1 MiB). Returns every
/// byte rmcp reads, up to the first read that returns nothing (EOF to rmcp).
pub fn cap_lines(data: &[u8], reads: &[usize], outs: &[usize], max: usize) -> Vec<u8> {
    let pipe = Pieces {
        data,
        sizes: reads,
        next: 0,
    };
    let mut cap = LineCap::new(pipe, max);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    // The pipe never returns Pending, so a single poll of each read completes it.
    futures::executor::block_on(async {
        for i in 0.. {
            let want = outs.get(i % outs.len().max(1)).copied().unwrap_or(1 << 16);
            buf.resize(want.clamp(1, 1 << 20), 0);
            match cap.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    });
    out
}
