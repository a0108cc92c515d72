//! Bearer tokens and the Origin check at the door: a request with no token, a wrong token or
//! a foreign Origin is refused before it reaches any server, and palisade will not serve
//! without authentication unless asked to, on loopback only. JWTs are in `jwt.rs`.

use std::process::{Command, Stdio};

use serde_json::json;

use crate::fixtures::{fs_config, tokens_file, ALICE};
use crate::front::Front;
use crate::support::{self, palisade, Workspace};

// No token, a wrong token, a foreign Origin: refused with 401 / 403 before anything reaches a
// server (no principal's servers start, nothing is audited).
#[test]
fn unauthenticated_and_foreign_origin_requests_never_reach_a_server() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let (none, none_text) = front.raw("POST", "/mcp", &[]);
    let (wrong, _) = front.raw("POST", "/mcp", &[("Authorization", "Bearer not-a-token")]);
    let bearer = format!("Bearer {ALICE}");
    let (foreign, _) = front.raw(
        "POST",
        "/mcp",
        &[
            ("Authorization", &bearer),
            ("Origin", "https://evil.example"),
        ],
    );
    let sdk = front.client("not-a-token", json!([]));
    let (ready, _) = front.raw("GET", "/readyz", &[]);
    front.stop();
    assert_eq!(none, 401, "{none_text}");
    assert!(
        none_text
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{none_text}"
    );
    assert_eq!(wrong, 401);
    assert_eq!(foreign, 403);
    assert_eq!(ready, 200);
    assert!(
        sdk.get("error").is_some(),
        "the SDK client got in with a bad token: {sdk}"
    );
    assert!(
        !sandbox.join("principals").exists(),
        "a principal's servers were started"
    );
    assert!(support::read_jsonl(&audit).is_empty());
}

// Without authentication palisade refuses to start, and refuses --no-auth off loopback.
#[test]
fn serving_without_authentication_is_refused_unless_loopback_and_asked() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    for (args, want) in [
        (vec!["--http", "127.0.0.1:1"], "needs authentication"),
        (
            vec!["--http", "0.0.0.0:1", "--no-auth"],
            "--no-auth on 0.0.0.0:1",
        ),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&config)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
