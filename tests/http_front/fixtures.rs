//! What the tests put behind the front: the two principals' tokens, the fs-server and faulty
//! server configs, the faulty server's slow call, and a look at the host's processes (to
//! prove servers are reaped).

use std::path::PathBuf;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::{self, palisade, Workspace};

pub const ALICE: &str = "alice-token-1f2e3d";
pub const BOB: &str = "bob-token-9a8b7c";

pub fn tokens_file(ws: &Workspace) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = ws.path().join("tokens");
    let line = |p: &str, t: &str| format!("{p} {}\n", hex::encode(Sha256::digest(t.as_bytes())));
    std::fs::write(
        &path,
        format!(
            "# test principals\n{}{}",
            line("alice", ALICE),
            line("bob", BOB)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

pub fn fs_config(ws: &Workspace) -> (PathBuf, PathBuf, PathBuf) {
    let sandbox = ws.canonical().join("sandbox");
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"]}}),
        json!({"auditLog": audit, "policy": null}),
    );
    (config, sandbox, audit)
}

/// A server config with the faulty test server (its `sleep` tool is a slow call that costs
/// nothing) under the allow-all policy; `tag` is an extra argument it ignores, so that its
/// processes can be found on the host.
pub fn faulty_config(ws: &Workspace, http: Value) -> (PathBuf, PathBuf, String) {
    let audit = ws.path().join("audit.jsonl");
    let tag = format!("faulty-tag-{}", ws.path().display());
    let config = ws.config(
        json!({"faulty": {
            "command": support::deps().join("venv/bin/python"),
            "args": [support::repo("tests/servers/faulty_server.py"), tag],
        }}),
        json!({"auditLog": audit, "http": http}),
    );
    (config, audit, tag)
}

/// The faulty server's config with `echo` escalated to the `elicit` approver (the rest
/// allowed); its audit log's path.
pub fn faulty_echo_escalated_to_elicit(ws: &Workspace) -> (PathBuf, PathBuf) {
    let policy = ws.path().join("compiled-policy.json");
    support::write_one_rule_policy(&policy, "faulty", "echo", "escalate", "echo needs a yes");
    let (config, audit, _) = faulty_config(ws, json!({}));
    support::merge_settings(
        &config,
        json!({"policy": policy, "escalation": "elicit", "escalationTimeout": 30}),
    );
    (config, audit)
}

/// How many `tools/call` the fast path served, by the gateway's log.
pub fn fast_calls(ws: &Workspace) -> usize {
    ws.stderr_text()
        .matches("tools/call served on the fast path")
        .count()
}

pub fn sleep_call(id: u64, after: f64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "faulty__sleep", "arguments": {"after": after}}})
}

/// Processes on the host whose command line carries `tag`.
pub fn processes_tagged(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(tag) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}
