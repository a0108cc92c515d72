//! Shared helpers: locating the real test dependencies, writing configs, running the driver.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Upper bound for one driver run; the driver's own steps are bounded too. Never a timing
/// assertion: only a guard against a hung test.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Where scripts/test.sh installed the real servers and the Python SDK.
pub fn deps() -> PathBuf {
    let dir = std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
    assert!(
        dir.join("venv/bin/python").exists() && dir.join("node_modules/@modelcontextprotocol").exists(),
        "test dependencies missing at {} (run scripts/install-test-deps.sh or set PALISADE_TEST_DEPS)",
        dir.display()
    );
    dir
}

pub fn python() -> PathBuf {
    deps().join("venv/bin/python")
}

pub fn node_server(pkg: &str) -> String {
    deps()
        .join("node_modules/@modelcontextprotocol")
        .join(pkg)
        .join("dist/index.js")
        .display()
        .to_string()
}

pub fn probe_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/probe_server.py")
        .display()
        .to_string()
}

pub fn palisade() -> &'static str {
    env!("CARGO_BIN_EXE_palisade")
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

/// A temporary workspace with a config file.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `{"mcpServers": servers, "palisade": settings + sandboxDir}` and returns its path.
    pub fn config(&self, servers: Value, mut settings: Value) -> PathBuf {
        settings["sandboxDir"] = Value::String(self.path().join("sandbox").display().to_string());
        if settings.get("sandboxPolicy").is_none() {
            // Warn mode: while the native launcher is a stub every server runs degraded.
            settings["sandboxPolicy"] = Value::String("warn".into());
        }
        if settings.get("policy").is_none() {
            // These tests exercise the gateway's mechanics (forwarding, crashes, timeouts,
            // sandbox errors); an explicit allow-everything policy keeps the engine from
            // deciding first. The engine's own behaviour is tested in tests/policy.rs and by
            // the tests here that set a policy.
            settings["policy"] = Value::String(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/allow-all-policy.json")
                    .display()
                    .to_string(),
            );
        }
        let path = self.path().join("config.json");
        let cfg = serde_json::json!({"mcpServers": servers, "palisade": settings});
        std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
        path
    }

    pub fn errlog(&self) -> PathBuf {
        self.path().join("palisade-stderr.log")
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.errlog()).unwrap_or_default()
    }
}

/// Runs `drive.py SCENARIO -- CMD...`; returns its JSON report.
pub fn drive(ws: &Workspace, scenario: &str, cmd: &[&str], env: &[(&str, &str)]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/drive.py");
    let mut c = Command::new(python());
    c.arg(&script)
        .arg(scenario)
        .arg("--")
        .args(cmd)
        .env("DRIVE_ERRLOG", ws.errlog())
        .env("RUST_LOG", "info,rmcp=warn")
        .env("NO_COLOR", "1")
        .current_dir(ws.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().expect("spawn the python driver");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.expect("driver output"),
        Err(_) => {
            // Kill exactly the driver we started, by its id.
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!(
                "driver {scenario} did not finish within {RUN_LIMIT:?}\nstderr log:\n{}",
                ws.stderr_text()
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver {scenario} failed: {}\n{}\npalisade stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        ws.stderr_text()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "driver {scenario} printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
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

pub fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The audit records the default `LogAudit` sink wrote to palisade's stderr.
pub fn audit_records(ws: &Workspace) -> Vec<Value> {
    ws.stderr_text()
        .lines()
        .filter_map(|l| l.split_once(" audit ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json.trim()).ok())
        .collect()
}
