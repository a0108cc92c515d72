//! Unit tests of the call pipeline with no processes: the gateway is served over
//! `tokio::io::duplex` to a raw JSON-lines agent, and its one server runs in-process
//! (`server::launcher::InProcessLauncher`) as a minimal JSON-RPC server written here, which
//! answers with fixed bytes so the tests can see what the pipeline changed. What only a real
//! sandbox or a real server can prove stays in the integration tests (`tests/gateway`,
//! `tests/fidelity/`, `tests/faults/`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::DuplexStream;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines, ReadHalf, WriteHalf};

use crate::gateway::server::launcher::{InProcessLauncher, InProcessPipes, ServeInProcess};
use crate::gateway::{
    AuditError, AuditSink, CallInfo, CallOutcome, CallPolicy, CallRecord, Decision, Gateway,
    GatewayOptions, PolicyVerdict, Stages,
};
use crate::sandbox::launch::Enforcement;

/// The `result` the test server sends for `raw`: unknown keys, a key order serde would not
/// keep sorted, `1` (not `1.0`), `1.50` and an integer past `i64`, none of which survive a
/// parse and re-encode.
const RAW_RESULT: &str = r#"{"content":[{"type":"text","text":"as sent"}],"structuredContent":{"z":1,"a":1.50,"big":123456789012345678901},"x-future":{"kept":true},"_meta":{"priority":1}}"#;

/// A sandbox-like refusal the `fail` tool reports (the classifier marks it when sandboxed:
/// see the control in `an_error_result_is_not_marked_sandbox_blocked_when_not_sandboxed`).
const EROFS: &str = "Error: EROFS: read-only file system, open '/data/out.txt'";

/// The test server: answers `initialize`, lists `echo`, `raw`, `fail`, `secret` and `exit`
/// (answers, then ends like a process that exits), and answers each call; every `tools/call`
/// it receives is noted in `called` (by tool name), every start in `starts`.
fn test_server(called: Arc<Mutex<Vec<String>>>, starts: Arc<AtomicUsize>) -> ServeInProcess {
    Arc::new(move |pipes: InProcessPipes| {
        let called = called.clone();
        starts.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut lines = BufReader::new(pipes.stdin).lines();
            let mut out = pipes.stdout;
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
                    continue; // a notification or a response: nothing to answer
                };
                let result = match method {
                    "initialize" => json!({
                        "protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "in-process-test", "version": "1"},
                    })
                    .to_string(),
                    "tools/list" => {
                        let tool =
                            |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
                        json!({"tools": [tool("echo"), tool("raw"), tool("fail"), tool("secret"), tool("exit"), tool("params")]})
                            .to_string()
                    }
                    "tools/call" => {
                        let name = msg["params"]["name"].as_str().unwrap_or("").to_string();
                        called.lock().unwrap().push(name.clone());
                        match name.as_str() {
                            "raw" => RAW_RESULT.to_string(),
                            // The params' text as this server read it off its stdin.
                            "params" => json!({
                                "content": [{"type": "text", "text": raw_params(&line)}],
                            })
                            .to_string(),
                            "fail" => json!({
                                "content": [{"type": "text", "text": EROFS}],
                                "isError": true,
                            })
                            .to_string(),
                            _ => json!({
                                "content": [{"type": "text", "text": msg["params"]["arguments"].to_string()}],
                            })
                            .to_string(),
                        }
                    }
                    _ => {
                        let err = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}});
                        if out.write_all(format!("{err}\n").as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
                if out
                    .write_all(format!("{reply}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                if msg["params"]["name"] == "exit" {
                    return;
                }
            }
        })
    })
}

/// The text of a request line's `params`, as written.
fn raw_params(line: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a serde_json::value::RawValue,
    }
    serde_json::from_str::<Request<'_>>(line)
        .map(|r| r.params.get().to_string())
        .unwrap_or_default()
}

/// Denies `secret`, allows the rest.
struct DenySecret;

impl CallPolicy for DenySecret {
    fn decide(&self, call: &CallInfo<'_>) -> PolicyVerdict {
        if call.tool == "secret" {
            PolicyVerdict {
                decision: Decision::Deny,
                rule: Some("no-secrets".into()),
                reason: "secrets stay put".into(),
            }
        } else {
            PolicyVerdict::allow("test")
        }
    }
}

#[derive(Default, Clone)]
struct Collect(Arc<Mutex<Vec<CallRecord>>>);

impl AuditSink for Collect {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        self.0.lock().unwrap().push(rec.clone());
        Ok(())
    }
}

struct Broken;

impl AuditSink for Broken {
    fn record(&self, _rec: &CallRecord) -> Result<(), AuditError> {
        Err(AuditError("disk full".into()))
    }
}

/// A gateway serving one in-process server `t`, and a raw agent talking to it.
struct Harness {
    to_gateway: WriteHalf<DuplexStream>,
    from_gateway: Lines<BufReader<ReadHalf<DuplexStream>>>,
    served: tokio::task::JoinHandle<()>,
    called: Arc<Mutex<Vec<String>>>,
    starts: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Harness {
    async fn start(audit: Arc<dyn AuditSink>) -> Harness {
        Harness::start_with(audit, crate::gateway::Limits::default()).await
    }

    async fn start_with(audit: Arc<dyn AuditSink>, limits: crate::gateway::Limits) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::config::parse_str(
            r#"{"mcpServers": {"t": {"command": "never-run"}}}"#,
            "t.json",
        )
        .unwrap();
        let mut opts = GatewayOptions::new(config).unwrap();
        opts.sandbox_dir = dir.path().join("sandbox");
        opts.limits = limits;
        let called = Arc::new(Mutex::new(Vec::new()));
        let starts = Arc::new(AtomicUsize::new(0));
        opts.launcher = Arc::new(InProcessLauncher::new(test_server(
            called.clone(),
            starts.clone(),
        )));
        opts.stages = Stages {
            policy: Arc::new(DenySecret),
            audit,
            ..Stages::default()
        };
        let gateway = Gateway::start(opts).await.unwrap();
        let status = gateway.status();
        assert_eq!(status[0].enforcement, Some(Enforcement::InProcess));
        assert_eq!(status[0].tools, 6, "{status:?}");
        let (agent, gateway_io) = tokio::io::duplex(1 << 16);
        let served = tokio::spawn(async move {
            let (r, w) = tokio::io::split(gateway_io);
            gateway.serve((r, w), std::future::pending()).await.unwrap();
        });
        let (r, w) = tokio::io::split(agent);
        let mut h = Harness {
            to_gateway: w,
            from_gateway: BufReader::new(r).lines(),
            served,
            called,
            starts,
            _dir: dir,
        };
        let init = h
            .request(
                0,
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw-agent", "version": "1"}}),
            )
            .await;
        assert!(init.contains("\"result\""), "{init}");
        h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        h
    }

    async fn send(&mut self, msg: Value) {
        let line = format!("{msg}\n");
        self.to_gateway.write_all(line.as_bytes()).await.unwrap();
    }

    /// Sends a request and returns the gateway's answer to it, as the line it wrote.
    async fn request(&mut self, id: u64, method: &str, params: Value) -> String {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.answer_to(id).await
    }

    /// The gateway's answer to request `id`, as the line it wrote.
    async fn answer_to(&mut self, id: u64) -> String {
        loop {
            let line = self
                .from_gateway
                .next_line()
                .await
                .unwrap()
                .expect("the gateway closed the session before answering");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg.get("method").is_none() && msg["id"] == json!(id) {
                return line;
            }
        }
    }

    /// Sends `line` (a request with `id`, written by the test as it wants it spelt) and
    /// returns the gateway's answer to it.
    async fn request_line(&mut self, id: u64, line: &str) -> String {
        self.to_gateway
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.answer_to(id).await
    }

    async fn call(&mut self, id: u64, tool: &str) -> String {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": {"n": 1}}),
        )
        .await
    }

    fn called(&self) -> Vec<String> {
        self.called.lock().unwrap().clone()
    }

    /// Ends the session (EOF to the gateway) and waits until it has stopped its server.
    async fn finish(self) {
        let Harness {
            to_gateway,
            from_gateway,
            served,
            ..
        } = self;
        drop(to_gateway);
        drop(from_gateway);
        served.await.unwrap();
    }
}

fn records(c: &Collect) -> Vec<CallRecord> {
    c.0.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_call_is_forwarded_and_audited_once_as_in_process() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = h.call(1, "t__echo").await;
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], r#"{"n":1}"#,
        "{line}"
    );
    assert_eq!(h.called(), ["echo"]);
    let recs = records(&audit);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        (recs[0].server_name.as_str(), recs[0].tool_name.as_str()),
        ("t", "echo")
    );
    assert_eq!(recs[0].policy_decision.decision, Decision::Allow);
    assert!(matches!(recs[0].result, CallOutcome::Success), "{recs:?}");
    // Honest about what ran it: not a sandbox.
    assert!(!recs[0].sandboxed);
    assert_eq!(recs[0].enforcement, Some(Enforcement::InProcess));
    h.finish().await;
}

/// `serve` on stdio runs every task on one thread: the pipeline must not need a second
/// one to make progress (an allowed and a denied call, answered and audited).
#[tokio::test(flavor = "current_thread")]
async fn calls_are_answered_on_a_runtime_of_one_thread() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let allowed: Value = serde_json::from_str(&h.call(1, "t__echo").await).unwrap();
    assert_eq!(allowed["result"]["content"][0]["text"], r#"{"n":1}"#);
    let denied: Value = serde_json::from_str(&h.call(2, "t__secret").await).unwrap();
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(h.called(), ["echo"]);
    let decisions: Vec<Decision> = records(&audit)
        .iter()
        .map(|r| r.policy_decision.decision)
        .collect();
    assert_eq!(decisions, [Decision::Allow, Decision::Deny]);
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_not_forwarded_and_its_refusal_is_audited() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = h.call(1, "t__secret").await;
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["result"]["isError"], true, "{line}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("DENIED by policy: secrets stay put"),
        "{text}"
    );
    assert!(h.called().is_empty(), "forwarded: {:?}", h.called());
    let recs = records(&audit);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].policy_decision.decision, Decision::Deny);
    assert_eq!(recs[0].policy_decision.rule.as_deref(), Some("no-secrets"));
    assert!(
        matches!(&recs[0].result, CallOutcome::Denied { reason } if reason.contains("secrets stay put")),
        "{recs:?}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_refused_and_audited() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = h.call(1, "t__nope").await;
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert!(answer.get("result").is_none(), "{line}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("t__nope"),
        "{line}"
    );
    assert!(h.called().is_empty(), "forwarded: {:?}", h.called());
    let recs = records(&audit);
    assert_eq!(recs.len(), 1, "{recs:?}");
    // Attributed to the server its prefix names.
    assert_eq!(
        (recs[0].server_name.as_str(), recs[0].tool_name.as_str()),
        ("t", "nope")
    );
    assert_ne!(
        recs[0].policy_decision.decision,
        Decision::Allow,
        "{recs:?}"
    );
    assert!(
        matches!(recs[0].result, CallOutcome::Denied { .. }),
        "{recs:?}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_write_failure_fails_the_call_closed() {
    let mut h = Harness::start(Arc::new(Broken)).await;
    let line = h.call(1, "t__raw").await;
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert!(answer.get("result").is_none(), "the result escaped: {line}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("audit log could not be written (disk full)"),
        "{message}"
    );
    assert!(!line.contains("as sent"), "{line}");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_result_is_not_marked_sandbox_blocked_when_not_sandboxed() {
    // Control: the same text is marked when the server is sandboxed.
    let ctx = crate::gateway::call::blocked::BlockContext {
        server: "t",
        sandboxed: true,
        egress_allowed: false,
        deny_read: &[],
        deny_write: &[],
        shown: &[],
        write_protect: true,
        call_paths: &[],
    };
    let marked = crate::gateway::call::blocked::annotate(&ctx, EROFS).unwrap_or_default();
    assert!(
        marked.starts_with(crate::gateway::call::blocked::MARKER),
        "{marked}"
    );

    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = h.call(1, "t__fail").await;
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["result"]["isError"], true, "{line}");
    assert_eq!(answer["result"]["content"][0]["text"], EROFS, "{line}");
    assert!(!line.contains("SANDBOX BLOCKED"), "{line}");
    let recs = records(&audit);
    assert!(
        matches!(&recs[0].result, CallOutcome::Error { error } if error == EROFS),
        "{recs:?}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_result_reaches_the_agent_as_the_servers_bytes() {
    let mut h = Harness::start(Arc::new(Collect::default())).await;
    let line = h.call(7, "t__raw").await;
    assert!(
        line.contains(&format!(r#""result":{RAW_RESULT}"#)),
        "the result was changed on its way:\n{line}\nsent:\n{RAW_RESULT}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_server_that_ends_is_restarted_by_the_supervisor() {
    let limits = crate::gateway::Limits {
        backoff_base: std::time::Duration::from_millis(10),
        ..crate::gateway::Limits::default()
    };
    let audit = Collect::default();
    let mut h = Harness::start_with(Arc::new(audit.clone()), limits).await;
    assert_eq!(h.starts.load(Ordering::SeqCst), 1);
    let line = h.call(1, "t__exit").await;
    assert!(line.contains("\"result\""), "{line}");
    // Until the supervisor has seen the end, a call may reach the ended server and fail
    // (saying so); once restarted, calls go through again.
    let mut id = 2;
    let answered = loop {
        let line = h.call(id, "t__echo").await;
        let answer: Value = serde_json::from_str(&line).unwrap();
        if answer.get("result").is_some() {
            break line;
        }
        assert!(answer["error"]["message"].is_string(), "{line}");
        assert!(id < 200, "never restarted: {line}");
        id += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(answered.contains(r#"{\"n\":1}"#), "{answered}");
    assert_eq!(h.starts.load(Ordering::SeqCst), 2, "started once more");
    assert_eq!(h.called().last().map(String::as_str), Some("echo"));
    h.finish().await;
}

/// A call's params reach the server as the agent wrote them: numbers as spelt (an integer
/// past 2^64, `1e3`, `1.50`), keys in the agent's order, fields no model knows; only the
/// tool's name is the server's, and the agent's progress token is replaced by Palisade's.
/// Before, the server read `1.2345678901234568e22`, `1000.0` and `1.5`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_params_reach_the_server_as_the_agent_wrote_them() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"zzz":{"q":1.50},"name":"t__params","arguments":{"big":12345678901234567890123,"e":1e3,"s":"\u00e9\n"},"_meta":{"x.y/z":[1e3],"progressToken":"agent-token"},"future":true}}"#;
    let answer: Value = serde_json::from_str(&h.request_line(7, line).await).unwrap();
    let seen = answer["result"]["content"][0]["text"].as_str().unwrap();
    let token = serde_json::from_str::<Value>(seen).unwrap()["_meta"]["progressToken"].clone();
    assert!(token.is_u64(), "Palisade's own token: {seen}");
    let want = format!(
        r#"{{"zzz":{{"q":1.50}},"name":"params","arguments":{{"big":12345678901234567890123,"e":1e3,"s":"\u00e9\n"}},"_meta":{{"x.y/z":[1e3],"progressToken":{token}}},"future":true}}"#
    );
    assert_eq!(seen, want);

    // A repeated key is read one way by the policy, maybe another by the server: such params
    // go on re-encoded from what the policy read (one `path`, the last).
    let line = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"t__params","arguments":{"path":"/etc/shadow","path":"/ok"}}}"#;
    let answer: Value = serde_json::from_str(&h.request_line(8, line).await).unwrap();
    let seen = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(seen, r#"{"name":"params","arguments":{"path":"/ok"}}"#);
    let recs = records(&audit);
    assert_eq!(recs[1].arguments["path"], "/ok", "the policy read the same");
    h.finish().await;
}

/// A 2026-07-28 agent's first round goes on as written too, its envelope (Palisade's to
/// read) taken out of `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_calls_params_reach_the_server_as_written_less_the_envelope() {
    let audit = Collect::default();
    let mut h = Harness::start(Arc::new(audit.clone())).await;
    let line = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t__params","arguments":{"big":12345678901234567890123},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","x.y/z":1e3,"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let answer: Value = serde_json::from_str(&h.request_line(9, line).await).unwrap();
    let seen = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        seen,
        r#"{"name":"params","arguments":{"big":12345678901234567890123},"_meta":{"x.y/z":1e3}}"#,
        "{answer}"
    );
    h.finish().await;
}
