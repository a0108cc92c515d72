//! The built-in fs-server against real MCP clients: palisade's rmcp client in-process over
//! `tokio::io::duplex`, and the official Python SDK driving `palisade fs-server` as a
//! subprocess. Every refusal is paired with proof that the same access works without the
//! server in the way, so no check passes vacuously.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade::client::{result_text, McpClient};
use palisade::fsserver::{FsServer, FsServerOptions};
use palisade::roots::uri::path_to_uri;
use palisade::sandbox::Access;
use rmcp::ServiceExt;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

struct Fixture {
    _tmp: tempfile::TempDir,
    rw: PathBuf,
    ro: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let rw = base.join("rw");
    let ro = base.join("ro");
    let outside = base.join("outside");
    for d in [&rw, &ro, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(rw.join("hello.txt"), "hello world").unwrap();
    std::fs::create_dir(rw.join("sub")).unwrap();
    std::fs::write(rw.join("sub/deep.rs"), "fn main() {}").unwrap();
    std::fs::write(ro.join("ro.txt"), "read only").unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    symlink(&outside, rw.join("escape")).unwrap();
    Fixture {
        _tmp: tmp,
        rw,
        ro,
        outside,
    }
}

async fn connect(roots: Vec<(PathBuf, Access)>, client_roots: Option<Vec<String>>) -> McpClient {
    let server = FsServer::new(FsServerOptions {
        roots,
        ..Default::default()
    })
    .unwrap();
    let (s, c) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(s).await {
            let _ = running.waiting().await;
        }
    });
    McpClient::connect(c, T, client_roots).await.unwrap()
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The structured error code of a tool result (None when it succeeded).
fn code(r: &rmcp::model::CallToolResult) -> Option<String> {
    if r.is_error != Some(true) {
        return None;
    }
    let v: Value = serde_json::from_str(&result_text(r)).unwrap();
    Some(v["error"].as_str().unwrap().to_string())
}

async fn call(c: &McpClient, tool: &str, args: Value) -> rmcp::model::CallToolResult {
    c.call_tool(tool, args).await.unwrap()
}

#[tokio::test]
async fn tools_have_path_properties_and_hints() {
    let f = fixture();
    let c = connect(vec![(f.rw.clone(), Access::Rw)], None).await;
    let tools = c.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        vec!["read", "list", "write", "stat", "search", "list_roots"]
    );
    for t in &tools {
        let a = t.annotations.as_ref().unwrap();
        if t.name == "write" {
            assert_eq!(a.destructive_hint, Some(true));
            assert_eq!(a.read_only_hint, Some(false));
        } else {
            assert_eq!(a.read_only_hint, Some(true), "{}", t.name);
        }
        if t.name != "list_roots" {
            assert_eq!(t.input_schema["required"][0], "path", "{}", t.name);
        }
    }
    c.shutdown().await;
}

#[tokio::test]
async fn reads_inside_and_refuses_escapes() {
    let f = fixture();
    let c = connect(
        vec![(f.rw.clone(), Access::Rw), (f.ro.clone(), Access::Ro)],
        None,
    )
    .await;
    let r = call(&c, "read", json!({"path": s(&f.rw.join("hello.txt"))})).await;
    assert_eq!(code(&r), None);
    assert_eq!(result_text(&r), "hello world");

    // The escapes work when nothing is in the way...
    let via_link = f.rw.join("escape/secret.txt");
    assert_eq!(std::fs::read_to_string(&via_link).unwrap(), "top secret");
    let via_dotdot = format!("{}/../outside/secret.txt", f.rw.display());
    assert_eq!(std::fs::read_to_string(&via_dotdot).unwrap(), "top secret");
    // ...and the server refuses every one of them.
    for p in [
        s(&f.outside.join("secret.txt")),
        s(&via_link),
        via_dotdot,
        path_to_uri(&via_link).unwrap(),
        format!("{}/escape", f.rw.display()),
    ] {
        let r = call(&c, "read", json!({ "path": p })).await;
        assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"), "{p}");
        assert!(!result_text(&r).contains("top secret"));
    }
    let r = call(&c, "list", json!({"path": s(&f.rw.join("escape"))})).await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    let r = call(&c, "read", json!({"path": "relative.txt"})).await;
    assert_eq!(code(&r).as_deref(), Some("BAD_PATH"));
    let r = call(&c, "read", json!({"path": "file://elsewhere/etc/passwd"})).await;
    assert_eq!(code(&r).as_deref(), Some("BAD_PATH"));
    c.shutdown().await;
}

#[tokio::test]
async fn writes_need_a_rw_root_and_never_follow_links() {
    let f = fixture();
    let c = connect(
        vec![(f.rw.clone(), Access::Rw), (f.ro.clone(), Access::Ro)],
        None,
    )
    .await;
    let target = f.rw.join("new.txt");
    let r = call(&c, "write", json!({"path": s(&target), "content": "fresh"})).await;
    assert_eq!(code(&r), None, "{}", result_text(&r));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "fresh");

    let r = call(
        &c,
        "write",
        json!({"path": s(&f.ro.join("ro.txt")), "content": "x"}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    assert_eq!(
        std::fs::read_to_string(f.ro.join("ro.txt")).unwrap(),
        "read only"
    );

    let r = call(
        &c,
        "write",
        json!({"path": s(&f.rw.join("escape/secret.txt")), "content": "pwned"}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );

    let r = call(
        &c,
        "write",
        json!({"path": s(&f.rw.join("missing/x.txt")), "content": "x"}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("NOT_FOUND"));
    c.shutdown().await;
}

#[tokio::test]
async fn list_stat_search_and_error_codes() {
    let f = fixture();
    let c = connect(vec![(f.rw.clone(), Access::Rw)], None).await;
    let r = call(&c, "list", json!({"path": s(&f.rw)})).await;
    let v = r.structured_content.clone().unwrap();
    let entries: Vec<(String, String)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["type"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            ("escape".into(), "symlink".into()),
            ("hello.txt".into(), "file".into()),
            ("sub".into(), "dir".into())
        ]
    );
    let r = call(&c, "stat", json!({"path": s(&f.rw.join("hello.txt"))})).await;
    let v = r.structured_content.clone().unwrap();
    assert_eq!(v["type"], "file");
    assert_eq!(v["size"], 11);
    let r = call(&c, "search", json!({"path": s(&f.rw), "pattern": "*.rs"})).await;
    let v = r.structured_content.clone().unwrap();
    assert_eq!(v["results"][0]["path"], s(&f.rw.join("sub/deep.rs")));
    assert_eq!(v["results"].as_array().unwrap().len(), 1);

    let r = call(&c, "list", json!({"path": s(&f.rw.join("hello.txt"))})).await;
    assert_eq!(code(&r).as_deref(), Some("NOT_A_DIR"));
    let r = call(&c, "stat", json!({"path": s(&f.rw.join("nope"))})).await;
    assert_eq!(code(&r).as_deref(), Some("NOT_FOUND"));
    let r = call(
        &c,
        "read",
        json!({"path": s(&f.rw.join("hello.txt")), "maxBytes": 5}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("TOO_LARGE"));
    let r = call(
        &c,
        "read",
        json!({"path": s(&f.rw.join("hello.txt")), "bogus": 1}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("BAD_ARGUMENTS"));
    c.shutdown().await;
}

#[tokio::test]
async fn governed_resources_follow_the_seed_contract() {
    let f = fixture();
    let c = connect(vec![(f.rw.clone(), Access::Rw)], None).await;
    let res = c.peer().list_all_resources().await.unwrap();
    let uris: Vec<&str> = res.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, vec!["palisade-fs://policy", "palisade-fs://index"]);
    let tpl = c.peer().list_all_resource_templates().await.unwrap();
    let tpls: Vec<&str> = tpl.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(
        tpls,
        vec!["palisade-fs://dir/{path}", "palisade-fs://file/{path}"]
    );

    let text = |r: &rmcp::model::ReadResourceResult| match &r.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    };
    let policy: Value = serde_json::from_str(&text(
        &c.read_resource("palisade-fs://policy").await.unwrap(),
    ))
    .unwrap();
    assert_eq!(policy["roots"][0]["path"], s(&f.rw));
    assert_eq!(policy["rootsSource"], "command-line");
    let index: Value = serde_json::from_str(&text(
        &c.read_resource("palisade-fs://index").await.unwrap(),
    ))
    .unwrap();
    let dir_uri = index["roots"][0]["uri"].as_str().unwrap().to_string();
    let listing: Value =
        serde_json::from_str(&text(&c.read_resource(&dir_uri).await.unwrap())).unwrap();
    assert!(listing["entries"].as_array().unwrap().len() >= 3);

    let file = palisade::fsserver::resources::file_uri(&f.rw.join("hello.txt"));
    assert_eq!(text(&c.read_resource(&file).await.unwrap()), "hello world");
    let plain = path_to_uri(&f.rw.join("hello.txt")).unwrap();
    assert_eq!(text(&c.read_resource(&plain).await.unwrap()), "hello world");

    // Errors are JSON-RPC errors with the code in `data`.
    let cases = [
        (
            palisade::fsserver::resources::file_uri(&f.outside.join("secret.txt")),
            "FORBIDDEN",
        ),
        (
            palisade::fsserver::resources::file_uri(&f.rw.join("escape/secret.txt")),
            "FORBIDDEN",
        ),
        (
            palisade::fsserver::resources::dir_uri(&f.rw.join("hello.txt")),
            "NOT_A_DIR",
        ),
        (
            palisade::fsserver::resources::file_uri(&f.rw.join("none")),
            "NOT_FOUND",
        ),
        ("palisade-fs://file/tmp%2Fx".to_string(), "BAD_PATH"),
        ("palisade-fs://file/a/b".to_string(), "BAD_PATH"),
    ];
    for (uri, want) in cases {
        let err = c.read_resource(&uri).await.unwrap_err().to_string();
        assert!(err.contains(want), "{uri}: {err}");
    }
    c.shutdown().await;
}

#[tokio::test]
async fn client_roots_replace_cli_roots_and_list_changed_refetches() {
    let f = fixture();
    let c = connect(
        vec![(f.rw.clone(), Access::Rw)],
        Some(vec![path_to_uri(&f.ro).unwrap()]),
    )
    .await;
    let state = wait_roots(&c, |v| v["source"] == "client").await;
    assert_eq!(state["roots"][0]["path"], s(&f.ro));
    let r = call(&c, "read", json!({"path": s(&f.rw.join("hello.txt"))})).await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    let r = call(&c, "read", json!({"path": s(&f.ro.join("ro.txt"))})).await;
    assert_eq!(result_text(&r), "read only");

    let version = state["version"].as_u64().unwrap();
    c.set_roots(vec![path_to_uri(&f.rw).unwrap(), "file://remote/x".into()])
        .await
        .unwrap();
    let state = wait_roots(&c, |v| v["version"].as_u64() > Some(version)).await;
    assert_eq!(state["roots"].as_array().unwrap().len(), 1);
    assert_eq!(state["roots"][0]["path"], s(&f.rw));
    let r = call(&c, "read", json!({"path": s(&f.ro.join("ro.txt"))})).await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    c.shutdown().await;
}

#[tokio::test]
async fn no_roots_refuses_everything_and_says_so() {
    let f = fixture();
    let c = connect(vec![], None).await;
    let info = c.server_info().unwrap();
    assert!(info.instructions.unwrap().contains("refuses every path"));
    let r = call(&c, "read", json!({"path": s(&f.rw.join("hello.txt"))})).await;
    assert_eq!(code(&r).as_deref(), Some("FORBIDDEN"));
    assert!(result_text(&r).contains("no roots"));
    c.shutdown().await;
}

#[tokio::test]
async fn concurrent_calls_all_answer() {
    let f = fixture();
    let c = connect(vec![(f.rw.clone(), Access::Rw)], None).await;
    let path = s(&f.rw.join("hello.txt"));
    let calls = (0..64).map(|_| c.call_tool("read", json!({ "path": path })));
    for r in futures::future::join_all(calls).await {
        assert_eq!(result_text(&r.unwrap()), "hello world");
    }
    c.shutdown().await;
}

/// Polls the server's own `list_roots` until `pred` holds (bounded by count, not time).
async fn wait_roots(c: &McpClient, pred: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..500 {
        let r = call(c, "list_roots", json!({})).await;
        last = r.structured_content.unwrap();
        if pred(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("roots never reached the expected state; last {last}");
}

/// The official Python SDK drives `palisade fs-server` as a subprocess.
#[test]
fn python_sdk_client_interoperates() {
    let deps = std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
    let python = deps.join("venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/install-test-deps.sh (or set PALISADE_TEST_DEPS)",
        python.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fs_server_interop.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_palisade"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("INTEROP OK"),
        "python interop failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
