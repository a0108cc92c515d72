//! Load errors that name the file, rule and field; the built-in default policy, including
//! paths in unlisted and nested arguments; protected files inside a sandbox directory chosen
//! too wide.

use std::path::Path;

use palisade::policy::{CallContext, Policy, PolicyOptions, PolicyPaths, Scope, Status, ToolInfo};
use serde_json::{json, Value};

use crate::*;

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
