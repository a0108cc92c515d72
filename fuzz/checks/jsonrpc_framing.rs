//! The gateway's framing of a downstream server's stdout (src/gateway/tap.rs: the capped
//! line reader and the progress filter) and the JSON-RPC decoding rmcp applies to each line.
//!
//! Input: two bytes choosing the line limit (1..=256 bytes, so the limit is reached) and
//! the read size (how the pipe splits the stream), then the stream itself.
//!
//! Invariants:
//! 1. The reader's frames are exactly the stream's lines, in order, byte for byte: a line
//!    of up to `limit` bytes plus its `\n` is passed on whole; a longer one ends the stream
//!    (the server's protocol fault) once `limit + 1` bytes of it are read, and nothing after
//!    it is read; however the reads split it.
//! 2. Nothing passed on exceeds the limit, so memory per line stays bounded.
//! 3. Only a line rmcp itself decodes as a `notifications/progress` notification is taken
//!    out as progress: a response, a request or a malformed line mentioning the words is
//!    never swallowed (nor forwarded as progress when rmcp would have dropped it).
//! 4. Decoding any line as a client or server JSON-RPC message never panics.

use palisade::fuzzing::{self, ClientJsonRpcMessage, Frame, ServerJsonRpcMessage};

pub fn run(data: &[u8]) {
    let (max, chunk, stream) = match data {
        [a, b, rest @ ..] => (usize::from(*a) + 1, usize::from(*b) % 64 + 1, rest),
        _ => return,
    };
    let buffer = chunk * 2 + 1;
    let frames = fuzzing::frame_lines(stream, chunk, buffer, max);
    assert_eq!(
        frames,
        oracle(stream, max),
        "framing differs (max {max}, chunk {chunk})"
    );
    for f in &frames {
        let Frame::Line(line) = f else { continue };
        assert!(
            line.len() <= max + 1,
            "a {}-byte line passed a {max} limit",
            line.len()
        );
        decode(line);
    }
    // Lines without the limit, as the gateway runs it.
    for line in stream.split_inclusive(|b| *b == b'\n') {
        decode(line);
    }
}

fn decode(line: &[u8]) {
    let _ = serde_json::from_slice::<ServerJsonRpcMessage>(line);
    let _ = serde_json::from_slice::<ClientJsonRpcMessage>(line);
    fuzzing::line_text_agrees(line);
    if fuzzing::is_progress(line) {
        // Taken out of the stream only when rmcp itself would read it as a progress
        // notification: otherwise the tap would forward what rmcp drops.
        let msg = serde_json::from_slice::<ServerJsonRpcMessage>(line).unwrap_or_else(|e| {
            panic!(
                "progress rmcp refuses ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        assert!(
            matches!(msg, ServerJsonRpcMessage::Notification(_)),
            "not a notification: {}",
            String::from_utf8_lossy(line)
        );
        let v = serde_json::to_value(&msg).expect("a decoded message serialises");
        assert_eq!(
            v.get("method").and_then(|m| m.as_str()),
            Some("notifications/progress"),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// What the frames must be: every `\n`-terminated line (or final fragment) in order, whole
/// when it fits; the first that does not is reported after `max + 1` bytes of it were read,
/// and ends the frames.
pub fn oracle(stream: &[u8], max: usize) -> Vec<Frame> {
    let mut frames = Vec::new();
    for seg in stream.split_inclusive(|b| *b == b'\n') {
        let fits = if seg.ends_with(b"\n") {
            seg.len() <= max + 1
        } else {
            seg.len() <= max
        };
        if !fits {
            frames.push(Frame::TooLong(max + 1));
            break;
        }
        frames.push(Frame::Line(seg.to_vec()));
    }
    frames
}
