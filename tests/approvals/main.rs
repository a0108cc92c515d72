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
//!
//! One test binary, one module per kind of human: `approvers` (`deny`, `elicit`, `auto`,
//! `exec`), `file_ipc` (request and response files, `palisade approve`), `tty` (the
//! controlling terminal); `guards` holds what no approver may do (delay an allowed call,
//! start with settings out of range, be repainted by an agent-chosen path, grant more than
//! was approved). The fixture and the checks they share are here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod approvers;
mod file_ipc;
mod guards;
mod tty;

use std::path::PathBuf;
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
