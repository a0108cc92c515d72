//! A JSON-RPC line client over any child's stdio that keeps each response's raw text.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

/// Guards against a hung peer; never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A JSON-RPC line client over any child's stdio that keeps each response's raw text.
pub struct Lines {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub rx: mpsc::Receiver<String>,
    pub next: u64,
    /// The notifications read so far, as their lines.
    pub notes: Vec<String>,
    /// The result of `initialize`, as its text.
    pub init: String,
    /// Requests of the gateway's this client answers, by method: the result's text as the
    /// client writes it.
    pub answers: Vec<(String, String)>,
    /// The lines of the gateway's requests this client answered, as they came.
    pub asked: Vec<String>,
}

impl Lines {
    /// A client of `cmd` after the 2025-11-25 handshake.
    pub fn spawn(cmd: &mut Command) -> Lines {
        // What Palisade declares to its servers, so both see the same tool set.
        Lines::spawn_declaring(cmd, json!({"roots": {"listChanged": true}}))
    }

    /// As `spawn`, the client declaring `capabilities`.
    pub fn spawn_declaring(cmd: &mut Command, capabilities: Value) -> Lines {
        let mut me = Lines::start(cmd);
        let init = me.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25",
                   "capabilities": capabilities,
                   "clientInfo": {"name": "fidelity", "version": "1"}}),
        );
        assert!(init.contains("protocolVersion"), "{init}");
        me.init = init;
        me.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        me
    }

    /// A client of `cmd` with no handshake (a 2026-07-28 agent makes none).
    pub fn start(cmd: &mut Command) -> Lines {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let rx = crate::support::read_lines(out);
        Lines {
            child,
            stdin,
            rx,
            next: 1,
            notes: Vec::new(),
            asked: Vec::new(),
            init: String::new(),
            answers: Vec::new(),
        }
    }

    pub fn send(&mut self, v: &Value) {
        self.send_text(&v.to_string());
    }

    /// Writes `line` as it is spelt.
    pub fn send_text(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
    }

    /// The raw text of the request's `result` (panics on an error response).
    pub fn request(&mut self, method: &str, params: Value) -> String {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.request_line(id, method, &line.to_string())
    }

    /// As `request`, for a request `line` with `id` written by the caller as it wants it spelt.
    pub fn request_line(&mut self, id: u64, method: &str, line: &str) -> String {
        {
            let stdin = self.stdin.as_mut().expect("open");
            writeln!(stdin, "{line}").expect("write");
            stdin.flush().expect("flush");
        }
        loop {
            let line = self
                .rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            #[derive(serde::Deserialize)]
            struct Msg<'a> {
                id: Option<Value>,
                method: Option<String>,
                #[serde(borrow)]
                result: Option<&'a RawValue>,
                error: Option<Value>,
            }
            let msg: Msg<'_> = serde_json::from_str(&line).expect("JSON line");
            if msg.method.as_deref() == Some("roots/list") {
                let id = msg.id.clone().unwrap_or(Value::Null);
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}}));
                continue;
            }
            let answer = self
                .answers
                .iter()
                .find(|(m, _)| msg.method.as_deref() == Some(m))
                .map(|(_, result)| result.clone());
            if let (Some(result), Some(asked)) = (answer, msg.id.as_ref()) {
                self.send_text(&format!(
                    r#"{{"jsonrpc":"2.0","id":{asked},"result":{result}}}"#
                ));
                self.asked.push(line.clone());
                continue;
            }
            if msg.method.is_some() && msg.id.is_none() {
                self.notes.push(line.clone());
                continue;
            }
            if msg.method.is_some() || msg.id != Some(json!(id)) {
                continue;
            }
            if let Some(e) = msg.error {
                panic!("{method} failed: {e}");
            }
            return msg.result.expect("a result").get().to_string();
        }
    }
}

impl Lines {
    /// The error answering request `id`, sent as `line`.
    pub fn error_of(&mut self, id: u64, line: &str) -> Value {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let got = self.rx.recv_timeout(PATIENCE).expect("an answer");
            let v: Value = serde_json::from_str(&got).expect("JSON line");
            if v["id"] == json!(id) {
                return v
                    .get("error")
                    .cloned()
                    .unwrap_or_else(|| panic!("not an error: {v}"));
            }
        }
    }

    /// The params of the notifications of `method` read so far, as their text; waits for
    /// more lines until there are `count` of them.
    pub fn notes_of(&mut self, method: &str, count: usize) -> Vec<String> {
        loop {
            let found: Vec<String> = self
                .notes
                .iter()
                .filter_map(|line| {
                    #[derive(serde::Deserialize)]
                    struct Note<'a> {
                        method: &'a str,
                        #[serde(borrow)]
                        params: &'a RawValue,
                    }
                    let n: Note<'_> = serde_json::from_str(line).ok()?;
                    (n.method == method).then(|| n.params.get().to_string())
                })
                .collect();
            if found.len() >= count {
                return found;
            }
            let line = self
                .rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("{count} {method} expected, got {found:?}"));
            let v: Value = serde_json::from_str(&line).expect("JSON line");
            if v.get("method").is_some() && v.get("id").is_none() {
                self.notes.push(line);
            }
        }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
