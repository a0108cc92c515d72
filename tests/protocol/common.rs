//! What the protocol tests share: server-everything's config, the 2026-07-28 request
//! envelope, tests/servers/modern_server.py's config, and the Python SDK driver
//! (tests/clients/approve_eras.py) in front of `palisade serve`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, driver, palisade, report, serve_log_env, Workspace};

/// The 2026-07-28 request envelope, in `_meta`.
pub fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

pub fn with_envelope(mut params: Value) -> Value {
    params["_meta"] = envelope();
    params
}

/// The Python SDK's high-level `Client` (tests/clients/approve_eras.py) in `mode`, calling
/// `tool` through `palisade serve --config CONFIG`, approving what it is asked and answering
/// sampling; its report. The SDK's `Client` keeps the server's stderr, so the audit records
/// go to the file `audit`.
pub fn sdk_client(
    ws: &Workspace,
    mode: &str,
    tool: &str,
    args: &str,
    config: &std::path::Path,
    audit: &std::path::Path,
) -> Value {
    let mut cmd = driver("tests/clients/approve_eras.py");
    cmd.args([mode, tool, args, "--"])
        .arg(palisade())
        .args(["serve", "--config"])
        .arg(config)
        .arg("--audit-log")
        .arg(audit);
    serve_log_env(&mut cmd, &ws.errlog());
    report(&mut cmd, mode, &ws.errlog(), Some(Duration::from_secs(120)))
}

/// tests/servers/modern_server.py (Python SDK 2.3, both eras), with `extra` keys.
pub fn modern_server(extra: Value) -> Value {
    let mut v = json!({"command": support::python(),
                       "args": [support::repo("tests/servers/modern_server.py")]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}
