//! `palisade bench-http`, the native load client behind scripts/load-http.sh, against a real
//! front: what it counts, and that a wrong token fails at `initialize`.

use std::process::Command;

use serde_json::{json, Value};

use crate::fixtures::{fs_config, tokens_file, ALICE, BOB};
use crate::front::Front;
use crate::support::{self, palisade, Workspace};

// `palisade bench-http`, the native load client of scripts/load-http.sh, drives a real front
// end to end over kept-alive connections: every measured call of the principals with good
// tokens succeeds (and is audited under its principal), and the principal with a wrong
// token is refused at `initialize` and makes no call.
#[test]
fn bench_http_load_client_counts_calls_and_wrong_tokens_fail() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let clear = ws.path().join("clear-tokens");
    std::fs::write(
        &clear,
        format!("# clear tokens\nalice {ALICE}\nbob {BOB}\nmallory not-{ALICE}\n"),
    )
    .unwrap();
    let args = json!({"path": format!("{}/principals/{{principal}}", sandbox.display())});
    let out = Command::new(palisade())
        .args(["bench-http", "--url", &front.url(), "--tokens"])
        .arg(&clear)
        .args(["--calls", "12", "--concurrency", "3", "--warmup", "1"])
        .args(["--tool", "fs__stat", "--args", &args.to_string()])
        .output()
        .unwrap();
    let status = front.stop();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["principals"], 3, "{v}");
    assert_eq!(v["principalsReady"], 2, "{v}");
    assert_eq!(v["ok"], 24, "12 calls each for alice and bob: {v}");
    assert_eq!(
        (v["errors"].as_u64(), v["toolErrors"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["initFailures"], 1, "{v}");
    let why = v["initErrors"][0].as_str().unwrap();
    assert!(why.starts_with("mallory: HTTP 401"), "{why}");
    assert!(!text.contains(ALICE), "the report shows no token: {text}");
    for k in ["median", "p99"] {
        assert!(v["latencyUs"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    // Measured calls plus one warm-up call per connection, each audited under its principal.
    let records = support::read_jsonl(&audit);
    let by = |p: &str| records.iter().filter(|r| r["principal"] == p).count();
    assert_eq!(
        (by("alice"), by("bob"), by("mallory")),
        (15, 15, 0),
        "{records:?}"
    );
    assert!(status.success(), "{status}\n{}", ws.stderr_text());
}
