//! The policy engine against IronCurtain's corpus and against small policies written to
//! exercise one rule of the semantics each.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::{Path, PathBuf};

use palisade::policy::scenarios;
use palisade::policy::{
    CallContext, Decision, Policy, PolicyOptions, PolicyPaths, Role, Scope, Status, ToolInfo,
};
use palisade::roots::derive::{derive_roots, Access, RootSource};
use serde_json::{json, Value};

fn corpus() -> PathBuf {
    std::env::var_os("PALISADE_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ironcurtain"),
        PathBuf::from,
    )
}

fn cfg(dir: &str) -> PathBuf {
    corpus().join("src/config").join(dir)
}

const HOME: &str = "/home/provos";
const SANDBOX: &str = "/home/provos/.ironcurtain/sandbox";

/// IronCurtain's verifier setting: HOME=/home/provos, sandbox ~/.ironcurtain/sandbox,
/// ~/.ironcurtain protected.
fn verifier_env() -> scenarios::Env {
    scenarios::Env {
        home: Some(HOME.into()),
        cwd: None,
        scope: Scope::new(
            Some(Path::new(SANDBOX)),
            &[PathBuf::from("/home/provos/.ironcurtain")],
            Some(Path::new(HOME)),
        )
        .unwrap(),
    }
}

fn corpus_policy(dir: &str) -> Policy {
    let lists = cfg(dir).join("dynamic-lists.json");
    Policy::load(
        &PolicyPaths {
            policy: Some(cfg(dir).join("compiled-policy.json")),
            annotations: Some(cfg("generated").join("tool-annotations.json")),
            lists: lists.exists().then_some(lists),
        },
        PolicyOptions {
            home: Some(HOME.into()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn eval(p: &Policy, env: &scenarios::Env, server: &str, tool: &str, args: Value) -> Decision {
    let args = args.as_object().unwrap().clone();
    p.evaluate(&CallContext {
        server,
        tool,
        arguments: &args,
        cwd: env.cwd.as_deref(),
        home: env.home.as_deref(),
        scope: &env.scope,
        roots: &[],
    })
}

#[test]
fn every_corpus_policy_loads() {
    let mut n = 0;
    for entry in walk(&corpus().join("src/config")) {
        if entry.file_name().unwrap() == "compiled-policy.json" {
            let dir = entry.parent().unwrap();
            let lists = dir.join("dynamic-lists.json");
            let p = Policy::load(
                &PolicyPaths {
                    policy: Some(entry.clone()),
                    annotations: Some(cfg("generated").join("tool-annotations.json")),
                    lists: lists.exists().then_some(lists),
                },
                PolicyOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
            assert!(!p.rules().is_empty());
            n += 1;
        }
    }
    // generated, generated-coding (+4 servers), generated-readonly, test/golden.
    assert!(n >= 7, "found only {n} policies");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The 683 scenarios against the decisions IronCurtain's own engine (c0aeff9d) produced
/// for them with the verifier's HOME and sandbox (tests/data, see docs/policy.md).
#[test]
fn corpus_scenarios_agree_with_ironcurtains_engine() {
    let reference = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ironcurtain-engine-decisions.jsonl"),
    )
    .unwrap();
    let reference: Vec<Value> = reference
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let env = verifier_env();
    let (mut total, mut agree, mut label_pass) = (0, 0, 0);
    let mut differences = Vec::new();
    for dir in ["generated", "generated-coding", "generated-readonly"] {
        let policy = corpus_policy(dir);
        let file = scenarios::load(&cfg(dir).join("test-scenarios.json")).unwrap();
        let outcomes = scenarios::run(&policy, &file, &env);
        let mut dir_pass = 0;
        for o in &outcomes {
            let r = reference
                .iter()
                .find(|r| r["dir"] == dir && r["index"] == o.index)
                .unwrap();
            total += 1;
            dir_pass += usize::from(o.pass);
            if r["decision"] == o.decision.as_str() {
                agree += 1;
            } else {
                differences.push((dir, o.index, o.rule.clone(), r["rule"].clone()));
            }
        }
        label_pass += dir_pass;
        eprintln!("{dir}: {dir_pass}/{} labels", outcomes.len());
    }
    eprintln!("engine agreement {agree}/{total}, labels {label_pass}/{total}");
    assert_eq!(total, 683);
    assert!(agree * 100 >= total * 97, "agreement {agree}/{total}");
    // Every difference is deliberate: arguments that do not fit the tool's schema are
    // refused before the engine (docs/policy.md lists them).
    for d in &differences {
        assert_eq!(
            d.2, "structural-invalid-arguments",
            "undocumented difference {d:?}"
        );
    }
}

fn check(d: &Decision, status: Status, rule: &str) {
    assert_eq!((d.status, d.rule.as_str()), (status, rule), "{d:?}");
}

/// Cases worked through by hand against the engine description and the default policy.
#[test]
fn hand_checked_corpus_cases() {
    let p = corpus_policy("generated");
    let e = verifier_env();
    let fs = "filesystem";
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_file",
            json!({"path": "~/Downloads/a.txt"}),
        ),
        Status::Allow,
        "allow-read-downloads",
    );
    // Traversal out of Downloads is judged where it lands.
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_file",
            json!({"path": "/home/provos/Downloads/../.ssh/id_rsa"}),
        ),
        Status::Escalate,
        "escalate-read-outside-permitted",
    );
    // Per-element discharge: one path by the sandbox, one by a rule: allowed, attributed
    // to the rule.
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_multiple_files",
            json!({"paths": [format!("{SANDBOX}/a"), "/home/provos/Downloads/b"]}),
        ),
        Status::Allow,
        "allow-read-downloads",
    );
    // One element outside: the catch-all escalate discharges it, escalate wins.
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_multiple_files",
            json!({"paths": ["/home/provos/Downloads/b", "/etc/passwd"]}),
        ),
        Status::Escalate,
        "escalate-read-outside-permitted",
    );
    // Roles evaluated separately: reading Documents is allowed, writing it is not.
    let d = eval(
        &p,
        &e,
        fs,
        "edit_file",
        json!({"path": "~/Documents/x.md", "edits": []}),
    );
    check(&d, Status::Escalate, "escalate-write-outside-permitted");
    assert_eq!(d.roles, vec![Role::WritePath]);
    // Conditional roles: dryRun makes it a read.
    check(
        &eval(
            &p,
            &e,
            fs,
            "edit_file",
            json!({"path": "~/Documents/x.md", "edits": [], "dryRun": true}),
        ),
        Status::Allow,
        "allow-read-documents",
    );
    // Protected: IronCurtain's home is denied, the sandbox inside it is not.
    check(
        &eval(
            &p,
            &e,
            fs,
            "write_file",
            json!({"path": "~/.ironcurtain/config.json", "content": ""}),
        ),
        Status::Deny,
        "structural-protected-path",
    );
    check(
        &eval(
            &p,
            &e,
            fs,
            "write_file",
            json!({"path": format!("{SANDBOX}/n.txt"), "content": ""}),
        ),
        Status::Allow,
        "structural-sandbox-allow",
    );
    // Domains through a dynamic list, and an IP literal.
    check(
        &eval(
            &p,
            &e,
            "fetch",
            "http_fetch",
            json!({"url": "https://www.nytimes.com/x"}),
        ),
        Status::Allow,
        "allow-fetch-news-sites",
    );
    check(
        &eval(
            &p,
            &e,
            "fetch",
            "http_fetch",
            json!({"url": "http://169.254.169.254/latest"}),
        ),
        Status::Escalate,
        "escalate-fetch-other-urls",
    );
    check(
        &eval(&p, &e, fs, "format_disk", json!({})),
        Status::Deny,
        "structural-unknown-tool",
    );
    // Encoded traversal and relative paths with no server cwd are refused.
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_file",
            json!({"path": "/home/provos/Downloads/%2e%2e/.ssh/id_rsa"}),
        ),
        Status::Deny,
        "structural-bad-path",
    );
    check(
        &eval(&p, &e, fs, "read_file", json!({"path": "notes.txt"})),
        Status::Deny,
        "structural-bad-path",
    );
    // A path role given a non-string is refused rather than ignored.
    check(
        &eval(
            &p,
            &e,
            fs,
            "read_multiple_files",
            json!({"paths": [{"p": "/etc/passwd"}]}),
        ),
        Status::Deny,
        "structural-invalid-arguments",
    );
}

/// A small policy written to a temp dir.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    policy: Policy,
}

fn fixture(rules: Value, annotations: Value, lists: Option<Value>) -> Fixture {
    fixture_with(rules, annotations, lists, PolicyOptions::default())
}

fn fixture_with(
    rules: Value,
    annotations: Value,
    lists: Option<Value>,
    options: PolicyOptions,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let text = serde_json::to_string(&json!({"rules": rules})).unwrap();
    let text = text.replace("$ROOT", root.to_str().unwrap());
    std::fs::write(root.join("p.json"), text).unwrap();
    std::fs::write(
        root.join("a.json"),
        serde_json::to_string(&json!({"servers": annotations})).unwrap(),
    )
    .unwrap();
    let lists_path = lists.map(|l| {
        std::fs::write(
            root.join("l.json"),
            serde_json::to_string(&json!({"lists": l})).unwrap(),
        )
        .unwrap();
        root.join("l.json")
    });
    let policy = Policy::load(
        &PolicyPaths {
            policy: Some(root.join("p.json")),
            annotations: Some(root.join("a.json")),
            lists: lists_path,
        },
        options,
    )
    .unwrap();
    Fixture {
        _dir: dir,
        root,
        policy,
    }
}

fn tool(name: &str, args: Value) -> Value {
    json!({"toolName": name, "args": args})
}

fn env_with(scope: Scope) -> scenarios::Env {
    scenarios::Env {
        home: Some("/home/u".into()),
        cwd: None,
        scope,
    }
}

#[test]
fn first_match_per_role_and_most_restrictive_across_roles() {
    let f = fixture(
        json!([
            {"name":"allow-read-a","if":{"paths":{"roles":["read-path"],"within":"$ROOT/a"}},"then":"allow","reason":"r"},
            {"name":"deny-read-a-secret","if":{"paths":{"roles":["read-path"],"within":"$ROOT/a/secret"}},"then":"deny","reason":"r"},
            {"name":"escalate-write","if":{"roles":["write-path"]},"then":"escalate","reason":"r"},
            {"name":"deny-delete","if":{"roles":["delete-path"]},"then":"deny","reason":"r"}
        ]),
        json!({"s": {"tools": [
            tool("read", json!({"p": ["read-path"]})),
            tool("copy", json!({"from": ["read-path"], "to": ["write-path"]})),
            tool("move", json!({"from": ["read-path", "delete-path"], "to": ["write-path"]})),
        ]}}),
        None,
    );
    let e = env_with(Scope::default());
    let r = f.root.to_str().unwrap();
    // First match wins: the earlier allow shadows the later, narrower deny.
    check(
        &eval(
            &f.policy,
            &e,
            "s",
            "read",
            json!({"p": format!("{r}/a/secret/k")}),
        ),
        Status::Allow,
        "allow-read-a",
    );
    // Nothing matches: default deny.
    check(
        &eval(&f.policy, &e, "s", "read", json!({"p": "/etc/passwd"})),
        Status::Deny,
        "default-deny",
    );
    // allow (read) + escalate (write) -> escalate.
    check(
        &eval(
            &f.policy,
            &e,
            "s",
            "copy",
            json!({"from": format!("{r}/a/x"), "to": "/tmp/y"}),
        ),
        Status::Escalate,
        "escalate-write",
    );
    // allow + escalate + deny -> deny.
    check(
        &eval(
            &f.policy,
            &e,
            "s",
            "move",
            json!({"from": format!("{r}/a/x"), "to": "/tmp/y"}),
        ),
        Status::Deny,
        "deny-delete",
    );
}

#[test]
fn symlinks_are_judged_by_their_target() {
    let f = fixture(
        json!([{"name":"allow-read-a","if":{"paths":{"roles":["read-path"],"within":"$ROOT/a"}},"then":"allow","reason":"r"}]),
        json!({"s": {"tools": [tool("read", json!({"p": ["read-path"]}))]}}),
        None,
    );
    std::fs::create_dir_all(f.root.join("a")).unwrap();
    std::fs::create_dir_all(f.root.join("outside")).unwrap();
    let e = env_with(Scope::default());
    let link = f.root.join("a/link");
    let target = format!("{}/a/link/secret", f.root.display());
    // Before the symlink exists the path is inside `a`: allowed.
    check(
        &eval(&f.policy, &e, "s", "read", json!({"p": target})),
        Status::Allow,
        "allow-read-a",
    );
    std::os::unix::fs::symlink(f.root.join("outside"), &link).unwrap();
    // The same string through the planted link lands outside: denied.
    check(
        &eval(&f.policy, &e, "s", "read", json!({"p": target})),
        Status::Deny,
        "default-deny",
    );
}

#[test]
fn relative_paths_resolve_against_the_servers_cwd() {
    let f = fixture(
        json!([{"name":"allow-read-a","if":{"paths":{"roles":["read-path"],"within":"$ROOT/a"}},"then":"allow","reason":"r"}]),
        json!({"s": {"tools": [tool("read", json!({"p": ["read-path"]}))]}}),
        None,
    );
    let mut e = env_with(Scope::default());
    e.cwd = Some(f.root.join("a"));
    check(
        &eval(&f.policy, &e, "s", "read", json!({"p": "notes.txt"})),
        Status::Allow,
        "allow-read-a",
    );
    check(
        &eval(&f.policy, &e, "s", "read", json!({"p": "../b/notes.txt"})),
        Status::Deny,
        "default-deny",
    );
}

#[test]
fn domains_lists_and_missing_lists() {
    let f = fixture(
        json!([
            {"name":"allow-any-name","if":{"tool":["get"],"domains":{"roles":["fetch-url"],"allowed":["*"]}},"then":"allow","reason":"r"},
            {"name":"allow-gh","if":{"tool":["clone"],"domains":{"roles":["git-remote-url"],"allowed":["*.github.com","gitlab.com/me/repo"]}},"then":"allow","reason":"r"},
            {"name":"allow-listed-owner","if":{"tool":["issue"],"lists":[{"roles":["github-owner"],"allowed":["@owners"],"matchType":"identifiers"}]},"then":"allow","reason":"r"},
            {"name":"allow-missing-list","if":{"tool":["mail"],"lists":[{"roles":["github-owner"],"allowed":["@nope"],"matchType":"identifiers"}]},"then":"allow","reason":"r"}
        ]),
        json!({"s": {"tools": [
            tool("get", json!({"url": ["fetch-url"]})),
            tool("clone", json!({"remote": ["git-remote-url"]})),
            tool("issue", json!({"owner": ["github-owner"]})),
            tool("mail", json!({"owner": ["github-owner"]})),
        ]}}),
        Some(
            json!({"owners": {"values": ["provos"], "manualAdditions": ["me"], "manualRemovals": ["provos"]}}),
        ),
    );
    assert!(f.policy.warnings().iter().any(|w| w.contains("@nope")));
    let e = env_with(Scope::default());
    let p = &f.policy;
    check(
        &eval(p, &e, "s", "get", json!({"url": "https://example.org/"})),
        Status::Allow,
        "allow-any-name",
    );
    for ip in ["http://10.0.0.1/", "http://[::1]/", "http://2130706433/"] {
        check(
            &eval(p, &e, "s", "get", json!({"url": ip})),
            Status::Deny,
            "default-deny",
        );
    }
    check(
        &eval(
            p,
            &e,
            "s",
            "clone",
            json!({"remote": "git@github.com:a/b.git"}),
        ),
        Status::Allow,
        "allow-gh",
    );
    check(
        &eval(
            p,
            &e,
            "s",
            "clone",
            json!({"remote": "https://gitlab.com/me/repo.git"}),
        ),
        Status::Allow,
        "allow-gh",
    );
    check(
        &eval(
            p,
            &e,
            "s",
            "clone",
            json!({"remote": "https://gitlab.com/you/repo"}),
        ),
        Status::Deny,
        "default-deny",
    );
    check(
        &eval(
            p,
            &e,
            "s",
            "clone",
            json!({"remote": "https://evilgithub.com/a/b"}),
        ),
        Status::Deny,
        "default-deny",
    );
    // manualAdditions in, manualRemovals out.
    check(
        &eval(p, &e, "s", "issue", json!({"owner": "me"})),
        Status::Allow,
        "allow-listed-owner",
    );
    check(
        &eval(p, &e, "s", "issue", json!({"owner": "provos"})),
        Status::Deny,
        "default-deny",
    );
    // A rule over a list that does not exist can never match.
    check(
        &eval(p, &e, "s", "mail", json!({"owner": "anyone"})),
        Status::Deny,
        "default-deny",
    );
}

#[test]
fn load_errors_name_file_rule_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let pf = dir.path().join("p.json");
    std::fs::write(&pf, r#"{"rules":[{"name":"r1","if":{"paths":{"roles":["read-path"],"witin":"/a"}},"then":"allow","reason":"x"}]}"#).unwrap();
    let e = Policy::load(
        &PolicyPaths {
            policy: Some(pf.clone()),
            ..Default::default()
        },
        PolicyOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("p.json") && e.contains("rules[0]") && e.contains("witin"),
        "{e}"
    );
    std::fs::write(
        &pf,
        r#"{"rules":[{"name":"r2","if":{"roles":["read-pth"]},"then":"allow","reason":"x"}]}"#,
    )
    .unwrap();
    let e = Policy::load(
        &PolicyPaths {
            policy: Some(pf.clone()),
            ..Default::default()
        },
        PolicyOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("read-pth"), "{e}");
    let af = dir.path().join("a.json");
    std::fs::write(
        &af,
        r#"{"servers":{"fs":{"tools":[{"toolName":"t","args":{"p":["reed-path"]}}]}}}"#,
    )
    .unwrap();
    let e = Policy::load(
        &PolicyPaths {
            annotations: Some(af),
            ..Default::default()
        },
        PolicyOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"fs\"") && e.contains("\"t\"") && e.contains("args.p"),
        "{e}"
    );
}

#[test]
fn builtin_default_policy() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (sandbox, proj) = (base.join("sandbox"), base.join("proj"));
    let mut p = Policy::builtin_default();
    let schema = json!({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"additionalProperties":false});
    let none = json!({"type":"object","properties":{}});
    p.register_tools(
        "fs",
        &[
            ToolInfo {
                name: "read_text_file",
                input_schema: &schema,
                read_only_hint: Some(true),
                destructive_hint: None,
            },
            ToolInfo {
                name: "write_file",
                input_schema: &schema,
                read_only_hint: Some(false),
                destructive_hint: Some(true),
            },
            ToolInfo {
                name: "list_allowed_directories",
                input_schema: &none,
                read_only_hint: Some(true),
                destructive_hint: None,
            },
            ToolInfo {
                name: "reset",
                input_schema: &none,
                read_only_hint: None,
                destructive_hint: Some(true),
            },
        ],
    );
    let scope = Scope::new(Some(&sandbox), &[base.join("palisade.json")], None).unwrap();
    let roots = vec![sandbox.clone(), proj.clone()];
    let ev = |tool: &str, args: Value| {
        let a = args.as_object().unwrap().clone();
        p.evaluate(&CallContext {
            server: "fs",
            tool,
            arguments: &a,
            cwd: None,
            home: None,
            scope: &scope,
            roots: &roots,
        })
    };
    let s = |x: &Path| x.to_str().unwrap().to_string();
    check(
        &ev("read_text_file", json!({"path": s(&proj.join("a"))})),
        Status::Allow,
        "default-read-in-roots",
    );
    check(
        &ev(
            "write_file",
            json!({"path": s(&sandbox.join("a")), "content": ""}),
        ),
        Status::Allow,
        "default-sandbox-dir",
    );
    check(
        &ev(
            "write_file",
            json!({"path": s(&proj.join("a")), "content": ""}),
        ),
        Status::Escalate,
        "default-write-in-roots",
    );
    check(
        &ev("read_text_file", json!({"path": "/etc/passwd"})),
        Status::Deny,
        "default-outside-roots",
    );
    check(
        &ev(
            "read_text_file",
            json!({"path": s(&base.join("palisade.json"))}),
        ),
        Status::Deny,
        "structural-protected-path",
    );
    check(
        &ev(
            "read_text_file",
            json!({"path": s(&proj.join("a")), "mode": "x"}),
        ),
        Status::Deny,
        "structural-invalid-arguments",
    );
    check(
        &ev("list_allowed_directories", json!({})),
        Status::Allow,
        "default-read-only-tool",
    );
    check(
        &ev("reset", json!({})),
        Status::Escalate,
        "default-unscoped-tool",
    );
    check(
        &ev("shell", json!({"cmd": "rm -rf /"})),
        Status::Deny,
        "structural-unknown-tool",
    );
}

#[test]
fn roots_derived_from_the_corpus_policy() {
    let p = corpus_policy("generated");
    let roots = derive_roots(
        &p,
        "filesystem",
        Some(Path::new(SANDBOX)),
        None,
        Some(Path::new(HOME)),
    )
    .unwrap();
    let got: Vec<(String, Access)> = roots
        .iter()
        .map(|r| (r.path.display().to_string(), r.access))
        .collect();
    assert_eq!(
        got,
        vec![
            (SANDBOX.to_string(), Access::Rw),
            ("/home/provos/Downloads".to_string(), Access::Rw),
            ("/home/provos/Documents".to_string(), Access::Ro),
        ]
    );
    assert_eq!(roots[0].source, RootSource::SandboxDir);
    // fetch has no path rules: only the sandbox dir, plus its config grants.
    let grants = palisade::config::FilesystemConfig {
        allow_write: vec!["~/cache".into()],
        allow_read: vec!["/usr/share/dict".into()],
        ..Default::default()
    };
    let roots = derive_roots(
        &p,
        "fetch",
        Some(Path::new(SANDBOX)),
        Some(&grants),
        Some(Path::new(HOME)),
    )
    .unwrap();
    let got: Vec<(String, Access)> = roots
        .iter()
        .map(|r| (r.path.display().to_string(), r.access))
        .collect();
    assert_eq!(
        got,
        vec![
            (SANDBOX.to_string(), Access::Rw),
            ("/home/provos/cache".to_string(), Access::Rw),
            ("/usr/share/dict".to_string(), Access::Ro),
        ]
    );
}

#[test]
fn protected_files_inside_a_wide_sandbox_stay_protected() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let policy_file = base.join("proj/.palisade/policy.json");
    // Sandbox dir chosen too wide: it contains the protected policy file.
    let scope = Scope::new(
        Some(&base.join("proj")),
        std::slice::from_ref(&policy_file),
        None,
    )
    .unwrap();
    assert!(scope.is_protected(&policy_file));
    assert!(!scope.is_protected(&base.join("proj/src/main.rs")));
    // Sandbox nested inside a protected dir: carved out, the rest of the dir stays protected.
    let scope = Scope::new(
        Some(&base.join("home/.pal/sandbox")),
        &[base.join("home/.pal")],
        None,
    )
    .unwrap();
    assert!(!scope.is_protected(&base.join("home/.pal/sandbox/x")));
    assert!(scope.is_protected(&base.join("home/.pal/config.json")));
    // Sandbox equal to a protected path: protection wins.
    let scope = Scope::new(Some(&base.join("p")), &[base.join("p")], None).unwrap();
    assert!(scope.is_protected(&base.join("p/x")));
}

fn palisade(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn cli_explain_and_test() {
    let c = |f: &str| cfg("generated").join(f).display().to_string();
    let (ok, out) = palisade(&[
        "policy",
        "explain",
        "--policy",
        &c("compiled-policy.json"),
        "--annotations",
        &c("tool-annotations.json"),
        "--home",
        HOME,
        "--sandbox-dir",
        SANDBOX,
        "--server",
        "filesystem",
        "--tool",
        "move_file",
        "--args",
        r#"{"source":"/home/provos/Documents/a","destination":"/home/provos/Downloads/a"}"#,
    ]);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    // read (Documents) allowed, write (Downloads) allowed, delete outside Downloads escalated.
    assert_eq!(v["decision"], "escalate");
    assert_eq!(v["rule"], "escalate-move-with-delete-outside-permitted");
    assert_eq!(v["roles"], json!(["delete-path"]));

    let (ok, out) = palisade(&[
        "policy",
        "test",
        "--policy",
        &c("compiled-policy.json"),
        "--annotations",
        &c("tool-annotations.json"),
        "--lists",
        &c("dynamic-lists.json"),
        "--home",
        HOME,
        "--sandbox-dir",
        SANDBOX,
        "--protected",
        "/home/provos/.ironcurtain",
        "--scenarios",
        &c("test-scenarios.json"),
    ]);
    // The corpus labels are imperfect, so the run fails; every scenario is still reported.
    assert!(!ok);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 322);
    assert_eq!(lines[0]["index"], 0);
    assert!(lines[0].get("expected").is_some() && lines[0].get("rule").is_some());
    assert_eq!(lines[321]["summary"]["total"], 321);
    assert_eq!(lines[321]["summary"]["passed"], 160);
}

/// IronCurtain ignores arguments its annotation does not list; a stale annotation would then
/// let a new path argument through unchecked. Palisade denies them.
#[test]
fn unannotated_arguments_are_denied() {
    let p = corpus_policy("generated");
    let e = verifier_env();
    let ok = eval(
        &p,
        &e,
        "filesystem",
        "read_file",
        json!({"path": "~/Downloads/a"}),
    );
    check(&ok, Status::Allow, "allow-read-downloads");
    let d = eval(
        &p,
        &e,
        "filesystem",
        "read_file",
        json!({"path": "~/Downloads/a", "also": "/etc/shadow"}),
    );
    check(&d, Status::Deny, "structural-unannotated-argument");
    assert!(d.reason.contains("\"also\""), "{}", d.reason);
}

/// The server's configured allowedDomains gate URL roles before the rules: a rule that
/// allows every push still escalates a push to a host outside the list.
#[test]
fn server_domain_allowlist_escalates_before_rules() {
    let rules = json!([{"name":"allow-push","if":{"tool":["push"]},"then":"allow","reason":"r"}]);
    let ann = json!({"git": {"tools": [tool("push", json!({"remote": ["git-remote-url"]}))]}});
    let open = fixture(rules.clone(), ann.clone(), None);
    let gated = fixture_with(
        rules,
        ann,
        None,
        PolicyOptions {
            server_domains: [("git".to_string(), vec!["*.github.com".to_string()])].into(),
            ..Default::default()
        },
    );
    let e = env_with(Scope::default());
    let evil = json!({"remote": "https://evil.example/x.git"});
    // Without the gate the rule allows it (so the check below is not vacuous).
    check(
        &eval(&open.policy, &e, "git", "push", evil.clone()),
        Status::Allow,
        "allow-push",
    );
    check(
        &eval(&gated.policy, &e, "git", "push", evil),
        Status::Escalate,
        "structural-domain-escalate",
    );
    check(
        &eval(
            &gated.policy,
            &e,
            "git",
            "push",
            json!({"remote": "git@github.com:me/r.git"}),
        ),
        Status::Allow,
        "allow-push",
    );
}

/// Issue 23, finding 1: with the built-in default, a read-only-sounding tool whose path
/// argument has an unlisted name or sits in a nested object was allowed with no path check
/// (`allow default-read-only-tool`). Every string that reads as a path, at any depth, is a
/// path now; the control is the same value under a listed name. Finding 2: a path through a
/// symlink inside the session sandbox dir (which every server can write) is refused.
#[test]
fn default_policy_checks_paths_in_unlisted_and_nested_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (sandbox, proj) = (base.join("sandbox"), base.join("proj"));
    std::fs::create_dir_all(&sandbox).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let mut p = Policy::builtin_default();
    let schema = json!({"type":"object","properties":{
        "file_name":{"type":"string"},"location":{"type":"string"},"src":{"type":"string"},
        "options":{"type":"object"},"path":{"type":"string"}}});
    p.register_tools(
        "srv",
        &[
            ToolInfo {
                name: "get_file",
                input_schema: &schema,
                read_only_hint: None,
                destructive_hint: None,
            },
            ToolInfo {
                name: "put_file",
                input_schema: &schema,
                read_only_hint: Some(false),
                destructive_hint: Some(false),
            },
        ],
    );
    let scope = Scope::new(Some(&sandbox), &[], None).unwrap();
    let roots = vec![sandbox.clone(), proj.clone()];
    let ev = |tool: &str, args: Value| {
        let a = args.as_object().unwrap().clone();
        p.evaluate(&CallContext {
            server: "srv",
            tool,
            arguments: &a,
            cwd: Some(&proj),
            home: None,
            scope: &scope,
            roots: &roots,
        })
    };
    // Control: the listed name was always checked.
    check(
        &ev("get_file", json!({"path": "/etc/passwd"})),
        Status::Deny,
        "default-outside-roots",
    );
    for args in [
        json!({"file_name": "/etc/passwd"}),
        json!({"location": "file:///etc/passwd"}),
        json!({"src": "../../../etc/passwd"}),
        json!({"options": {"path": "/etc/passwd"}}),
        json!({"options": {"deep": [{"x": "~/.ssh/id_rsa"}]}}),
    ] {
        let d = ev("get_file", args.clone());
        assert_eq!(d.status, Status::Deny, "{args}: {d:?}");
    }
    check(
        &ev("get_file", json!({"file_name": "/proc/self/environ"})),
        Status::Deny,
        "structural-bad-path",
    );
    // Inside the roots a read is still allowed, and a plain word is not a path.
    let inside = proj.join("a.txt").display().to_string();
    check(
        &ev(
            "get_file",
            json!({"options": {"path": inside}, "src": "hello"}),
        ),
        Status::Allow,
        "default-read-in-roots",
    );
    // A non-read-only tool writing through an unlisted name is a write in the roots.
    check(
        &ev("put_file", json!({"location": inside})),
        Status::Escalate,
        "default-write-in-roots",
    );
    // Finding 2: a link planted in the sandbox dir is not followed, even into a root.
    std::os::unix::fs::symlink(&proj, sandbox.join("link")).unwrap();
    let via = sandbox.join("link/Makefile").display().to_string();
    check(
        &ev("put_file", json!({"path": via})),
        Status::Deny,
        "structural-sandbox-symlink",
    );
    // Control: the same write straight into the sandbox dir is allowed.
    let direct = sandbox.join("Makefile").display().to_string();
    check(
        &ev("put_file", json!({"path": direct})),
        Status::Allow,
        "default-sandbox-dir",
    );
}
