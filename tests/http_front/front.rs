//! The palisade under test: `serve --http` started on a loopback port it picks and stopped with
//! SIGTERM, and the ways the tests talk to it (raw HTTP/1.1 requests, raw JSON-RPC posts on a
//! session, the Python SDK's HTTP client, and a Python driver whose JSON report is read).
//! Time limits here only guard against a hung test; nothing is a timing assertion.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, palisade, Workspace};

/// A port free now, for a server the test starts itself (a JWKS site); palisade's own front
/// picks its port (`support::http_front`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Front {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Front {
    fn drop(&mut self) {
        support::http_front::stop_left_running(&mut self.child);
    }
}

impl Front {
    pub fn start(ws: &Workspace, config: &Path, extra: &[&str]) -> Front {
        Front::start_env(ws, config, extra, &[])
    }

    /// `start` with these variables added to palisade's environment.
    pub fn start_env(ws: &Workspace, config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Front {
        let (child, addr) = support::http_front::spawn_on_any_port(
            Command::new(palisade())
                .envs(env.iter().copied())
                .args(["serve", "--config"])
                .arg(config)
                .args(extra)
                // Info: the principal lifecycle is logged there, and no token may appear in
                // it; debug for the fast path, which logs each request it serves.
                .env(
                    "RUST_LOG",
                    "info,rmcp=warn,palisade::gateway::agent::http::fast=debug",
                ),
            &ws.errlog(),
        );
        Front { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// One raw HTTP/1.1 request: (status, headers+body text). Status 0: no connection.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(self.addr) else {
            return (0, String::new());
        };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        s.write_all(req.as_bytes()).unwrap();
        read_response(&mut s)
    }

    pub fn client(&self, token: &str, calls: Value) -> Value {
        let out = support::driver("tests/clients/http_client.py")
            .args([&self.url(), token, &calls.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or_else(|_| {
            panic!(
                "client output {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    pub fn stop(mut self) -> ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        support::raw::wait_bounded(&mut self.child)
    }

    /// Runs the Python driver `script` (tests/clients) with this front's URL and `args`,
    /// then stops the front: (the JSON report the driver printed, palisade's exit status,
    /// palisade's log). A driver that prints no JSON fails the test, showing both outputs.
    pub fn report(
        self,
        ws: &Workspace,
        script: &str,
        args: &[&str],
    ) -> (Value, ExitStatus, String) {
        let out = support::driver(script)
            .arg(self.url())
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let status = self.stop();
        let err = ws.stderr_text();
        let r: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|_| panic!("{text}\n{}\n{err}", String::from_utf8_lossy(&out.stderr)));
        (r, status, err)
    }
    pub fn post(&self, token: &str, session: Option<&str>, body: &Value) -> (u16, String) {
        post(self.addr, token, session, body)
    }

    /// A raw 2025-11-25 session: initialize, then `notifications/initialized`; its id.
    pub fn session(&self, token: &str) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "raw", "version": "1"}}});
        let (status, text) = self.post(token, None, &init);
        assert_eq!(status, 200, "{text}");
        let id = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no session id: {text}"));
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, text) = self.post(token, Some(&id), &done);
        assert_eq!(status, 202, "{text}");
        id
    }
}

/// One raw POST of `body` to `addr` with `token` and, when given, the session id: (status,
/// the whole response text). An SSE response is read to its end.
pub fn post(addr: SocketAddr, token: &str, session: Option<&str>, body: &Value) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\n",
        addr
    );
    if let Some(id) = session {
        req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    read_response(&mut s)
}

/// Waits (bounded) until the log holds `n` lines containing `what`.
pub fn wait_log(ws: &Workspace, what: &str, n: usize) -> bool {
    for _ in 0..1200 {
        if ws.stderr_text().matches(what).count() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Reads a response to its end (the request said `Connection: close`): (status, the whole
/// text). Status 0: nothing readable came back.
fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}
