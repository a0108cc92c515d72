//! The hostile AGENT (issue 23, findings 1, 2, 8 and 12): paths the agent names to the hostile
//! server's tools, prompt and resource template, refused by the gateway behind `palisade
//! serve` and reached by the control; the positive controls inside the roots still work.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use palisade::client::{McpClient, SpawnOptions, StderrMode};
use serde_json::{json, Value};

use crate::scene::*;
use crate::table::write_marked_table;

/// The hostile AGENT (issue 23, findings 1, 2, 8 and 12): `hostile_server.py`'s agent-side
/// tools, prompt and resource template open whatever they are given, and the agent names
/// files the gateway must not let them reach, through argument names no list knows, nested
/// objects, `/proc/self`, a Unicode spelling of a link planted in the shared sandbox dir, a
/// prompt argument and a resource URI of the server's own scheme. Control: the same server
/// launched directly under a client declaring the same roots, where every attack works.
/// Behind serve the rows run from a client that declares no roots, except the row about the
/// agent's own roots, which runs from a second session whose client declares `work/`.
/// Behind `palisade serve` (enforce, bwrap, built-in default policy) each must be refused by
/// the gateway; the positive controls (the same tools inside the roots) must still work.
const AGENT_ATTACKS: &[(&str, &str)] = &[
    ("unlisted_name", "read `/etc/passwd` (outside every root, visible in the sandbox's curated `/etc`) through `get_file(file_name)`, an argument name no list knows, in a tool read-only by its name (finding 1)"),
    ("file_uri_unlisted", "the same as a `file:` URI through `read_config(location)` (finding 1)"),
    ("unlisted_src", "the same through `cat(src)`, marked read-only (finding 1)"),
    ("nested_object", "the same through a nested object, `get_info({\"options\": {\"path\": ...}})` (finding 1)"),
    ("own_environ", "read the server's own environment (an API token from its config) at `/proc/self/environ` through `get_file(file_name)` (findings 1, 8)"),
    ("agent_roots_unlisted", "read a file inside the server's read-only root but outside the roots the agent's client declared, through `get_file(file_name)` (finding 1)"),
    ("proc_self_cwd_write", "write `/proc/self/cwd/pwned-cwd`: palisade's cwd is the sandbox dir, the server's a root whose writes need approval (checked on the host) (finding 8)"),
    ("unicode_planted_link", "plant NFC `sandbox/café` -> a writable root, then write `sandbox/cafe\\u0301/Makefile` (NFD) through a server that normalises names (checked on the host) (finding 2)"),
    ("prompt_argument", "read `/etc/passwd` through a prompt's path argument, `prompts/get show_file` (finding 12)"),
    ("custom_scheme_resource", "read `/etc/passwd` through `resources/read` of the server's own scheme, `hostile://file//etc/passwd` (finding 12)"),
];

/// The first JSON report `{"ok", "detail"}` in a tool, prompt or resource result.
fn report_in(v: &Value) -> Option<(bool, String)> {
    match v {
        Value::String(s) => serde_json::from_str::<Value>(s).ok().and_then(|r| {
            r.get("ok").map(|ok| {
                (
                    ok.as_bool().unwrap_or(false),
                    r["detail"].as_str().unwrap_or("").to_string(),
                )
            })
        }),
        Value::Array(items) => items.iter().find_map(report_in),
        Value::Object(m) => m.values().find_map(report_in),
        _ => None,
    }
}

fn reported<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> (bool, String) {
    match r {
        Err(e) => (false, format!("call refused: {e}")),
        Ok(v) => {
            let v = serde_json::to_value(&v).unwrap_or_default();
            if v["isError"] == true {
                return (false, format!("call refused: {}", report_text(&v)));
            }
            report_in(&v).unwrap_or_else(|| (false, format!("unexpected answer: {v}")))
        }
    }
}

fn report_text(v: &Value) -> String {
    v["content"]
        .as_array()
        .and_then(|c| c.iter().find_map(|b| b["text"].as_str()))
        .unwrap_or_default()
        .to_string()
}

/// A client for the agent attacks: `cmd` started in `cwd`, with the API token in the
/// environment and the client declaring `roots`.
async fn agent_client(
    sc: &Scene,
    cmd: Vec<String>,
    log: &Path,
    cwd: &Path,
    token: &str,
    roots: Option<Vec<String>>,
) -> McpClient {
    let mut opts = SpawnOptions::new("/bin/sh").args(
        [
            "-c".to_string(),
            "cd \"$PALISADE_CWD\" && exec \"$@\"".into(),
            "sh".into(),
        ]
        .into_iter()
        .chain(cmd),
    );
    opts.env = vec![
        ("PALISADE_CWD".into(), cwd.into()),
        ("HOSTILE_API_TOKEN".into(), token.into()),
        ("HOME".into(), sc.p("home").into()),
        ("PALISADE_LOG_LEVEL".into(), "warn".into()),
    ];
    opts.roots = roots;
    opts.stderr = StderrMode::File(log.to_path_buf());
    opts.timeout = Duration::from_secs(60);
    McpClient::spawn(opts).await.expect("start the MCP client")
}

/// Runs every agent attack; `prefix` is `hostile__` behind the gateway, empty directly.
async fn run_agent_attacks(
    sc: &Scene,
    c: &McpClient,
    prefix: &str,
    scheme: &str,
) -> BTreeMap<String, (bool, String)> {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    // Outside every root, yet bound into every sandbox (the curated /etc): only the
    // gateway's checks stand between the agent and it.
    let secret = "/etc/passwd".to_string();
    let tool = |name: &str| format!("{prefix}{name}");
    let mut out = BTreeMap::new();
    let calls: Vec<(&str, String, Value)> = vec![
        (
            "unlisted_name",
            tool("get_file"),
            json!({"file_name": secret}),
        ),
        (
            "file_uri_unlisted",
            tool("read_config"),
            json!({"location": format!("file://{secret}")}),
        ),
        ("unlisted_src", tool("cat"), json!({"src": secret})),
        (
            "nested_object",
            tool("get_info"),
            json!({"options": {"path": secret}}),
        ),
        (
            "own_environ",
            tool("get_file"),
            json!({"file_name": "/proc/self/environ"}),
        ),
        (
            "agent_roots_unlisted",
            tool("get_file"),
            json!({"file_name": sc.p("ro/notes.txt")}),
        ),
        (
            "proc_self_cwd_write",
            tool("write_path"),
            json!({"path": "/proc/self/cwd/pwned-cwd", "content": PLANTED}),
        ),
    ];
    for (row, name, args) in calls {
        out.insert(row.to_string(), call(c, &name, args).await);
    }
    let planted = call(c, &tool("plant_unicode_link"), json!({})).await;
    let nfd = format!("{}/cafe\u{301}/Makefile", sc.p("sandbox").display());
    let wrote = call(
        c,
        &tool("write_path"),
        json!({"path": nfd, "content": PLANTED}),
    )
    .await;
    out.insert(
        "unicode_planted_link".into(),
        (wrote.0, format!("plant: {}; write: {}", planted.1, wrote.1)),
    );
    let mut pargs = serde_json::Map::new();
    pargs.insert("path".into(), json!(secret));
    let prompt = c
        .peer()
        .get_prompt(GetPromptRequestParams::new(tool("show_file")).with_arguments(pargs))
        .await;
    out.insert("prompt_argument".into(), reported(prompt));
    let uri = format!("{scheme}://file/{secret}");
    let res = c
        .peer()
        .read_resource(ReadResourceRequestParams::new(uri))
        .await;
    out.insert("custom_scheme_resource".into(), reported(res));
    // Decided on the host, not by the report.
    for (row, file) in [
        ("proc_self_cwd_write", "work/pwned-cwd"),
        ("unicode_planted_link", "work/Makefile"),
    ] {
        let changed = sc.p(file).exists();
        let e = out.get_mut(row).unwrap();
        e.1 = format!(
            "{} (host: {})",
            e.1,
            if changed { "changed" } else { "unchanged" }
        );
        e.0 = changed;
    }
    out
}

/// The positive controls behind serve: the same tools inside the roots still work.
async fn agent_positive_controls(sc: &Scene, gw: &McpClient) {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    let inside = sc.p("work/ok.txt").display().to_string();
    for (name, args) in [
        ("hostile__get_file", json!({"file_name": inside})),
        ("hostile__get_info", json!({"options": {"path": inside}})),
    ] {
        let (ok, detail) = call(gw, name, args).await;
        assert!(ok, "{name} inside the roots must work: {detail}");
    }
    let plain = sc.p("sandbox/plain.txt").display().to_string();
    let (ok, detail) = call(
        gw,
        "hostile__write_path",
        json!({"path": plain, "content": "x"}),
    )
    .await;
    assert!(ok, "a write in the sandbox dir must work: {detail}");
    let mut pargs = serde_json::Map::new();
    pargs.insert("path".into(), json!(inside));
    let (ok, detail) = reported(
        gw.peer()
            .get_prompt(GetPromptRequestParams::new("hostile__show_file").with_arguments(pargs))
            .await,
    );
    assert!(ok, "a prompt reading inside the roots must work: {detail}");
    let (ok, detail) = reported(
        gw.peer()
            .read_resource(ReadResourceRequestParams::new(format!(
                "hostile://file/{inside}"
            )))
            .await,
    );
    assert!(ok, "a resource inside the roots must work: {detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_attack_through_serve_fails_and_succeeds_without_palisade() {
    let sc = scene().await;
    let log = sc.p("agent-stderr.log");
    let marker = sc.cfg["marker_reversed"]
        .as_str()
        .unwrap()
        .chars()
        .rev()
        .collect::<String>();
    std::fs::write(sc.p("ro/notes.txt"), &marker).unwrap();
    std::fs::write(sc.p("work/ok.txt"), &marker).unwrap();
    let token = format!("api-token-{}", std::process::id());
    let mut cfg = sc.cfg.clone();
    cfg["api_token"] = json!(token);
    cfg["unicode_link"] = json!(sc.p("sandbox/caf\u{e9}"));
    cfg["unicode_link_target"] = json!(sc.p("work"));
    let script = attacks_dir()
        .join("hostile_server.py")
        .display()
        .to_string();
    let agent_roots = vec![format!("file://{}", sc.p("work").display())];
    let reset = || {
        for f in [
            "work/pwned-cwd",
            "work/Makefile",
            "sandbox/caf\u{e9}",
            "sandbox/plain.txt",
        ] {
            let _ = std::fs::remove_file(sc.p(f));
        }
    };

    // Control: the server launched directly, its cwd the writable root.
    reset();
    let direct = agent_client(
        &sc,
        vec![
            venv_python().display().to_string(),
            script.clone(),
            cfg.to_string(),
            "hostile".into(),
        ],
        &log,
        &sc.p("work"),
        &token,
        Some(agent_roots.clone()),
    )
    .await;
    let plain = run_agent_attacks(&sc, &direct, "", "hostile").await;
    direct.shutdown().await;

    // Behind palisade: enforce, bwrap, the built-in default policy; palisade started in the
    // sandbox dir, the server's cwd the writable root.
    reset();
    let server = json!({
        "command": venv_python(),
        "args": [script, cfg.to_string(), "hostile"],
        "cwd": sc.p("work"),
        "env": {"HOSTILE_API_TOKEN": token},
        "sandbox": {"filesystem": {"allowWrite": [sc.p("work")], "allowRead": [attacks_dir(), sc.p("ro")]}}
    });
    let config = json!({
        "mcpServers": {"hostile": server},
        "palisade": {
            "sandboxDir": sc.p("sandbox"),
            "sandboxPolicy": "enforce",
            "backend": "bwrap",
            "auditLog": sc.audit_log(),
        }
    });
    let path = sc.p("palisade/agent-config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let serve = vec![
        env!("CARGO_BIN_EXE_palisade").to_string(),
        "serve".into(),
        "--config".into(),
        path.display().to_string(),
    ];
    // First a client that declares no roots (only the server's roots and the policy stand in
    // the way), then one that declares them, for the row about the agent's own roots.
    let gw = agent_client(&sc, serve.clone(), &log, &sc.p("sandbox"), &token, None).await;
    let mut boxed = run_agent_attacks(&sc, &gw, "hostile__", "hostile").await;
    agent_positive_controls(&sc, &gw).await;
    gw.shutdown().await;
    reset();
    let gw = agent_client(
        &sc,
        serve,
        &log,
        &sc.p("sandbox"),
        &token,
        Some(agent_roots),
    )
    .await;
    let row = call(
        &gw,
        "hostile__get_file",
        json!({"file_name": sc.p("ro/notes.txt")}),
    )
    .await;
    boxed.insert("agent_roots_unlisted".into(), row);
    agent_positive_controls(&sc, &gw).await;
    gw.shutdown().await;
    reset();

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut succeeded = 0;
    for (name, what) in AGENT_ATTACKS {
        let (c_ok, c_detail) = plain[*name].clone();
        let (s_ok, s_detail) = boxed[*name].clone();
        if !c_ok {
            failures.push(format!("control for {name} failed: {c_detail}"));
        }
        let by_palisade = ["DENIED", "FORBIDDEN", "BAD_PATH", "ESCALATION REQUIRED"]
            .iter()
            .any(|w| s_detail.contains(w));
        if s_ok {
            succeeded += 1;
            failures.push(format!("ESCAPE through serve {name}: {s_detail}"));
        } else if !by_palisade {
            failures.push(format!("{name} was not refused by palisade: {s_detail}"));
        }
        let control_cell = if c_ok {
            "succeeds".to_string()
        } else {
            format!("fails ({c_detail})")
        };
        let sandbox_cell = if s_ok {
            format!("**SUCCEEDS** ({s_detail})")
        } else {
            format!("blocked: {s_detail}")
        };
        rows.push(format!("| {what} | {control_cell} | {sandbox_cell} |"));
    }
    let table = format!(
        "| attack (hostile agent) | server launched directly (control) | behind `palisade serve` (enforce, bwrap, default policy) |\n|---|---|---|\n{}\n\n{} attacks; control succeeded for {}; {succeeded} succeeded behind palisade.\n",
        rows.join("\n"),
        AGENT_ATTACKS.len(),
        AGENT_ATTACKS.iter().filter(|(n, _)| plain[*n].0).count(),
    )
    .replace(&sc.dir.path().display().to_string(), "$SCENE")
    .replace(&attacks_dir().display().to_string(), "$REPO/tests/attacks")
    .replace(&token, "TOKEN");
    println!("{table}");
    write_marked_table(&table, "agent-attack-table", "agent-attack-table.md");
    assert!(
        failures.is_empty(),
        "{}\n\n{table}\npalisade stderr:\n{}",
        failures.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(succeeded, 0);
}
