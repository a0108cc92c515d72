//! Small policies written to exercise one rule of the semantics each: first match per role
//! and the most restrictive across roles, symlinks judged by their target, relative paths,
//! domains and lists, unannotated arguments, a server's domain allowlist.

use palisade::policy::{PolicyOptions, Scope, Status};
use serde_json::json;

use crate::*;

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
