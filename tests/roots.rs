//! Roots end to end, against the real thing: `palisade serve` in the native bwrap sandbox
//! (enforce mode), the real `@modelcontextprotocol/server-filesystem` from npm and a small
//! Python MCP server that reports from inside its sandbox (tests/servers/roots_probe.py),
//! driven by the Python `mcp` SDK client (tests/clients/roots_drive.py), with escalations
//! answered through the file-IPC approver the way a person's tool would.
//!
//! The policy (written per test) allows reads in A and escalates reads elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::{
    audit_records, names, node_server, palisade, python, repo, report, run_ok, serve_driver,
    write_json, write_policy, Workspace,
};

struct Fixture {
    ws: Workspace,
    a: PathBuf,
    b: PathBuf,
    c: PathBuf,
    sandbox: PathBuf,
    esc: PathBuf,
    config: PathBuf,
}

fn fixture(extra_servers: Value) -> Fixture {
    let ws = Workspace::new();
    let root = ws.canonical();
    let (a, b, c) = (root.join("A"), root.join("B"), root.join("C"));
    let sandbox = root.join("sandbox");
    let esc = root.join("esc");
    for d in [&a, &b, &c, &sandbox, &esc] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(a.join("a.txt"), "alpha").unwrap();
    std::fs::write(b.join("b.txt"), "bravo").unwrap();
    std::fs::write(c.join("c.txt"), "charlie").unwrap();
    std::os::unix::fs::symlink(&c, a.join("link")).unwrap();
    let policy = root.join("compiled-policy.json");
    write_policy(
        &policy,
        json!([
            {"name": "allow-fs-writes-anywhere", "description": "lets the roots check decide", "principle": "test",
             "if": {"server": ["fs"], "tool": ["write_file"]},
             "then": "allow", "reason": "a careless policy: only the roots check stands in the way"},
            {"name": "allow-read-a", "description": "reads in A", "principle": "test",
             "if": {"roles": ["read-path"], "paths": {"roles": ["read-path"], "within": a}},
             "then": "allow", "reason": "reading in A is allowed"},
            {"name": "escalate-read-elsewhere", "description": "reads elsewhere", "principle": "test",
             "if": {"roles": ["read-path"]},
             "then": "escalate", "reason": "reading outside A needs a person's approval"},
            {"name": "allow-the-rest", "description": "everything else", "principle": "test",
             "if": {}, "then": "allow", "reason": "the roots check is what this test is about"}
        ]),
    );
    let mut servers = json!({
        "fs": {"command": "node", "args": [node_server("server-filesystem"), "{roots}"], "sandbox": {}},
        "probe": {"command": python().display().to_string(),
                  "args": [repo("tests/servers/roots_probe.py")],
                  // Its `announced` asks for roots by a request of its own: the handshake era.
                  "protocol": "2025-11-25",
                  "sandbox": {}}
    });
    for (k, v) in extra_servers.as_object().unwrap() {
        servers[k] = v.clone();
    }
    let config = root.join("config.json");
    write_json(
        &config,
        &json!({"mcpServers": servers, "palisade": {
            "sandboxDir": sandbox, "sandboxPolicy": "enforce", "policy": policy,
            // Bounds a driver that misses an escalation; never a timing assertion.
            "escalationTimeout": 30,
        }}),
    );
    Fixture {
        ws,
        a,
        b,
        c,
        sandbox,
        esc,
        config,
    }
}

/// Runs the driver scenario against `palisade serve --escalation dir:ESC`.
fn drive(f: &Fixture, scenario: &str, env: &[(&str, &str)]) -> Value {
    let mut c = serve_driver(
        "tests/clients/roots_drive.py",
        scenario,
        &f.config,
        &f.ws.errlog(),
    );
    c.arg("--escalation")
        .arg(format!("dir:{}", f.esc.display()))
        .env("DRIVE_A", &f.a)
        .env("DRIVE_B", &f.b)
        .env("DRIVE_C", &f.c)
        .env("ESC_DIR", &f.esc)
        // ROOTS_RUST_LOG: more of palisade's log when debugging a failure.
        .env(
            "RUST_LOG",
            std::env::var("ROOTS_RUST_LOG").unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .envs(env.iter().copied());
    report(&mut c, scenario, &f.ws.errlog(), None)
}

/// `palisade policy roots --config CONFIG --server NAME`: the root paths.
fn policy_roots(f: &Fixture, server: &str) -> Vec<String> {
    let out = run_ok(
        Command::new(palisade())
            .args(["policy", "roots", "--config"])
            .arg(&f.config)
            .args(["--server", server]),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Mount points inside the workspace (everything else is the system base and runtime).
fn ws_mounts(mounts: &Value, f: &Fixture) -> Vec<String> {
    let root = f.ws.canonical().display().to_string();
    let mut m: Vec<String> = names(mounts)
        .into_iter()
        .filter(|p| p.starts_with(&root))
        .collect();
    m.sort();
    m.dedup();
    m
}

fn uri(p: &str) -> String {
    format!("file://{p}")
}

#[test]
fn roots_are_mounted_announced_and_widened_only_on_approval() {
    let f = fixture(json!({}));
    let s = |p: &Path| p.display().to_string();
    let want = vec![s(&f.sandbox), s(&f.a)];
    // `palisade policy roots` prints what serve uses: sandbox dir first, then A (the allow
    // rule's paths.within); never B (only a catch-all escalates there).
    assert_eq!(policy_roots(&f, "fs"), want);
    assert_eq!(policy_roots(&f, "probe"), want);

    let r = drive(&f, "widen", &[]);
    let log = f.ws.stderr_text();

    // At start, the three views agree for every server: policy roots, what the server says
    // it may access (server-filesystem) or was announced (probe), and the sandbox's mounts.
    assert_eq!(names(&r["start"]["fs_dirs"]), want, "{r}");
    assert_eq!(
        names(&r["start"]["probe_announced"]),
        want.iter().map(|p| uri(p)).collect::<Vec<_>>(),
        "{r}"
    );
    assert_eq!(
        ws_mounts(&r["start"]["probe_mounts"], &f),
        sorted(want.clone()),
        "{r}"
    );

    // A read in A is allowed and works.
    assert_eq!(r["read_a"]["text"], "alpha", "{r}");

    // Denied: nothing mounted, the server cannot see B even when asked directly through an
    // argument palisade does not check (the sandbox alone stops it) while A stays readable.
    let denied = &r["b_denied"];
    assert_eq!(denied["escalation"]["server"], "probe", "{r}");
    assert!(
        denied["result"]["text"]
            .as_str()
            .unwrap()
            .starts_with("ESCALATION REQUIRED"),
        "{r}"
    );
    let after = &r["after_denial"];
    assert!(
        after["probe_peek_b"]["text"]
            .as_str()
            .unwrap()
            .starts_with("UNREADABLE"),
        "{r}"
    );
    assert_eq!(after["probe_peek_a"]["text"], "READ: alpha", "{r}");
    assert_eq!(
        ws_mounts(&after["probe_mounts"], &f),
        sorted(want.clone()),
        "{r}"
    );

    // Approved: B is mounted, announced and readable; the server reports it.
    assert_eq!(r["b_approved"]["escalation"]["server"], "fs", "{r}");
    assert_eq!(r["b_approved"]["result"]["text"], "bravo", "{r}");
    let mut wider = want.clone();
    wider.push(s(&f.b));
    assert_eq!(names(&r["fs_dirs_after"]), wider, "{r}");

    // The next read in B is decided by the policy again (escalated again) and, approved,
    // needs no second relaunch: one relaunch for fs, one for probe, in the whole session.
    assert_eq!(r["b_again"]["escalation"]["server"], "fs", "{r}");
    assert_eq!(r["b_again"]["result"]["text"], "bravo", "{r}");
    assert_eq!(r["probe_b_approved"]["result"]["text"], "bravo", "{r}");
    assert_eq!(
        log.matches("relaunching with wider roots").count(),
        2,
        "one relaunch per widened server:\n{log}"
    );

    // After the probe's approval its mounts and its announced roots both hold B.
    let pa = &r["probe_after"];
    assert_eq!(ws_mounts(&pa["mounts"], &f), sorted(wider.clone()), "{r}");
    assert_eq!(
        names(&pa["announced"]),
        wider.iter().map(|p| uri(p)).collect::<Vec<_>>(),
        "{r}"
    );
    assert_eq!(pa["peek_b"]["text"], "READ: bravo", "{r}");

    // The approving calls list the roots they added in their audit records.
    let records = audit_records(&f.ws);
    let approving: Vec<&Value> = records
        .iter()
        .filter(|rec| {
            rec["approvedRoots"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        })
        .collect();
    assert_eq!(approving.len(), 2, "{records:?}");
    for rec in approving {
        assert_eq!(
            rec["approvedRoots"],
            json!([{"path": s(&f.b), "access": "ro"}]),
            "{rec}"
        );
    }

    // Escapes through the proxy: a symlink planted in A pointing at C, and `..` out of A.
    for k in ["symlink_write", "dotdot_write"] {
        let t = r[k]["text"].as_str().unwrap();
        assert_eq!(r[k]["is_error"], true, "{k}: {r}");
        assert!(t.starts_with("FORBIDDEN:"), "{k}: {t}");
        assert!(
            t.contains(&s(&f.c)),
            "the refusal names the real target: {t}"
        );
    }
    assert_eq!(names(&r["c_files"]), ["c.txt"], "nothing reached C: {r}");
    // The same tool writes where the roots allow it (the refusals above are the roots').
    assert_eq!(r["write_sandbox"]["is_error"], false, "{r}");
    assert!(f.sandbox.join("ok.txt").exists());
    // Control: unprotected, the same symlink does lead into C.
    std::fs::write(f.a.join("link/control.txt"), "x").unwrap();
    assert!(f.c.join("control.txt").exists());
}

fn median(v: &Value) -> f64 {
    let mut xs: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Benchmark, not a test (`cargo test --test roots -- --ignored --nocapture`): time from the
/// approval (the response file written) to the call's result, for a read in a fresh directory
/// (widen + relaunch + roots applied + forward) and for a second approved read there (no
/// relaunch), for server-filesystem and palisade fs-server. Prints medians; asserts only
/// that every approved read worked.
#[test]
#[ignore]
fn bench_approval_to_forwarded_call() {
    let f = fixture(json!({
        "pfs": {"command": palisade(), "args": ["fs-server"], "sandbox": {}}
    }));
    let n = std::env::var("ROOTS_BENCH_DIRS").unwrap_or_else(|_| "30".into());
    let r = drive(&f, "bench", &[("DRIVE_BENCH_DIRS", &n)]);
    assert!(r.get("errors").is_none(), "{r}");
    if std::env::var_os("ROOTS_BENCH_LOG").is_some() {
        for l in f.ws.stderr_text().lines().filter(|l| {
            [
                "relaunching",
                "started (",
                "roots v",
                "replaced process",
                "after approval",
            ]
            .iter()
            .any(|k| l.contains(k))
        }) {
            println!("{l}");
        }
    }
    for server in ["fs", "pfs"] {
        let fresh = median(&r[server]["fresh"]) * 1000.0;
        let again = median(&r[server]["again"]) * 1000.0;
        println!(
            "{server}: approval -> result, median of {n}: fresh dir (relaunch) {fresh:.1} ms, \
             already granted {again:.1} ms, relaunch cost {:.1} ms",
            fresh - again
        );
    }
}

/// The agent's own roots narrow and never widen: with the client declaring only A, a read in
/// B is refused before the policy (no escalation is even asked), the session sandbox dir stays
/// usable, and once the client adds B (roots/list_changed) the read reaches the policy again
/// while the server's own roots stay as they were.
#[test]
fn the_agents_roots_narrow_calls_and_never_widen_a_server() {
    let f = fixture(json!({}));
    let r = drive(&f, "agent_roots", &[]);
    assert_eq!(r["read_a"]["text"], "alpha", "{r}");
    let t = r["read_b"]["text"].as_str().unwrap();
    assert!(t.starts_with("FORBIDDEN:"), "{t}");
    assert!(
        t.contains("outside the roots your MCP client declared"),
        "{t}"
    );
    assert_eq!(
        r["requests_after_b"],
        json!([]),
        "no escalation was asked: {r}"
    );
    assert_eq!(r["write_sandbox"]["is_error"], false, "{r}");
    let after = &r["read_b_after"];
    assert!(
        after["result"]["text"]
            .as_str()
            .unwrap()
            .starts_with("ESCALATION REQUIRED"),
        "after list_changed the policy decides again: {r}"
    );
    let s = |p: &Path| p.display().to_string();
    assert_eq!(names(&r["fs_dirs"]), [s(&f.sandbox), s(&f.a)], "{r}");
}
