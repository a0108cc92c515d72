//! Compatibility suite: each real MCP server runs through `palisade serve` under enforce with
//! the native bubblewrap sandbox and the profile matched from its command line, driven by a
//! real client (the Python `mcp` SDK, tests/compat/client.py). Prints a table of pass/fail
//! per server and check, then fails if any required check failed.
//!
//! Policy: every config uses tests/fixtures/allow-all-policy.json, so that what is refused
//! is refused by the sandbox (or the server's own root checks), which is what a profile must
//! get right; the policy engine is proven in tests/policy*.rs. A failed check fails the test
//! unless it is listed in `KNOWN_GAPS` (the one place, each with its reason), where it is
//! reported as GAP; a listed gap that passes fails the test too, so the list stays true.
//!
//! Needs bubblewrap and the test dependencies ($PALISADE_TEST_DEPS, scripts/test.sh).
//!
//! One test binary, one module per subject: `servers` (the table of real servers, and two
//! under Landlock), `profiles` (the profile commands, a profile from a directory, grants
//! delivered by `run`), `trace` (`trace-denials`), `inspector` (the MCP Inspector's CLI
//! through palisade). `checks` holds each server's checks; the workspace and the driver
//! they all use are here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod checks;

mod inspector;
mod profiles;
mod servers;
mod trace;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::{allow_all_policy, driver, merge_settings, palisade, report, write_json};

const SECRET_TEXT: &str = "compat-secret-7d1f";
const ENV_SECRET: &str = "compat-env-secret-91ab";

/// A workspace: a granted dir with a file, a secret dir outside every grant, the session
/// sandbox dir and the state dir.
struct Ws {
    dir: tempfile::TempDir,
    /// The `backend` of the configs this workspace writes.
    backend: &'static str,
}

impl Ws {
    fn new() -> Ws {
        Ws::with_backend("bwrap")
    }

    fn with_backend(backend: &'static str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        for d in ["granted", "secret", "sandbox", "state"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(
            dir.path().join("granted/hello.txt"),
            "hello from the host\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("secret/secret.txt"), SECRET_TEXT).unwrap();
        Ws { dir, backend }
    }

    fn p(&self, rel: &str) -> String {
        self.dir.path().join(rel).display().to_string()
    }

    /// One server `name` in an enforce config with the allow-all policy fixture.
    fn config(&self, name: &str, server: Value) -> String {
        let cfg = json!({
            "mcpServers": {name: server},
            "palisade": {
                "sandboxPolicy": "enforce",
                "backend": self.backend,
                "sandboxDir": self.p("sandbox"),
                "stateDir": self.p("state"),
                "policy": allow_all_policy(),
            }
        });
        let path = self.dir.path().join("config.json");
        write_json(&path, &cfg);
        path.display().to_string()
    }

    /// `config`, with `extra` merged into the `palisade` block (a policy, an approver).
    fn config_with(&self, name: &str, server: Value, extra: Value) -> String {
        let path = self.config(name, server);
        merge_settings(Path::new(&path), extra);
        path
    }

    /// A profiles directory holding `NAME.json` with each `(NAME, JSON)`.
    fn profiles(&self, profiles: &[(&str, &str)]) -> PathBuf {
        let dir = self.dir.path().join("profiles");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in profiles {
            std::fs::write(dir.join(format!("{name}.json")), body).unwrap();
        }
        dir
    }

    fn params(&self, prefix: &str) -> Value {
        json!({
            "prefix": prefix,
            "granted": self.p("granted"),
            "secret_file": self.p("secret/secret.txt"),
            "secret_text": SECRET_TEXT,
            "env_secret": ENV_SECRET,
        })
    }
}

/// Runs client.py SCENARIO against `palisade serve --config CONFIG`; returns its checks.
fn drive(ws: &Ws, scenario: &str, params: &Value, config: &str) -> Vec<Value> {
    let log = ws.dir.path().join("serve-stderr.log");
    let mut c = driver("tests/compat/client.py");
    c.arg(scenario)
        .arg(params.to_string())
        .args(["--", palisade(), "serve", "--config", config])
        .env("PALISADE_COMPAT_SECRET", ENV_SECRET)
        // Some checks read the servers' own stderr, which the gateway relays at info.
        .env("RUST_LOG", "info,rmcp=warn")
        .env("COMPAT_ERRLOG", &log);
    let report = report(&mut c, &format!("client.py {scenario}"), &log, None);
    report["checks"].as_array().cloned().unwrap_or_default()
}

struct Row {
    server: &'static str,
    profile: &'static str,
    check: String,
    pass: bool,
    detail: String,
}

fn rows(server: &'static str, profile: &'static str, checks: Vec<Value>) -> Vec<Row> {
    assert!(!checks.is_empty(), "{server}: the client ran no checks");
    checks
        .into_iter()
        .map(|c| Row {
            server,
            profile,
            check: c["name"].as_str().unwrap_or("?").to_string(),
            pass: c["pass"].as_bool().unwrap_or(false),
            detail: c["detail"].as_str().unwrap_or("").replace('\n', " "),
        })
        .collect()
}

fn bwrap_usable() -> bool {
    Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-all", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True (after saying so) when this machine cannot run the sandbox, so the test skips.
fn skipped_without_bwrap() -> bool {
    if bwrap_usable() {
        return false;
    }
    support::skip("bubblewrap cannot create namespaces on this machine");
    true
}
