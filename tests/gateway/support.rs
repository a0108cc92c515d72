//! Helpers of the gateway tests: the three real servers, the scenario driver
//! (tests/clients/drive.py) and the audit records in palisade's stderr; the helpers every test
//! crate shares (tests/support/mod.rs) are re-exported from here.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[path = "../support/mod.rs"]
mod shared;
pub use shared::*;

/// Upper bound for one driver run; the driver's own steps are bounded too. Never a timing
/// assertion: only a guard against a hung test.
const RUN_LIMIT: Duration = Duration::from_secs(180);

pub fn probe_server() -> String {
    repo("tests/servers/probe_server.py").display().to_string()
}

/// The three real servers: fs (server-filesystem), everything, probe. `sandbox`, when given,
/// is the `sandbox` block of fs and probe.
pub fn three_servers(ws: &Workspace, sandbox: Option<Value>) -> Value {
    // server-filesystem exits when its command-line directory is missing or outside its
    // sandbox: give it the session sandbox dir (every server's first grant and root).
    let cli_dir = ws.path().join("sandbox");
    std::fs::create_dir_all(&cli_dir).unwrap();
    let mut v = serde_json::json!({
        "fs": {"command": "node", "args": [node_server("server-filesystem"), cli_dir.display().to_string()]},
        "everything": {"command": "node", "args": [node_server("server-everything"), "stdio"]},
        "probe": {"command": python().display().to_string(), "args": [probe_server()]}
    });
    if let Some(sb) = sandbox {
        v["fs"]["sandbox"] = sb.clone();
        v["probe"]["sandbox"] = sb;
    }
    v
}

/// Runs `drive.py SCENARIO -- CMD...`; returns its JSON report.
pub fn drive(ws: &Workspace, scenario: &str, cmd: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = driver("tests/clients/drive.py");
    c.arg(scenario).arg("--").args(cmd).current_dir(ws.path());
    serve_log_env(&mut c, &ws.errlog()).envs(env.iter().copied());
    report(&mut c, scenario, &ws.errlog(), Some(RUN_LIMIT))
}

/// `palisade serve --config CONFIG` as a command line for the driver.
pub fn serve_cmd(config: &Path) -> Vec<String> {
    vec![
        palisade().to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
