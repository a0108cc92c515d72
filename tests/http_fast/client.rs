//! The harness: `Front`, a running `palisade serve --http` and the raw HTTP client that
//! talks to it, its `Answer`s, and `Direct`, server-everything over stdio with no Palisade.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::support::{self, node_server, palisade, Workspace};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const ALICE: &str = "alice-token-fast-5e6f";
pub const BOB: &str = "bob-token-fast-7a8b";

pub struct Front {
    pub child: Child,
    pub addr: SocketAddr,
    errlog: std::path::PathBuf,
}

impl Front {
    pub fn start(ws: &Workspace, config: &Path) -> Front {
        use std::os::unix::fs::PermissionsExt;
        let tokens = ws.path().join("tokens");
        let hash = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
        std::fs::write(
            &tokens,
            format!("alice {}\nbob {}\n", hash(ALICE), hash(BOB)),
        )
        .unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (child, addr) = support::http_front::spawn_on_any_port(
            Command::new(palisade())
                .args(["serve", "--config"])
                .arg(config)
                .arg("--tokens")
                .arg(&tokens)
                // The fast path logs each call it serves at debug.
                .env(
                    "RUST_LOG",
                    "info,rmcp=warn,palisade::gateway::agent::http::fast=debug",
                ),
            &ws.errlog(),
        );
        Front {
            child,
            addr,
            errlog: ws.errlog(),
        }
    }

    /// One raw HTTP/1.1 POST to /mcp as alice.
    pub fn post(&self, session: Option<&str>, extra: &[(&str, &str)], body: &Value) -> Answer {
        self.post_as(ALICE, session, extra, body)
    }

    /// One raw HTTP/1.1 POST to /mcp with `token`.
    pub fn post_as(
        &self,
        token: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &Value,
    ) -> Answer {
        self.post_text(token, session, extra, &body.to_string())
    }

    /// One raw HTTP/1.1 POST to /mcp with `token`, its body `body` as written.
    pub fn post_text(
        &self,
        token: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut s = self.open_post(token, session, extra, body);
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        Answer::parse(&String::from_utf8_lossy(&raw))
    }

    /// Sends one raw HTTP/1.1 POST to /mcp; the connection, its answer unread.
    pub fn open_post(
        &self,
        token: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &str,
    ) -> TcpStream {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(id) = session {
            req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).unwrap();
        s
    }

    /// Opens the session's GET stream (what the server sends outside any request) as alice;
    /// returns once its response head has come, so the stream is open on the gateway's side.
    pub fn open_get(&self, session: &str) -> std::io::BufReader<TcpStream> {
        use std::io::BufRead;
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let req = format!(
            "GET /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Authorization: Bearer {ALICE}\r\nAccept: text/event-stream\r\n\
             Mcp-Session-Id: {session}\r\n\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut stream = std::io::BufReader::new(s);
        let mut status = String::new();
        stream.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "GET /mcp: {status}");
        loop {
            let mut header = String::new();
            stream.read_line(&mut header).unwrap();
            if header.trim().is_empty() {
                return stream;
            }
        }
    }

    /// An initialized session (`capabilities` declared); its id.
    pub fn session(&self, capabilities: Value) -> String {
        self.session_answer(capabilities).0
    }

    /// An initialized session (`capabilities` declared); its id, and the answer to its
    /// `initialize`.
    pub fn session_answer(&self, capabilities: Value) -> (String, Answer) {
        let (id, init) = self.initialize(capabilities);
        self.initialized(&id);
        (id, init)
    }

    /// A session's `initialize` alone (`capabilities` declared): its id and the answer.
    pub fn initialize(&self, capabilities: Value) -> (String, Answer) {
        let init = self.post(
            None,
            &[],
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
                {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                 "clientInfo": {"name": "fast-test", "version": "1"}}}),
        );
        assert_eq!(init.status, 200, "{init:?}");
        let id = init.header("mcp-session-id").expect("a session id");
        (id, init)
    }

    /// The session's `notifications/initialized`, answered 202.
    pub fn initialized(&self, session: &str) {
        let ack = self.post(
            Some(session),
            &[],
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(ack.status, 202, "{ack:?}");
    }

    pub fn call(&self, session: &str, id: u64, tool: &str, args: Value) -> Answer {
        self.post(
            Some(session),
            &[],
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": tool, "arguments": args}}),
        )
    }

    pub fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        support::raw::wait_bounded_logged(&mut self.child, &self.errlog);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        support::http_front::stop_left_running(&mut self.child);
    }
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    /// The body, or the data of its last SSE event carrying a JSON-RPC response.
    pub message: String,
    /// The data of every SSE event, in order.
    pub events: Vec<String>,
}

impl Answer {
    pub fn parse(raw: &str) -> Answer {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        let sse = Answer::is(head, "text/event-stream");
        let events: Vec<String> = body
            .lines()
            .filter(|_| sse)
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.trim().to_string())
            .collect();
        let message = if sse {
            let last = events.iter().rfind(|d| d.contains("\"id\""));
            last.cloned().unwrap_or_default()
        } else {
            body.trim_end().to_string()
        };
        Answer {
            status,
            head: head.to_string(),
            message,
            events,
        }
    }

    pub fn is(head: &str, content_type: &str) -> bool {
        head.lines().any(|l| {
            l.to_ascii_lowercase()
                .starts_with(&format!("content-type: {content_type}"))
        })
    }

    /// Answered by the fast path: one SSE event in a body of known length (rmcp's path
    /// streams its SSE answer, chunked).
    pub fn fast(&self) -> bool {
        Answer::is(&self.head, "text/event-stream") && self.header("content-length").is_some()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// The params of the notifications of `method` among the events, as their text.
    pub fn notes_of(&self, method: &str) -> Vec<String> {
        notes_of(&self.events, method)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.message).unwrap_or_else(|_| panic!("not JSON: {self:?}"))
    }

    /// The raw text of the response's `result`.
    pub fn result_text(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Msg<'a> {
            #[serde(borrow)]
            result: Option<&'a RawValue>,
        }
        let m: Msg<'_> = serde_json::from_str(&self.message).unwrap();
        m.result
            .unwrap_or_else(|| panic!("no result: {self:?}"))
            .get()
            .to_string()
    }
}

/// The next `count` JSON-RPC messages on an SSE stream (`open_get`), as their text: the
/// `data:` lines that are JSON (the chunk sizes between them are not).
pub fn next_messages(stream: &mut std::io::BufReader<TcpStream>, count: usize) -> Vec<String> {
    use std::io::BufRead;
    let mut got = Vec::new();
    while got.len() < count {
        let mut line = String::new();
        let n = stream.read_line(&mut line).expect("the stream stays open");
        assert!(n > 0, "the stream ended after {got:?}");
        if let Some(data) = line.trim_end().strip_prefix("data:") {
            let data = data.trim_start();
            if serde_json::from_str::<Value>(data).is_ok() {
                got.push(data.to_string());
            }
        }
    }
    got
}

/// The params of the notifications of `method` among JSON-RPC `messages`, as their text.
pub fn notes_of(messages: &[String], method: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Note<'a> {
        method: &'a str,
        id: Option<&'a RawValue>,
        #[serde(borrow)]
        params: &'a RawValue,
    }
    messages
        .iter()
        .filter_map(|m| {
            let n: Note<'_> = serde_json::from_str(m).ok()?;
            (n.method == method && n.id.is_none()).then(|| n.params.get().to_string())
        })
        .collect()
}

pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// server-everything over stdio, directly: each call's raw result text.
pub struct Direct {
    pub child: Child,
    pub stdin: ChildStdin,
    pub rx: mpsc::Receiver<String>,
    /// The notifications read so far, as their lines.
    pub notes: Vec<String>,
}

impl Direct {
    pub fn start() -> Direct {
        let mut child = Command::new("node")
            .arg(node_server("server-everything"))
            .arg("stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let rx = crate::support::read_lines(out);
        let mut d = Direct {
            child,
            stdin,
            rx,
            notes: Vec::new(),
        };
        d.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25",
                   "capabilities": {"roots": {"listChanged": true}},
                   "clientInfo": {"name": "fast-direct", "version": "1"}}),
        );
        d.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        d
    }

    pub fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn request(&mut self, id: u64, method: &str, params: Value) -> String {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .rx
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["method"] == "roots/list" {
                let rid = v["id"].clone();
                self.send(&json!({"jsonrpc": "2.0", "id": rid, "result": {"roots": []}}));
                continue;
            }
            if v.get("method").is_some() && v.get("id").is_none() {
                self.notes.push(line);
                continue;
            }
            if v.get("method").is_some() || v["id"] != json!(id) {
                continue;
            }
            let a = Answer {
                status: 200,
                head: String::new(),
                message: line,
                events: Vec::new(),
            };
            return a.result_text();
        }
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
