//! "Approve and remember" end to end, against the real thing: `palisade serve` in enforce mode
//! (native bwrap), the real `@modelcontextprotocol/server-filesystem`, the Python `mcp` SDK as
//! the agent's client (tests/clients/remember_drive.py), escalations answered through the
//! file-IPC approver as a person's tool would, and the hash-chained audit log on disk.
//!
//! The policy escalates every write outside the session sandbox dir and denies writes in
//! D/locked. One approval remembered for a write in D lets later writes in D by the same tool
//! through without a request; a sibling directory, another tool, a symlink or `..` out of D,
//! and a policy deny inside D are not covered; a new `serve` run remembers nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::{
    node_server, palisade, read_jsonl, report, run_ok, serve_driver, write_json, write_policy,
    Workspace,
};

struct Fixture {
    ws: Workspace,
    d: PathBuf,
    e: PathBuf,
    esc: PathBuf,
    audit: PathBuf,
    config: PathBuf,
}

fn fixture() -> Fixture {
    let ws = Workspace::new();
    let root = ws.canonical();
    let (d, e) = (root.join("D"), root.join("E"));
    let sandbox = root.join("sandbox");
    let esc = root.join("esc");
    for dir in [&d, &e, &sandbox, &esc, &d.join("sub")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    // A symlink planted in D that leads to its sibling E.
    std::os::unix::fs::symlink(&e, d.join("link")).unwrap();
    let policy = root.join("compiled-policy.json");
    write_policy(
        &policy,
        json!([
            {"name": "deny-locked", "description": "D/locked is off limits", "principle": "test",
             "if": {"roles": ["write-path"], "paths": {"roles": ["write-path"], "within": d.join("locked")}},
             "then": "deny", "reason": "D/locked is never written"},
            {"name": "escalate-writes", "description": "writes need a person", "principle": "test",
             "if": {"roles": ["write-path"]},
             "then": "escalate", "reason": "writing needs a person's approval"},
            {"name": "allow-the-rest", "description": "everything else", "principle": "test",
             "if": {}, "then": "allow", "reason": "reads are not what this test is about"}
        ]),
    );
    let audit = root.join("audit.jsonl");
    let config = root.join("config.json");
    write_json(
        &config,
        &json!({
            "mcpServers": {
                "fs": {"command": "node", "args": [node_server("server-filesystem"), "{roots}"], "sandbox": {}}
            },
            "palisade": {
                "sandboxDir": sandbox, "sandboxPolicy": "enforce", "policy": policy,
                "auditLog": audit,
                // Bounds a driver that misses an escalation; never a timing assertion.
                "escalationTimeout": 30,
            }
        }),
    );
    Fixture {
        ws,
        d,
        e,
        esc,
        audit,
        config,
    }
}

/// Runs one driver scenario against a fresh `palisade serve --escalation dir:ESC`.
fn drive(f: &Fixture, scenario: &str) -> Value {
    drive_with(f, scenario, &format!("dir:{}", f.esc.display()))
}

fn drive_with(f: &Fixture, scenario: &str, escalation: &str) -> Value {
    let mut c = serve_driver(
        "tests/clients/remember_drive.py",
        scenario,
        &f.config,
        &f.ws.errlog(),
    );
    c.arg("--escalation")
        .arg(escalation)
        .env("DRIVE_D", &f.d)
        .env("DRIVE_E", &f.e)
        .env("ESC_DIR", &f.esc)
        .env("PALISADE_BIN", palisade());
    report(&mut c, scenario, &f.ws.errlog(), None)
}

fn audit_records(f: &Fixture) -> Vec<Value> {
    assert!(f.audit.exists(), "no audit log at {}", f.audit.display());
    read_jsonl(&f.audit)
}

/// The audit record of the call whose `path` argument is `path`, for `tool`.
fn record<'a>(records: &'a [Value], tool: &str, path: &str) -> &'a Value {
    let hits: Vec<&Value> = records
        .iter()
        .filter(|r| r["toolName"] == tool && r["arguments"]["path"] == path)
        .collect();
    assert_eq!(hits.len(), 1, "one record for {tool} {path}: {records:?}");
    hits[0]
}

fn requests(step: &Value) -> &Vec<Value> {
    step["requests"].as_array().unwrap()
}

fn text(step: &Value) -> &str {
    step["result"]["text"].as_str().unwrap()
}

/// An escalation that was asked and denied: one request, an ESCALATION REQUIRED result.
fn asked_and_denied(step: &Value, what: &str) {
    assert_eq!(requests(step).len(), 1, "{what}: escalated again: {step}");
    assert_eq!(step["result"]["is_error"], true, "{what}: {step}");
    assert!(
        text(step).starts_with("ESCALATION REQUIRED"),
        "{what}: {step}"
    );
}

#[test]
fn an_approval_remembered_for_a_directory_covers_that_tool_there_and_nothing_else() {
    let f = fixture();
    let s = |p: &Path| p.display().to_string();
    let (d, e) = (&f.d, &f.e);
    let r = drive(&f, "session");

    // 1. The first write escalates; the request offers exactly D (rw) for fs/write_file.
    let first = &r["first"];
    assert_eq!(requests(first).len(), 1, "{first}");
    let scope = json!({"server": "fs", "tool": "write_file",
                       "dirs": [{"path": s(d), "access": "rw"}], "domains": []});
    assert_eq!(
        requests(first)[0]["request"]["rememberScope"],
        scope,
        "{first}"
    );
    assert_eq!(first["result"]["is_error"], false, "{first}");
    assert_eq!(std::fs::read_to_string(d.join("one.txt")).unwrap(), "one");

    // 2. Same tool in D, and below D: no request file, the write happens.
    for (k, file, content) in [
        ("second", d.join("two.txt"), "two"),
        ("below", d.join("sub/three.txt"), "three"),
    ] {
        assert_eq!(requests(&r[k]), &Vec::<Value>::new(), "{k}: {r}");
        assert_eq!(r[k]["result"]["is_error"], false, "{k}: {r}");
        assert_eq!(std::fs::read_to_string(file).unwrap(), content);
    }

    // 3./4. A sibling directory, and the same path with another tool: asked again.
    asked_and_denied(&r["sibling"], "sibling dir");
    asked_and_denied(&r["other_tool"], "edit_file on the same path");
    assert_eq!(
        requests(&r["sibling"])[0]["request"]["rememberScope"]["dirs"],
        json!([{"path": s(e), "access": "rw"}]),
        "the offer for E names E only: {r}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("one.txt")).unwrap(),
        "one",
        "edit_file was not let through"
    );

    // 5. A policy deny inside D is final: no request, nothing written.
    let denied = &r["denied_inside"];
    assert_eq!(requests(denied), &Vec::<Value>::new(), "{denied}");
    assert!(text(denied).starts_with("DENIED by policy"), "{denied}");
    assert!(!d.join("locked").exists());

    // 6. Out of D through a symlink planted in D, and through `..`: asked again (denied),
    // nothing reached E.
    asked_and_denied(&r["symlink"], "symlink D/link -> E");
    asked_and_denied(&r["dotdot"], "D/../E");
    // Control: unprotected, the planted symlink does lead into E.
    std::fs::write(d.join("link/control.txt"), "x").unwrap();
    assert!(e.join("control.txt").exists());
    std::fs::remove_file(e.join("control.txt")).unwrap();

    // 7. A plain approval is for one call: the next write in E is asked again.
    let plain = &r["plain"];
    assert_eq!(requests(plain).len(), 1, "{plain}");
    assert_eq!(plain["result"]["is_error"], false, "{plain}");
    asked_and_denied(&r["plain_again"], "after a plain approval");
    assert_eq!(r["e_files"], json!(["plain.txt"]), "{r}");
    assert!(
        std::fs::read_dir(&f.esc).unwrap().next().is_none(),
        "request files removed"
    );

    // The audit log shows all of it, and its chain is intact.
    let recs = audit_records(&f);
    let path = |p: PathBuf| s(&p);
    let rec = record(&recs, "write_file", &path(d.join("one.txt")));
    assert_eq!(rec["escalationResult"], "approved", "{rec}");
    assert_eq!(rec["escalationDecidedBy"], "dir", "{rec}");
    assert_eq!(rec["rememberedScope"], scope, "{rec}");
    assert!(rec.get("approvedByScope").is_none(), "{rec}");
    assert_eq!(
        rec["approvedRoots"],
        json!([{"path": s(d), "access": "rw"}]),
        "the approval widened the server to D: {rec}"
    );
    for p in [d.join("two.txt"), d.join("sub/three.txt")] {
        let rec = record(&recs, "write_file", &path(p));
        assert_eq!(rec["policyDecision"]["status"], "escalate", "{rec}");
        assert_eq!(rec["escalationResult"], "approved", "{rec}");
        assert_eq!(rec["escalationDecidedBy"], "remembered", "{rec}");
        assert_eq!(rec["approvedByScope"], scope, "{rec}");
        assert!(rec.get("rememberedScope").is_none(), "{rec}");
        assert_eq!(rec["result"]["status"], "success", "{rec}");
    }
    for (tool, p) in [
        ("write_file", e.join("x.txt")),
        ("edit_file", d.join("one.txt")),
        ("write_file", d.join("link/y.txt")),
        ("write_file", e.join("plain2.txt")),
    ] {
        let rec = record(&recs, tool, &path(p));
        assert_eq!(rec["escalationResult"], "denied", "{rec}");
        assert!(rec.get("approvedByScope").is_none(), "{rec}");
    }
    let rec = record(&recs, "write_file", &path(e.join("plain.txt")));
    assert_eq!(rec["escalationDecidedBy"], "dir", "{rec}");
    assert!(rec.get("rememberedScope").is_none(), "{rec}");
    let rec = record(&recs, "write_file", &path(d.join("locked/x.txt")));
    assert_eq!(rec["policyDecision"]["status"], "deny", "{rec}");
    assert!(rec.get("escalationResult").is_none(), "{rec}");
    run_ok(
        Command::new(palisade())
            .args(["audit", "verify"])
            .arg(&f.audit),
    );

    // Remembered approvals widen the same way as asked ones: D was added once, by the first
    // approval (the remembered writes in D needed nothing more), E once by the plain one.
    let log = f.ws.stderr_text();
    assert_eq!(
        log.matches("relaunching with wider roots").count(),
        2,
        "one relaunch for D, one for E:\n{log}"
    );

    // A new serve run remembers nothing: the same write in D is asked again. Answered with
    // `palisade approve --all --remember`, it is remembered for that run.
    let r2 = drive(&f, "fresh_session");
    let again = &r2["again"];
    assert_eq!(requests(again).len(), 1, "nothing persisted: {again}");
    assert!(
        requests(again)[0]["cli_output"]
            .as_str()
            .unwrap()
            .contains("approved and remembered for this session"),
        "{again}"
    );
    assert_eq!(again["result"]["is_error"], false, "{again}");
    assert_eq!(requests(&r2["after_cli"]), &Vec::<Value>::new(), "{r2}");
    assert_eq!(r2["after_cli"]["result"]["is_error"], false, "{r2}");
    let recs = audit_records(&f);
    let rec = record(&recs, "write_file", &path(d.join("after.txt")));
    assert_eq!(rec["escalationDecidedBy"], "remembered", "{rec}");
}

#[test]
fn an_elicitation_answer_can_remember_and_the_form_offers_it() {
    let f = fixture();
    let s = |p: &Path| p.display().to_string();
    let r = drive_with(&f, "elicit_session", "elicit");

    // The first write is asked through elicitation; the form offers `remember` and the
    // message says what it would allow. The client approves and remembers.
    let first = &r["first"];
    let asked = first["elicited"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{first}");
    assert_eq!(
        asked[0]["schema"]["properties"]["remember"]["type"], "boolean",
        "{first}"
    );
    let message = asked[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("in {} (read-write)", s(&f.d))),
        "{message}"
    );
    assert_eq!(first["result"]["is_error"], false, "{first}");

    // The second write in D is not asked; the sibling is (declined).
    assert_eq!(r["second"]["elicited"], json!([]), "{r}");
    assert_eq!(r["second"]["result"]["is_error"], false, "{r}");
    assert_eq!(r["sibling"]["elicited"].as_array().unwrap().len(), 1, "{r}");
    assert!(
        r["sibling"]["result"]["text"]
            .as_str()
            .unwrap()
            .starts_with("ESCALATION REQUIRED"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(f.d.join("e2.txt")).unwrap(),
        "second"
    );
    assert!(!f.e.join("e3.txt").exists());

    let recs = audit_records(&f);
    let rec = record(&recs, "write_file", &s(&f.d.join("e1.txt")));
    assert_eq!(rec["escalationDecidedBy"], "elicit", "{rec}");
    assert_eq!(rec["rememberedScope"]["dirs"][0]["path"], s(&f.d), "{rec}");
    let rec = record(&recs, "write_file", &s(&f.d.join("e2.txt")));
    assert_eq!(rec["escalationDecidedBy"], "remembered", "{rec}");
}

/// `palisade approve` answered by a person at the keyboard: `a` approves and remembers a
/// request that offers a scope; for one that offers none, `a` is not a choice and denies.
#[test]
fn palisade_approve_answers_a_only_for_an_offered_scope() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let offered = json!({"escalationId": "id-offered", "serverName": "fs", "toolName": "write_file",
        "arguments": {"path": "/w/d/f"}, "reason": "writes need a person", "context": {},
        "rememberScope": {"server": "fs", "tool": "write_file",
                          "dirs": [{"path": "/w/d", "access": "rw"}], "domains": []}});
    let plain = json!({"escalationId": "id-plain", "serverName": "fs", "toolName": "write_file",
        "arguments": {"path": "/w/d/g"}, "reason": "writes need a person", "context": {}});
    let respond = |request: &Value| -> (String, Value) {
        let id = request["escalationId"].as_str().unwrap();
        std::fs::write(
            dir.path().join(format!("request-{id}.json")),
            request.to_string(),
        )
        .unwrap();
        let mut child = Command::new(palisade())
            .args(["approve", "--dir"])
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"a\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let response = dir.path().join(format!("response-{id}.json"));
        let body = serde_json::from_slice(&std::fs::read(&response).unwrap()).unwrap();
        std::fs::remove_file(response).unwrap();
        std::fs::remove_file(dir.path().join(format!("request-{id}.json"))).unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), body)
    };
    let (shown, body) = respond(&offered);
    assert!(
        shown.contains("approve and remember: every later call of fs/write_file")
            && shown.contains("(y once, a remember) [y/N]"),
        "{shown}"
    );
    assert_eq!(body, json!({"decision": "approved", "remember": true}));
    let (shown, body) = respond(&plain);
    assert!(!shown.contains("remember"), "{shown}");
    assert_eq!(body, json!({"decision": "denied"}));
}

/// What the policy hands the matcher, on IronCurtain's real tool annotations: URL arguments
/// with their roles, and the arguments a scope cannot bound (a branch, a GitHub owner/repo),
/// which rule remembering out; only a call bounded by paths and URLs alone gets an offer.
#[test]
fn only_calls_bounded_by_paths_and_urls_alone_can_be_remembered() {
    use palisade::approval::RememberScope;
    use palisade::gateway::call::remembered::{subject, CallArgs};
    use palisade::policy::{Policy, PolicyOptions, PolicyPaths, Role};

    let corpus = std::env::var_os("PALISADE_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ironcurtain"),
        PathBuf::from,
    );
    let policy = Policy::load(
        &PolicyPaths {
            policy: None,
            annotations: Some(corpus.join("src/config/generated/tool-annotations.json")),
            lists: None,
        },
        PolicyOptions::default(),
    )
    .unwrap();
    let offer = |server: &str, tool: &str, v: Value| {
        let a = v.as_object().unwrap().clone();
        let paths = policy.path_arguments(server, tool, &a);
        let urls = policy.url_arguments(server, tool, &a);
        let unscoped = policy.unscoped_arguments(server, tool, &a);
        let described = (
            urls.clone(),
            unscoped
                .clone()
                .map(|u| u.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        );
        let subj = subject(
            server,
            tool,
            &CallArgs {
                paths: paths.as_deref(),
                urls: urls.as_deref(),
                unscoped: unscoped.as_deref(),
            },
            None,
            None,
        );
        let urls: Option<Vec<(String, Role)>> = described
            .0
            .map(|u| u.into_iter().map(|(v, r)| (v.to_string(), r)).collect());
        (
            urls,
            described.1,
            subj.as_ref().and_then(RememberScope::offer),
        )
    };

    let (urls, unscoped, scope) = offer(
        "fetch",
        "http_fetch",
        json!({"url": "https://docs.rs/serde", "max_length": 5000}),
    );
    assert_eq!(
        urls,
        Some(vec![("https://docs.rs/serde".into(), Role::FetchUrl)])
    );
    assert_eq!(unscoped, Some(vec![]));
    assert_eq!(scope.unwrap().domains, ["docs.rs"]);

    // git_push names a branch: the escalation may be about pushing to it, so no offer.
    let (urls, unscoped, scope) = offer(
        "git",
        "git_push",
        json!({"path": "/tmp", "remote": "https://github.com/o/r.git", "branch": "main"}),
    );
    assert_eq!(
        urls,
        Some(vec![(
            "https://github.com/o/r.git".into(),
            Role::GitRemoteUrl
        )])
    );
    assert_eq!(unscoped, Some(vec!["branch".to_string()]));
    assert_eq!(scope, None);

    // GitHub calls are about an owner and a repository, which no directory bounds.
    let (_, unscoped, scope) = offer(
        "github",
        "get_file_contents",
        json!({"owner": "o", "repo": "r", "path": "README.md"}),
    );
    assert_eq!(
        unscoped.map(|mut u| {
            u.sort();
            u
        }),
        Some(vec!["owner".to_string(), "repo".to_string()])
    );
    assert_eq!(scope, None);

    // A tool the policy does not know: nothing to resolve, nothing offered.
    let (urls, unscoped, scope) = offer("nowhere", "nothing", json!({}));
    assert_eq!((urls, unscoped, scope), (None, None, None));
}
