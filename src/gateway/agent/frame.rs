//! The length cap on the agent's messages, between serve's stdin and rmcp.
//!
//! rmcp drops an incoming line over 16 MiB and logs it, and the request it carried is never
//! answered: the client waits forever. This reader passes every line through unchanged until
//! one passes the cap; then it passes nothing more of that line (rmcp discards the partial
//! line it holds), skips the rest of it, and in its place emits a small request,
//! `palisade/oversized`, carrying the dropped request's id when the line's first bytes name
//! one (`"id"` and `"method"` as top-level keys near its start, as every SDK writes them). The
//! upstream handler answers that request with an error, so the client's call ends.
//!
//! Never: buffer a line (it is streamed through, only its first `HEAD` bytes are kept), alter
//! a line within the cap, or invent an id: a line whose id cannot be read is only dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The method of the stand-in request for a dropped over-long message.
pub const OVERSIZED_METHOD: &str = "palisade/oversized";
/// How much of each line is kept to find its id.
pub const HEAD: usize = 4096;

/// Caps lines at `max` bytes (newline included, rmcp's rule).
pub struct LineCap<R> {
    inner: R,
    max: usize,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes of the current line seen so far.
    line_len: usize,
    head: Vec<u8>,
    skipping: bool,
    pending: Vec<u8>,
    pending_pos: usize,
}

impl<R> LineCap<R> {
    pub fn new(inner: R, max: usize) -> LineCap<R> {
        LineCap {
            inner,
            max,
            buf: vec![0; 64 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            line_len: 0,
            head: Vec::with_capacity(HEAD),
            skipping: false,
            pending: Vec::new(),
            pending_pos: 0,
        }
    }

    /// The end of an over-long line: a newline for rmcp (ending the partial line it is
    /// discarding) and the stand-in request when the id is known.
    fn finish_oversized(&mut self) {
        let bytes = self.line_len;
        tracing::warn!(
            "the client sent a message of {bytes} bytes, over the {}-byte limit; dropped",
            self.max
        );
        self.pending.clear();
        self.pending_pos = 0;
        self.pending.push(b'\n');
        if let Some(id) = request_id(&self.head) {
            let stand_in = serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": OVERSIZED_METHOD,
                "params": {"bytes": bytes, "limit": self.max},
            });
            if let Ok(mut line) = serde_json::to_vec(&stand_in) {
                line.push(b'\n');
                self.pending.extend(line);
            }
        }
        self.line_len = 0;
        self.head.clear();
        self.skipping = false;
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pending_pos < this.pending.len() {
                let n = (this.pending.len() - this.pending_pos).min(out.remaining());
                out.put_slice(&this.pending[this.pending_pos..this.pending_pos + n]);
                this.pending_pos += n;
                return Poll::Ready(Ok(()));
            }
            if this.start == this.end {
                let mut rb = ReadBuf::new(&mut this.buf);
                match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            return Poll::Ready(Ok(())); // EOF
                        }
                        this.start = 0;
                        this.end = n;
                    }
                }
            }
            let avail = &this.buf[this.start..this.end];
            let newline = memchr::memchr(b'\n', avail);
            let chunk = newline.map_or(avail.len(), |i| i + 1);
            if this.skipping {
                this.line_len += chunk;
                this.start += chunk;
                if newline.is_some() {
                    this.finish_oversized();
                }
                continue;
            }
            // Within the cap (newline included when it is here): pass what fits in `out`.
            let allowed = this.max.saturating_sub(this.line_len);
            let take = chunk.min(allowed).min(out.remaining());
            if take == 0 && chunk > 0 && allowed == 0 {
                // The line has passed the cap: rmcp holds `max` bytes of it and will discard
                // them at the newline we send after skipping the rest.
                this.skipping = true;
                continue;
            }
            out.put_slice(&this.buf[this.start..this.start + take]);
            let ended = newline.is_some() && take == chunk;
            if ended {
                this.line_len = 0;
                this.head.clear();
            } else {
                let room = HEAD.saturating_sub(this.head.len()).min(take);
                this.head
                    .extend_from_slice(&this.buf[this.start..this.start + room]);
                this.line_len += take;
            }
            this.start += take;
            return Poll::Ready(Ok(()));
        }
    }
}

/// The id of a request whose JSON text starts with `head`: the values of the top-level keys
/// `"id"` (a number or a string) and `"method"` (which must be present: a response's id is
/// not a request's). A minimal scanner: the scan ends at the first value it cannot read (a
/// compound value, a string with escapes, a number or string cut by the head's end, text
/// that is not UTF-8); the keys read before it stand.
fn request_id(head: &[u8]) -> Option<serde_json::Value> {
    let text = std::str::from_utf8(head)
        .or_else(|e| std::str::from_utf8(&head[..e.valid_up_to()]))
        .ok()?;
    let b = text.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut id = None;
    let mut method = false;
    loop {
        skip_ws(&mut i);
        if b.get(i) != Some(&b'"') {
            break;
        }
        let Some(key_len) = text[i + 1..].find('"') else {
            break; // cut by the head's end
        };
        let key_end = i + 1 + key_len;
        let key = &text[i + 1..key_end];
        if key.contains('\\') {
            break;
        }
        i = key_end + 1;
        skip_ws(&mut i);
        if b.get(i) != Some(&b':') {
            break;
        }
        i += 1;
        skip_ws(&mut i);
        // Only simple values are read; the first compound value ends the scan.
        let value_end = match b.get(i) {
            Some(b'"') => {
                let Some(len) = text[i + 1..].find('"') else {
                    break; // cut by the head's end
                };
                let end = i + 1 + len;
                if text[i + 1..end].contains('\\') {
                    break;
                }
                end + 1
            }
            Some(b'-' | b'0'..=b'9') => {
                let mut j = i;
                while j < b.len() && matches!(b[j], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    j += 1;
                }
                if j == b.len() {
                    break; // the number may go on past the head
                }
                j
            }
            _ => break,
        };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text[i..value_end]) else {
            break;
        };
        match key {
            "id" if value.is_string() || value.is_number() => id = Some(value),
            "method" => method = true,
            _ => {}
        }
        i = value_end;
        skip_ws(&mut i);
        if b.get(i) != Some(&b',') {
            break;
        }
        i += 1;
    }
    id.filter(|_| method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn ids_are_read_from_the_head_of_a_request_only() {
        let got = request_id(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"#);
        assert_eq!(got, Some(serde_json::json!(7)));
        let got = request_id(br#"{ "id" : "a-1", "method": "x", "params": {"#);
        assert_eq!(got, Some(serde_json::json!("a-1")));
        // A response (no method before the big part) or an id past the head: no id.
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":7,"result":{"#), None);
        assert_eq!(
            request_id(br#"{"params":{"a":1},"id":7,"method":"x"}"#),
            None
        );
        assert_eq!(request_id(b"not json"), None);
        assert_eq!(request_id(br#"{"id":"a\"b","method":"x"}"#), None);
        // What follows the id and method cannot take them back: a string cut by the head's
        // end, text that is not UTF-8, a value that is no JSON (found by the frame
        // fuzz target: the scan used to give up on the whole line).
        let got = request_id(br#"{"jsonrpc":"2.0","id":5,"method":"x","params":"abc"#);
        assert_eq!(got, Some(serde_json::json!(5)));
        let got = request_id(b"{\"id\":5,\"method\":\"x\",\"p\":\"\xff\"}");
        assert_eq!(got, Some(serde_json::json!(5)));
        let got = request_id(br#"{"id":"q","method":"x","pa"#);
        assert_eq!(got, Some(serde_json::json!("q")));
        let got = request_id(br#"{"id":5,"method":"x","p":1-2,"#);
        assert_eq!(got, Some(serde_json::json!(5)));
        // The id itself cut or unreadable: none.
        assert_eq!(request_id(br#"{"method":"x","id":"abc"#), None);
        assert_eq!(request_id(br#"{"method":"x","id":1-2,"#), None);
    }

    async fn through(input: Vec<u8>, max: usize) -> Vec<u8> {
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(async move {
            w.write_all(&input).await.unwrap();
        });
        let mut out = Vec::new();
        LineCap::new(r, max).read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        out
    }

    #[tokio::test]
    async fn lines_within_the_cap_pass_unchanged() {
        let input = b"{\"a\":1}\n\n{\"b\":22}\ntail".to_vec();
        assert_eq!(through(input.clone(), 9).await, input);
    }

    #[tokio::test]
    async fn an_over_long_request_becomes_a_stand_in_with_its_id() {
        let mut input =
            br#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"t":""#.to_vec();
        input.extend(vec![b'x'; 300_000]);
        input.extend(b"\"}}\n{\"after\":1}\n");
        let max = 100_000;
        let out = through(input, max).await;
        let lines: Vec<&[u8]> = out.split(|b| *b == b'\n').collect();
        // rmcp sees: `max` bytes of the big line (it discards them), the stand-in, the rest.
        assert_eq!(lines[0].len(), max);
        let stand_in: serde_json::Value = serde_json::from_slice(lines[1]).unwrap();
        assert_eq!(stand_in["id"], "big");
        assert_eq!(stand_in["method"], OVERSIZED_METHOD);
        assert!(stand_in["params"]["bytes"].as_u64().unwrap() > 300_000);
        assert_eq!(lines[2], b"{\"after\":1}");
    }

    #[tokio::test]
    async fn an_over_long_line_without_an_id_is_only_dropped() {
        let mut input = vec![b'z'; 50];
        input.extend(b"\n{\"ok\":1}\n");
        let out = through(input, 20).await;
        assert_eq!(out, [vec![b'z'; 20], b"\n{\"ok\":1}\n".to_vec()].concat());
    }
}
