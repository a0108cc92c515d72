//! HTTP/1.1 with keep-alive, just enough for the load client: one request at a time on a
//! connection, the answer read whole (`Content-Length`, chunked, or until close), and the
//! JSON-RPC messages it carries (a JSON body or SSE `data:` lines).
//!
//! Never: pipeline requests, follow redirects, or read a body past `MAX_BODY`.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The largest answer read (a `stat` answer is a few hundred bytes).
pub const MAX_BODY: usize = 16 << 20;
/// The longest status or header line read.
const MAX_LINE: usize = 16 << 10;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed answer: {0}")]
    Malformed(String),
    #[error("the server closed the connection")]
    Closed,
}

/// One answer: status, headers (names lower-cased) and body.
#[derive(Debug, Default)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body: the body itself when JSON, each SSE event's data
    /// when an event stream (events whose data is not JSON, e.g. a priming event, skipped).
    pub fn messages(&self) -> Vec<Value> {
        let sse = self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if sse {
            sse_messages(&self.body)
        } else {
            serde_json::from_slice(&self.body).map_or_else(|_| Vec::new(), |v| vec![v])
        }
    }
}

/// The JSON data of each event of an SSE body (multi-line data joined by `\n`).
pub fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    let mut flush = |data: &mut Vec<&str>| {
        if !data.is_empty() {
            if let Ok(v) = serde_json::from_str(&data.join("\n")) {
                out.push(v);
            }
            data.clear();
        }
    };
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data);
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    flush(&mut data);
    out
}

/// The status code of a status line (`HTTP/1.1 200 OK`).
pub fn parse_status(line: &str) -> Result<u16, WireError> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next().and_then(|c| c.parse().ok())) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => Ok(code),
        _ => Err(WireError::Malformed(format!("status line {line:?}"))),
    }
}

/// The size of a chunk from its size line (`1a;ext=1`).
pub fn parse_chunk_size(line: &str) -> Result<usize, WireError> {
    let hex = line.split(';').next().unwrap_or("").trim();
    usize::from_str_radix(hex, 16).map_err(|_| WireError::Malformed(format!("chunk size {line:?}")))
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<String, WireError> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Err(WireError::Closed);
    }
    if buf.last() != Some(&b'\n') {
        return Err(WireError::Malformed("a line too long or cut".into()));
    }
    let s = String::from_utf8(buf).map_err(|_| WireError::Malformed("not UTF-8".into()))?;
    Ok(s.trim_end_matches(['\r', '\n']).to_string())
}

/// Reads one answer. Returns it and whether the connection can carry another request.
pub async fn read_answer<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<(Answer, bool), WireError> {
    let mut answer = Answer {
        status: parse_status(&read_line(r).await?)?,
        ..Answer::default()
    };
    loop {
        let line = read_line(r).await?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| WireError::Malformed(format!("header {line:?}")))?;
        answer
            .headers
            .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut reusable = !answer
        .header("connection")
        .is_some_and(|c| c.eq_ignore_ascii_case("close"));
    let chunked = answer
        .header("transfer-encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    let length = answer.header("content-length").map(str::parse::<usize>);
    if chunked {
        loop {
            let size = parse_chunk_size(&read_line(r).await?)?;
            if size == 0 {
                while !read_line(r).await?.is_empty() {}
                break;
            }
            if answer.body.len() + size > MAX_BODY {
                return Err(WireError::Malformed(format!("body over {MAX_BODY} bytes")));
            }
            let start = answer.body.len();
            answer.body.resize(start + size, 0);
            r.read_exact(&mut answer.body[start..]).await?;
            if !read_line(r).await?.is_empty() {
                return Err(WireError::Malformed("no CRLF after a chunk".into()));
            }
        }
    } else if let Some(length) = length {
        let n = length.map_err(|_| WireError::Malformed("content-length".into()))?;
        if n > MAX_BODY {
            return Err(WireError::Malformed(format!("body over {MAX_BODY} bytes")));
        }
        answer.body.resize(n, 0);
        r.read_exact(&mut answer.body).await?;
    } else if !matches!(answer.status, 204 | 304) {
        (&mut *r)
            .take(MAX_BODY as u64 + 1)
            .read_to_end(&mut answer.body)
            .await?;
        if answer.body.len() > MAX_BODY {
            return Err(WireError::Malformed(format!("body over {MAX_BODY} bytes")));
        }
        reusable = false;
    }
    Ok((answer, reusable))
}

/// One kept-alive connection to the server.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn { addr, stream: None }
    }

    /// Sends `METHOD path` with `body` (JSON) and these extra headers, reads the answer;
    /// reconnects first when the server closed the previous connection.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Answer, WireError> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => BufReader::new(TcpStream::connect(self.addr).await?),
        };
        stream.get_mut().set_nodelay(true)?;
        let mut msg = head.into_bytes();
        msg.extend_from_slice(body);
        stream.get_mut().write_all(&msg).await?;
        let (answer, reusable) = read_answer(&mut stream).await?;
        if reusable {
            self.stream = Some(stream);
        }
        Ok(answer)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> Result<(Answer, bool), WireError> {
        let mut r = bytes;
        read_answer(&mut r).await
    }

    #[tokio::test]
    async fn chunked_sse_answer_is_joined_and_its_messages_found() {
        let body = "event: message\r\nid: 0\r\ndata:\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n";
        let (a, b) = body.split_at(20);
        let wire = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x};x=y\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let (answer, reusable) = read(wire.as_bytes()).await.unwrap();
        assert!(reusable);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, body.as_bytes());
        let msgs = answer.messages();
        assert_eq!(msgs.len(), 1, "the priming event carries no JSON");
        assert_eq!(msgs[0]["id"], 3);
    }

    #[tokio::test]
    async fn content_length_json_and_close() {
        let wire = b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"error\":\"x\"}";
        let (answer, reusable) = read(wire).await.unwrap();
        assert!(!reusable);
        assert_eq!(answer.status, 401);
        assert_eq!(answer.messages()[0]["error"], "x");
    }

    #[tokio::test]
    async fn empty_accepted_answer_keeps_the_connection() {
        let (answer, reusable) = read(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        assert!(reusable);
        assert_eq!(answer.status, 202);
        assert!(answer.messages().is_empty());
    }

    #[tokio::test]
    async fn malformed_answers_are_errors() {
        assert!(matches!(read(b"").await, Err(WireError::Closed)));
        assert!(read(b"SSH-2.0 hello\r\n\r\n").await.is_err());
        assert!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .await
                .is_err()
        );
        assert!(read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
            .await
            .is_err());
    }

    #[test]
    fn multi_line_sse_data_is_joined() {
        let v = sse_messages(b"data: {\"a\":\ndata: 1}\n\n");
        assert_eq!(v, vec![serde_json::json!({"a": 1})]);
    }
}
