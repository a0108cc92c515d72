//! The engine against IronCurtain's corpus: every policy loads, the scenarios agree with
//! IronCurtain's own engine where it is a reliable oracle, hand-checked cases, and the roots
//! derived from a corpus policy.

use std::path::{Path, PathBuf};

use palisade::policy::scenarios;
use palisade::policy::{Policy, PolicyOptions, PolicyPaths, Role, Status};
use palisade::roots::derive::{derive_roots, Access, RootSource};
use serde_json::{json, Value};

use crate::*;

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
