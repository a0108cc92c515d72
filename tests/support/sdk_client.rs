//! The driver of the end-to-end tests that go through a real client: writes a `palisade
//! serve` config, runs one of tests/clients/*.py (the Python `mcp` SDK) against it, and reads
//! back what the client saw, the audit log and palisade's stderr. calls.py bounds
//! every step itself (initialize 90 s, each call 60 s), so there is no outer timer.
//!
//! Blocking: an async test runs it on `tokio::task::spawn_blocking`, so that origins the
//! test serves on its own runtime keep answering.

use std::path::Path;

use serde_json::{json, Value};

/// The client's view of a run.
pub struct Outcome {
    /// The tool names the client listed.
    #[allow(dead_code)] // read by the egress tests, not by every binary that includes this
    pub tools: Vec<String>,
    /// One `{tool, error, text}` per call, in order.
    pub calls: Vec<Value>,
    /// The records of the audit log the settings named (empty when it has none).
    pub audit: Vec<Value>,
    /// palisade's stderr.
    pub stderr: String,
}

/// Writes `config` to `dir/config.json` and runs the client `script` (a path under tests/,
/// with `args` before its `--`) against `palisade serve --config` on it, with the venv's
/// `python`; `env` (names and values) is added to palisade's environment. Returns the
/// client's JSON report and palisade's stderr; panics, with both, when the client fails.
pub fn client(
    python: &Path,
    script: &str,
    args: &[String],
    dir: &Path,
    config: &Value,
    env: &[(String, String)],
) -> (Value, String) {
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, serde_json::to_vec_pretty(config).unwrap()).unwrap();
    let errlog = dir.join("stderr.log");
    let out = std::process::Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .args(args)
        .arg("--")
        .args([env!("CARGO_BIN_EXE_palisade"), "serve", "--config"])
        .arg(&cfg)
        .env("CALLS_ERRLOG", &errlog)
        .env("RUST_LOG", "info,rmcp=warn")
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stderr = std::fs::read_to_string(&errlog).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\n{stdout}\n{}\npalisade:\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_str(stdout.trim()).unwrap(), stderr)
}

/// Runs `calls` (a JSON array of `{tool, args}`) through tests/clients/calls.py against
/// `{"mcpServers": servers, "palisade": settings}`, and reads the audit log the settings name.
pub fn run(
    python: &Path,
    dir: &Path,
    servers: &Value,
    settings: &Value,
    calls: &Value,
    env: &[(String, String)],
) -> Outcome {
    let config = json!({"mcpServers": servers, "palisade": settings});
    let args = [calls.to_string()];
    let (v, stderr) = client(python, "tests/clients/calls.py", &args, dir, &config, env);
    let audit = settings["auditLog"]
        .as_str()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Outcome {
        tools: v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect(),
        calls: v["calls"].as_array().unwrap().clone(),
        audit,
        stderr,
    }
}
