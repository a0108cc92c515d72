//! Escalations reach a human, end to end (issue #6): every approver exercised through
//! `palisade serve` with the real Python `mcp` SDK client (tests/clients/approvals_drive.py),
//! which also plays each human: the one answering file-IPC requests or running `palisade
//! approve` in a second terminal, the one at the terminal (a pseudo-terminal the driver owns,
//! made palisade's controlling terminal by tests/clients/ctty_exec.py), and the one behind an
//! MCP client that answers elicitation.
//!
//! The downstream server is `palisade fs-server` in the native bwrap sandbox. The policy
//! (written per test) allows reads in WORK and escalates writes there; nothing else is allowed.
//! Every test checks the audit log: `escalationResult` and who decided (`escalationDecidedBy`).
//! No timing is asserted anywhere: ordering is observed, bounds only guard against hangs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::{
    merge_settings, palisade, read_jsonl, report, serve_driver, write_json, write_policy,
};

/// The escalate rule's reason: what the agent reads after `ESCALATION REQUIRED: `.
const REASON: &str = "writing in the work directory needs a person's approval";
/// An API key the redaction must catch wherever arguments are shown to a person.
const SECRET: &str = "sk-proj-Zq8vN3xLw7RtY2uKp5sD9fGh";
/// Guard against a hung driver; never a timing assertion.
const RUN_LIMIT: Duration = Duration::from_secs(240);

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
    esc: PathBuf,
    config: PathBuf,
    audit: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (work, esc, sandbox) = (root.join("work"), root.join("esc"), root.join("sandbox"));
        for d in [&work, &esc, &sandbox] {
            std::fs::create_dir_all(d).unwrap();
        }
        let policy = root.join("compiled-policy.json");
        write_policy(
            &policy,
            json!([
                {"name": "allow-reads-in-work", "description": "reads in WORK", "principle": "test",
                 "if": {"roles": ["read-path"], "paths": {"roles": ["read-path"], "within": work}},
                 "then": "allow", "reason": "reading the work directory is fine"},
                {"name": "escalate-writes-in-work", "description": "writes in WORK", "principle": "test",
                 // fs-server's `write` is destructive: its path carries write and delete roles.
                 "if": {"roles": ["write-path", "delete-path"],
                        "paths": {"roles": ["write-path", "delete-path"], "within": work}},
                 "then": "escalate", "reason": REASON}
            ]),
        );
        let audit = root.join("audit.jsonl");
        let config = root.join("config.json");
        let cfg = json!({
            "mcpServers": {"fs": {"command": palisade(), "args": ["fs-server"], "sandbox": {}}},
            "palisade": {"sandboxDir": sandbox, "sandboxPolicy": "enforce", "policy": policy,
                         "auditLog": audit,
                         // Bounds a driver that misses a question; tests that time out on
                         // purpose pass --escalation-timeout 5.
                         "escalationTimeout": 60}
        });
        write_json(&config, &cfg);
        Fixture {
            _dir: dir,
            root,
            work,
            esc,
            config,
            audit,
        }
    }

    /// Merges `settings` into the config file's `palisade` block.
    fn configure(&self, settings: Value) {
        merge_settings(&self.config, settings);
    }

    fn errlog(&self) -> PathBuf {
        self.root.join("palisade-stderr.log")
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.errlog()).unwrap_or_default()
    }

    /// Runs the driver scenario against `palisade serve --config CFG SERVE_ARGS...`; returns
    /// its report (the part the scenario produced) after checking the tools were offered.
    fn drive(&self, scenario: &str, serve_args: &[&str], env: &[(&str, &str)]) -> Value {
        let mut c = serve_driver(
            "tests/clients/approvals_drive.py",
            scenario,
            &self.config,
            &self.errlog(),
        );
        c.args(serve_args)
            .env("WORK", &self.work)
            .env("ESC_DIR", &self.esc)
            .env("PALISADE_BIN", palisade())
            .env("SECRET", SECRET)
            .envs(env.iter().copied());
        let v = report(&mut c, scenario, &self.errlog(), Some(RUN_LIMIT));
        let tools = v["tools"].to_string();
        assert!(
            tools.contains("fs__write") && tools.contains("fs__read"),
            "{tools}\n{}",
            self.stderr_text()
        );
        v["report"].clone()
    }

    /// `drive` with the file-IPC approver on ESC (`--escalation dir:ESC`), then `serve_args`.
    fn drive_dir(&self, scenario: &str, serve_args: &[&str]) -> Value {
        let esc = format!("dir:{}", self.esc.display());
        let mut args = vec!["--escalation", &esc];
        args.extend_from_slice(serve_args);
        self.drive(scenario, &args, &[])
    }

    /// The audit records of `fs`'s `write` calls, in log order.
    fn writes(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["toolName"] == "write")
            .collect()
    }

    fn records(&self) -> Vec<Value> {
        read_jsonl(&self.audit)
    }

    fn path(&self, name: &str) -> String {
        self.work.join(name).display().to_string()
    }
}

/// The agent's text for an escalation denied with `detail`.
fn denied(detail: &str) -> String {
    format!("ESCALATION REQUIRED: {REASON}. Denied: {detail}.")
}

/// A call that reached the server and succeeded.
fn assert_success(r: &Value) {
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["is_error"], false, "{r}");
    assert!(!r["text"].as_str().unwrap().contains("ESCALATION"), "{r}");
}

/// A call refused at the approval stage (an isError result the model reads).
fn refusal_text(r: &Value) -> String {
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["is_error"], true, "{r}");
    r["text"].as_str().unwrap().to_string()
}

/// The audit record of one escalated call: what was decided, by whom, and what the agent got.
fn assert_audited(rec: &Value, result: &str, by: &str) {
    assert_eq!(rec["policyDecision"]["status"], "escalate", "{rec}");
    assert_eq!(
        rec["policyDecision"]["rule"], "escalate-writes-in-work",
        "{rec}"
    );
    assert_eq!(rec["escalationResult"], result, "{rec}");
    assert_eq!(rec["escalationDecidedBy"], by, "{rec}");
    let want = if result == "approved" {
        "success"
    } else {
        "denied"
    };
    assert_eq!(rec["result"]["status"], want, "{rec}");
    assert!(
        !rec.to_string().contains(SECRET),
        "the audit log redacts: {rec}"
    );
}

#[test]
fn deny_tells_the_agent_what_to_do_and_audits_who_decided() {
    let f = Fixture::new();
    // Explicit `deny`, then the default (no --escalation at all): the same for the agent.
    for args in [&["--escalation", "deny"][..], &[][..]] {
        let r = f.drive("plain", args, &[]);
        let text = refusal_text(&r["write"]);
        assert_eq!(text, denied("no approver is configured"), "{r}");
        assert_eq!(r["written"], false, "nothing reached the server: {r}");
        // An allowed call is untouched by it.
        assert_eq!(r["read"]["text"], "hello", "{r}");
    }
    let recs = f.writes();
    assert_eq!(recs.len(), 2, "{recs:?}");
    for rec in &recs {
        assert_audited(rec, "denied", "deny");
        assert_eq!(rec["result"]["error"], denied("no approver is configured"));
    }
    let reads: Vec<Value> = f
        .records()
        .into_iter()
        .filter(|r| r["toolName"] == "read")
        .collect();
    assert_eq!(reads.len(), 2);
    for r in &reads {
        assert!(r.get("escalationResult").is_none(), "{r}");
        assert!(r.get("escalationDecidedBy").is_none(), "{r}");
    }
}

/// Watches a directory with inotify on a thread until stopped; returns (file name, event) in
/// order, to prove the request files appear only by rename (never half-written).
struct DirWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, &'static str)>>,
}

impl DirWatch {
    fn start(dir: &Path) -> DirWatch {
        use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        inotify
            .add_watch(
                dir,
                F::IN_CREATE
                    | F::IN_MODIFY
                    | F::IN_CLOSE_WRITE
                    | F::IN_MOVED_FROM
                    | F::IN_MOVED_TO
                    | F::IN_DELETE,
            )
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            loop {
                let last = stopping.load(std::sync::atomic::Ordering::SeqCst);
                while let Ok(events) = inotify.read_events() {
                    for e in events {
                        let name = e
                            .name
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        let kind = [
                            (F::IN_CREATE, "create"),
                            (F::IN_MODIFY, "modify"),
                            (F::IN_CLOSE_WRITE, "close_write"),
                            (F::IN_MOVED_FROM, "moved_from"),
                            (F::IN_MOVED_TO, "moved_to"),
                            (F::IN_DELETE, "delete"),
                        ]
                        .into_iter()
                        .find(|(m, _)| e.mask.contains(*m))
                        .map_or("other", |(_, k)| k);
                        seen.push((name, kind));
                    }
                }
                if last {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        DirWatch { stop, thread }
    }

    fn finish(self) -> Vec<(String, &'static str)> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

#[test]
fn file_ipc_approved_denied_malformed_with_private_atomic_request_files() {
    let f = Fixture::new();
    let watch = DirWatch::start(&f.esc);
    let r = f.drive_dir("dir_ipc", &[]);
    let events = watch.finish();

    for label in ["approved", "denied", "malformed_decision", "not_json"] {
        let e = &r[label];
        let req = &e["request"];
        // IronCurtain's request file: exactly these fields, plus the optional offer of
        // "approve and remember" (a field IronCurtain's tools ignore).
        let mut keys: Vec<&str> = req
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "rememberScope")
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "arguments",
                "context",
                "escalationId",
                "reason",
                "serverName",
                "toolName"
            ],
            "{e}"
        );
        let id = req["escalationId"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        assert_eq!(e["request_file"], format!("request-{id}.json"));
        assert_eq!(req["serverName"], "fs");
        assert_eq!(req["toolName"], "write");
        assert_eq!(req["reason"], REASON);
        assert_eq!(req["context"]["rule"], "escalate-writes-in-work", "{e}");
        assert_eq!(req["arguments"]["path"], f.path(&format!("{label}.txt")));
        // Arguments on disk are redacted like the audit log.
        assert_eq!(req["arguments"]["content"], "[REDACTED:api-key]", "{e}");
        assert_eq!(e["mode"], 0o600, "request files are private: {e}");
        assert_eq!(e["pending_while_unanswered"], true, "{e}");
        // Both files are gone once the call has its answer.
        assert_eq!(e["listing_after"], json!([]), "{e}");
    }
    assert_success(&r["approved"]["result"]);
    assert_eq!(r["approved"]["written"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(f.work.join("approved.txt")).unwrap(),
        SECRET,
        "the server got the real arguments, only the request file was redacted"
    );
    assert_eq!(
        refusal_text(&r["denied"]["result"]),
        denied("denied by a human (file IPC)")
    );
    let t = refusal_text(&r["malformed_decision"]["result"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: malformed response: decision `yes please`"
        )),
        "{t}"
    );
    let t = refusal_text(&r["not_json"]["result"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: malformed response:"
        )),
        "{t}"
    );
    for label in ["denied", "malformed_decision", "not_json"] {
        assert_eq!(
            r[label]["written"], false,
            "{label} reached the server: {r}"
        );
    }

    // Atomic: each request file only ever appeared by rename from a temporary file.
    let requests: Vec<&(String, &str)> = events
        .iter()
        .filter(|(n, _)| n.starts_with("request-"))
        .collect();
    assert_eq!(requests.len(), 8, "{events:?}");
    for label in ["approved", "denied", "malformed_decision", "not_json"] {
        let name = r[label]["request_file"].as_str().unwrap();
        let kinds: Vec<&str> = events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, k)| *k)
            .collect();
        assert_eq!(kinds, ["moved_to", "delete"], "{name}: {events:?}");
    }
    let tmp_created = events
        .iter()
        .filter(|(n, k)| n.starts_with(".tmp-") && *k == "create")
        .count();
    assert_eq!(tmp_created, 4, "{events:?}");

    let recs = f.writes();
    assert_eq!(recs.len(), 4, "{recs:?}");
    assert_audited(&recs[0], "approved", "dir");
    for rec in &recs[1..] {
        assert_audited(rec, "denied", "dir");
    }
    assert_eq!(
        recs[1]["result"]["error"],
        denied("denied by a human (file IPC)")
    );
}

#[test]
fn file_ipc_timeout_and_a_response_for_an_unknown_id() {
    let f = Fixture::new();
    let r = f.drive_dir("timeout", &["--escalation-timeout", "5"]);
    let real = r["real_id"].as_str().unwrap();
    let unknown = r["unknown_id"].as_str().unwrap();
    let mut both = vec![
        format!("request-{real}.json"),
        format!("response-{unknown}.json"),
    ];
    both.sort();
    assert_eq!(r["listing_with_unknown"], json!(both), "{r}");
    // The unknown id's approval did not approve the real request: it timed out, denied.
    let t = refusal_text(&r["result"]);
    assert!(
        t.starts_with(&format!("ESCALATION REQUIRED: {REASON}. Denied: "))
            && t.contains("within 5 s"),
        "{t}"
    );
    assert_eq!(r["written"], false, "{r}");
    // The real request is gone; the stray response is not ours to delete.
    assert_eq!(
        r["listing_after"],
        json!([format!("response-{unknown}.json")]),
        "{r}"
    );
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "denied", "dir");
    assert!(
        recs[0]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("within 5 s"),
        "{}",
        recs[0]
    );
}

#[test]
fn palisade_approve_answers_from_a_second_terminal() {
    let f = Fixture::new();
    let r = f.drive_dir("approve_cmd", &[]);
    let stdout = |k: &str| {
        assert_eq!(r[k]["code"], 0, "{k}: {r}");
        r[k]["stdout"].as_str().unwrap().to_string()
    };
    assert!(stdout("empty").contains("no pending requests"), "{r}");
    let listed = stdout("listed");
    let id_a = r["ids"][0].as_str().unwrap();
    for want in [
        id_a,
        "server: fs",
        "tool:   write",
        REASON,
        "[REDACTED:api-key]",
        &f.path("by-approve-all.txt"),
    ] {
        assert!(listed.contains(want), "missing {want:?} in {listed}");
    }
    assert!(!listed.contains(SECRET), "{listed}");
    assert_eq!(
        r["a_pending_after_list"], true,
        "--list answers nothing: {r}"
    );
    assert!(stdout("all").contains("-> approved"), "{r}");
    assert!(stdout("deny_all").contains("-> denied"), "{r}");
    assert_success(&r["a"]);
    assert_eq!(r["a_written"], true, "{r}");
    assert_eq!(
        refusal_text(&r["b"]),
        denied("denied by a human (file IPC)")
    );
    assert_eq!(r["b_written"], false, "{r}");
    assert_eq!(r["listing_after"], json!([]), "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 2);
    assert_audited(&recs[0], "approved", "dir");
    assert_audited(&recs[1], "denied", "dir");
}

/// The agent cancels an escalated call while the question is pending: the question is
/// withdrawn at once (not left for the 300 s timeout), and a late approval lets nothing through.
#[test]
fn a_cancelled_call_withdraws_its_question() {
    let f = Fixture::new();
    let r = f.drive_dir("cancel", &["--escalation-timeout", "300"]);
    assert_eq!(r["pending_before_cancel"], true, "{r}");
    assert_eq!(r["request_withdrawn"], true, "{r}");
    assert_eq!(r["listing_after"], json!([]), "{r}");
    assert_eq!(r["after"]["text"], "still serving", "{r}");
    assert_eq!(r["written"], false, "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_audited(&recs[0], "denied", "cancelled");
    assert!(
        recs[0]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("the agent cancelled the call"),
        "{}",
        recs[0]
    );
}

#[test]
fn tty_asks_on_the_controlling_terminal_never_on_stdout() {
    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    // Only an explicit yes (`y` or `yes`, any case, surrounding blanks ignored) approves;
    // `n`, a bare Enter (the default N) and anything longer are denials.
    let typed = ["y", "n", "yes please", "", " YES "];
    let r = f.drive(
        "tty",
        &["--escalation", "tty"],
        &[
            ("TTY_ANSWERS", &serde_json::to_string(&typed).unwrap()),
            ("STDOUT_COPY", copy.to_str().unwrap()),
        ],
    );
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), typed.len());
    for (i, e) in r.iter().enumerate() {
        let shown = e["shown"].as_str().unwrap();
        for want in [
            "server: fs",
            "tool:   write",
            REASON,
            &f.path(&format!("tty-{i}.txt")),
            "[REDACTED:api-key]",
        ] {
            assert!(shown.contains(want), "missing {want:?} in {shown}");
        }
        assert!(
            !shown.contains(SECRET),
            "the secret shown in clear: {shown}"
        );
        assert_eq!(e["pending_while_asked"], true, "{e}");
    }
    for i in [0, 4] {
        assert_success(&r[i]["result"]);
        assert_eq!(r[i]["written"], true, "{:?}", r[i]);
    }
    for i in [1, 2, 3] {
        let t = refusal_text(&r[i]["result"]);
        assert!(
            t.starts_with(&format!(
                "ESCALATION REQUIRED: {REASON}. Denied: denied at the terminal"
            )),
            "{t}"
        );
        assert_eq!(r[i]["written"], false, "{:?}", r[i]);
    }
    // The MCP channel stayed clean: every line palisade wrote on stdout is JSON-RPC, and the
    // question never appeared there.
    let out = std::fs::read_to_string(&copy).unwrap();
    assert!(out.lines().count() >= 2 + typed.len(), "{out}");
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    assert!(!out.contains("approval needed") && !out.contains("[y/N]"));
    let recs = f.writes();
    assert_eq!(recs.len(), typed.len());
    for (i, rec) in recs.iter().enumerate() {
        let want = if i == 0 || i == 4 {
            "approved"
        } else {
            "denied"
        };
        assert_audited(rec, want, "tty");
    }
}

/// A question withdrawn because the agent cancelled the call frees the terminal, and a late
/// `y` typed for it does not answer the next question.
#[test]
fn tty_a_withdrawn_question_and_a_late_answer_decide_nothing() {
    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    let r = f.drive(
        "tty_cancel",
        &["--escalation", "tty"],
        &[("STDOUT_COPY", copy.to_str().unwrap())],
    );
    assert!(
        r["withdrawn"]
            .as_str()
            .unwrap()
            .contains("question withdrawn: the call was cancelled"),
        "{r}"
    );
    assert_eq!(
        refusal_text(&r["tty-next.txt"]),
        denied("denied at the terminal (answered `n`)")
    );
    assert_success(&r["tty-last.txt"]);
    assert_eq!(r["tty-cancelled.txt:written"], false, "{r}");
    assert_eq!(r["tty-next.txt:written"], false, "{r}");
    assert_eq!(r["tty-last.txt:written"], true, "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_audited(&recs[0], "denied", "cancelled");
    assert_audited(&recs[1], "denied", "tty");
    assert_audited(&recs[2], "approved", "tty");
}

#[test]
fn elicit_accept_decline_cancel_and_error() {
    let f = Fixture::new();
    let answers = ["accept_yes", "accept_no", "decline", "cancel", "error"];
    let r = f.drive(
        "elicit",
        &["--escalation", "elicit"],
        &[("ELICIT_ANSWERS", &answers.join(","))],
    );
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), answers.len());
    for e in r {
        let asked = e["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "one question per escalation: {e}");
        let msg = asked[0]["message"].as_str().unwrap();
        for want in ["`write`", "`fs`", REASON, "[REDACTED:api-key]"] {
            assert!(msg.contains(want), "missing {want:?} in {msg}");
        }
        assert!(!msg.contains(SECRET), "{msg}");
        let schema = &asked[0]["schema"];
        assert_eq!(schema["properties"]["approve"]["type"], "boolean", "{e}");
        assert_eq!(schema["required"], json!(["approve"]), "{e}");
    }
    assert_success(&r[0]["result"]);
    assert_eq!(r[0]["written"], true);
    let details = [
        "the user did not approve",
        "the user declined",
        "the user cancelled",
        "elicitation failed",
    ];
    for (e, detail) in r[1..].iter().zip(details) {
        let t = refusal_text(&e["result"]);
        assert!(
            t.starts_with(&format!("ESCALATION REQUIRED: {REASON}. Denied: {detail}")),
            "{t}"
        );
        assert_eq!(e["written"], false, "{e}");
    }
    let recs = f.writes();
    assert_eq!(recs.len(), answers.len());
    assert_audited(&recs[0], "approved", "elicit");
    for rec in &recs[1..] {
        assert_audited(rec, "denied", "elicit");
    }
}

#[test]
fn auto_uses_elicitation_when_the_client_declares_it() {
    let f = Fixture::new();
    let r = f.drive(
        "elicit",
        &["--escalation", "auto"],
        &[("ELICIT_ANSWERS", "accept_yes")],
    );
    assert_eq!(r[0]["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_success(&r[0]["result"]);
    assert_eq!(r[0]["written"], true);
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "approved", "elicit");
}

/// The Python SDK starts palisade in a new session (no controlling terminal), and this client
/// declares no elicitation: `auto` has nobody to ask.
#[test]
fn auto_without_elicitation_or_terminal_denies_and_says_why() {
    let f = Fixture::new();
    let r = f.drive("plain", &["--escalation", "auto"], &[]);
    let t = refusal_text(&r["write"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: no approver decided ("
        )),
        "{t}"
    );
    for why in [
        "elicit: the client did not declare elicitation",
        "tty: no terminal",
    ] {
        assert!(t.contains(why), "missing {why:?} in {t}");
    }
    assert_eq!(r["written"], false);
    assert_eq!(r["read"]["text"], "hello", "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "denied", "deny");
    assert_eq!(recs[0]["result"]["error"], t.as_str(), "the audit says why");
}

#[test]
fn exec_approves_or_hands_the_question_to_the_dir_approver() {
    let f = Fixture::new();
    // The program approves what it recognises and escalates the rest; it keeps what it was
    // given so the test can check it saw the request as JSON.
    let seen = f.root.join("seen");
    std::fs::create_dir(&seen).unwrap();
    let program = f.root.join("approver.sh");
    std::fs::write(
        &program,
        "#!/bin/sh\nin=\"$1/request-$$.json\"\ncat > \"$in\"\n\
         if grep -q approve-me \"$in\"; then echo approve; else echo escalate; fi\n",
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let chain = format!(
        "exec:{} {},dir:{}",
        program.display(),
        seen.display(),
        f.esc.display()
    );
    let r = f.drive("exec_chain", &["--escalation", &chain], &[]);
    assert_success(&r["by_program"]);
    assert_eq!(r["by-program_written"], true, "{r}");
    assert_success(&r["human_approves"]["result"]);
    assert_eq!(r["human_approves_written"], true, "{r}");
    assert_eq!(
        refusal_text(&r["human_denies"]["result"]),
        denied("denied by a human (file IPC)")
    );
    assert_eq!(r["human_denies_written"], false, "{r}");
    // The program saw every escalation, as IronCurtain-shaped JSON.
    let given: Vec<Value> = std::fs::read_dir(&seen)
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    assert_eq!(given.len(), 3, "{given:?}");
    for g in &given {
        assert_eq!(g["serverName"], "fs");
        assert_eq!(g["toolName"], "write");
        assert_eq!(g["reason"], REASON);
    }
    let recs = f.writes();
    assert_eq!(recs.len(), 3);
    assert_audited(&recs[0], "approved", "exec");
    assert_audited(&recs[1], "approved", "dir");
    assert_audited(&recs[2], "denied", "dir");
}

/// Also the config-file route: `"palisade": {"escalation": "dir:PATH"}` instead of the flag.
#[test]
fn a_slow_escalation_does_not_delay_an_allowed_call() {
    let f = Fixture::new();
    f.configure(json!({"escalation": format!("dir:{}", f.esc.display())}));
    let r = f.drive("ordering", &[], &[]);
    // B (allowed) answered while A (escalated) was still waiting for a person.
    assert_eq!(r["b"]["text"], "hello", "{r}");
    assert_eq!(
        r["at_b_done"],
        json!({"a_done": false, "a_request_exists": true, "a_answered": false}),
        "{r}"
    );
    // C, escalated after A and approved first, completed while A still waited.
    assert_success(&r["c"]);
    assert_eq!(
        r["at_c_done"],
        json!({"a_done": false, "a_request_exists": true}),
        "{r}"
    );
    assert_success(&r["a"]);
    assert_eq!(
        r["events"],
        json!([
            "a:requested",
            "b:done",
            "c:requested",
            "c:done",
            "a:answered",
            "a:done"
        ])
    );
    assert_eq!(
        (&r["a_written"], &r["c_written"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(r["listing_after"], json!([]), "{r}");
    // The audit log agrees on the order of completion: B, then C, then A.
    let order: Vec<String> = f
        .records()
        .iter()
        .map(|rec| {
            let p = rec["arguments"]["path"].as_str().unwrap_or_default();
            Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(order, ["hello.txt", "c.txt", "a.txt"], "{order:?}");
    let recs = f.writes();
    assert_audited(&recs[0], "approved", "dir");
    assert_audited(&recs[1], "approved", "dir");
}

/// `--escalation-timeout` outside 5-3600 s is refused at start, naming the range; so is an
/// approver nobody knows.
#[test]
fn escalation_settings_out_of_range_are_refused_at_start() {
    let f = Fixture::new();
    for (args, want) in [
        (
            &["--escalation", "tty", "--escalation-timeout", "4"][..],
            "5-3600",
        ),
        (
            &["--escalation", "tty", "--escalation-timeout", "3601"][..],
            "5-3600",
        ),
        (&["--escalation", "yolo"][..], "unknown approver `yolo`"),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&f.config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "nothing on the MCP channel: {args:?}"
        );
    }
}

/// Issue 23, finding 3 (regression: the prompt printed the path raw). A file name the agent
/// chose carries `ESC[2A ESC[2K` (cursor up two lines, erase), the one-byte C1 CSI and a
/// right-to-left override. The control: the request the gateway wrote holds those characters
/// unchanged, so they did reach the question; the attack: neither the terminal prompt nor
/// `palisade approve` shows any of them raw, only as visible escapes.
#[test]
fn terminal_escapes_in_an_agent_chosen_path_cannot_repaint_the_prompt() {
    let raw = ['\u{1b}', '\u{9b}', '\u{202e}'];
    let assert_inert = |shown: &str| {
        for c in raw {
            assert!(
                !shown.contains(c),
                "{c:?} reached the terminal raw: {shown:?}"
            );
        }
        // The arguments are JSON, whose own escape (`\u001b`) covers C0; the rest shows as
        // `\u{…}`. Either way the person sees every character of the name.
        assert!(
            shown.contains("evil\\u001b[2A\\u001b[2K\\u{9b}1A\\u{202e}txt.exe"),
            "the name is not shown escaped: {shown:?}"
        );
    };
    let f = Fixture::new();
    let r = f.drive_dir("hostile_dir", &[]);
    let path = r["request"]["arguments"]["path"].as_str().unwrap();
    assert!(raw.iter().all(|c| path.contains(*c)), "control: {path:?}");
    for k in ["listed", "asked"] {
        assert_eq!(r[k]["code"], 0, "{k}: {r}");
        assert_inert(r[k]["stdout"].as_str().unwrap());
    }
    assert!(r["asked"]["stdout"].as_str().unwrap().contains("-> denied"));
    assert!(
        refusal_text(&r["result"]).contains("denied by a human"),
        "{r}"
    );

    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    let r = f.drive(
        "hostile_tty",
        &["--escalation", "tty"],
        &[("STDOUT_COPY", copy.to_str().unwrap())],
    );
    assert_inert(r["shown"].as_str().unwrap());
    assert!(
        refusal_text(&r["result"]).contains("denied at the terminal"),
        "{r}"
    );
}

/// Issue 23, finding 4 (regression: approving a write to `~/.config/notes-app/today.md`,
/// whose directory did not exist yet, mounted all of `~/.config` read-write for the rest of
/// the session). HOME holds `.config`, and every write escalates. The approval adds
/// exactly `~/.config/notes-app` (created), shown to the person in the request; a write
/// directly in `~/.config` and one to a user service are refused without asking anyone,
/// even though the person in this test approves whatever is put to them. The control is the
/// first call: the same person's approval does let an ordinary note through.
#[test]
fn an_approval_grants_exactly_the_approved_directory_never_an_ancestor() {
    let f = Fixture::new();
    // Writes anywhere escalate (a rule without a directory: no root of its own), so an
    // approval has to widen the server.
    write_policy(
        &f.root.join("compiled-policy.json"),
        json!([
            {"name": "allow-reads-in-work", "description": "reads in WORK", "principle": "test",
             "if": {"roles": ["read-path"], "paths": {"roles": ["read-path"], "within": f.work}},
             "then": "allow", "reason": "reading the work directory is fine"},
            {"name": "escalate-writes", "description": "every write", "principle": "test",
             "if": {"roles": ["write-path", "delete-path"]},
             "then": "escalate", "reason": REASON},
            {"name": "allow-the-rest", "description": "everything else", "principle": "test",
             "if": {}, "then": "allow", "reason": "reads are not what this test is about"}
        ]),
    );
    let home = f.root.join("home");
    std::fs::create_dir_all(home.join(".config")).unwrap();
    let r = f.drive(
        "widen_exact",
        &["--escalation", &format!("dir:{}", f.esc.display())],
        &[("HOME", home.to_str().unwrap())],
    );
    let notes = home.join(".config/notes-app");
    let recs = f.writes();
    assert_eq!(
        recs[0]["approvedRoots"],
        json!([{"path": notes, "access": "rw"}]),
        "{}",
        recs[0]
    );
    for k in ["config", "service"] {
        assert_eq!(r[k]["request"], Value::Null, "{k} was put to a person: {r}");
        assert_eq!(r[k]["written"], false, "{k}: {r}");
        let t = refusal_text(&r[k]["result"]);
        assert!(
            t.contains("Denied: not asked: an approval would grant") && t.contains("persistence"),
            "{k}: {t}"
        );
    }
    assert_success(&r["note"]["result"]);
    assert_eq!(r["note"]["written"], true, "{r}");
    assert_eq!(
        r["note"]["request"]["grants"],
        json!([{"path": notes, "access": "rw"}]),
        "the person is shown the exact grant: {r}"
    );
    assert!(!home.join(".config/systemd").exists());
    assert_eq!(recs.len(), 3, "{recs:?}");
    for rec in &recs[1..] {
        assert_eq!(rec["escalationResult"], "denied", "{rec}");
        assert_eq!(rec["escalationDecidedBy"], "deny", "{rec}");
        assert!(rec["approvedRoots"].is_null(), "{rec}");
    }
}
