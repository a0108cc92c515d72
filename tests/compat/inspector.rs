//! The MCP Inspector's CLI lists and calls tools through palisade.

use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::{deps, palisade, venv_bin};
use crate::*;

/// A second, independent client: the MCP Inspector CLI (pinned in tests/deps/package.json)
/// lists the tools of `palisade serve` and calls one (mcp-server-time in its sandbox).
#[test]
fn inspector_cli_lists_and_calls_tools_through_palisade() {
    if skipped_without_bwrap() {
        return;
    }
    let inspector = deps().join("node_modules/.bin/mcp-inspector");
    assert!(
        inspector.exists(),
        "{} missing: run scripts/install-test-deps.sh",
        inspector.display()
    );
    let ws = Ws::new();
    let cfg = ws.config("time", json!({"command": venv_bin("mcp-server-time")}));
    let inspect = |extra: &[&str]| -> Value {
        let out = Command::new(&inspector)
            .arg("--cli")
            .args(extra)
            .args([
                "--",
                palisade(),
                "--log-level",
                "warn",
                "serve",
                "--config",
                &cfg,
            ])
            // The Inspector keeps a catalog file; keep it in the workspace, not in HOME.
            .env(
                "MCP_CATALOG_PATH",
                ws.dir.path().join("inspector-catalog.json"),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "inspector {extra:?}: not JSON ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let listed = inspect(&["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["time__get_current_time", "time__convert_time"]);
    let called = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "time__convert_time",
        "--tool-arg",
        "source_timezone=America/New_York",
        "time=16:30",
        "target_timezone=Asia/Tokyo",
    ]);
    let text = called["content"][0]["text"].as_str().unwrap_or_default();
    assert_ne!(called["isError"], json!(true), "{called}");
    assert!(text.contains("\"timezone\": \"Asia/Tokyo\""), "{called}");
}
