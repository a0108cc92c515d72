//! OAuth 2.1 resource-server mode: JWT access tokens checked against a JWKS (a file, a URL,
//! an https:// URL verified with a CA file, one behind an HTTP proxy). A key that cannot be
//! fetched or trusted fails closed: no token is admitted and no principal's server starts.
//! The stand-in hosts (PKI, HTTPS server, CONNECT proxy) are in `jwks_hosts.rs`.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fixtures::fs_config;
use crate::front::{free_port, Front};
use crate::jwks_hosts::{test_pki, ConnectProxy, HttpsJwks};
use crate::support::{self, palisade, Workspace};

/// Tokens minted for a fresh key whose JWKS is written to `jwks` (see mint_jwt.py).
fn mint(jwks: &Path, iss: &str, aud: &str) -> Value {
    let out = support::driver("tests/clients/mint_jwt.py")
        .arg(jwks)
        .args([iss, aud])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
}

const ISS: &str = "https://issuer.example";
const AUD: &str = "https://palisade.example/mcp";

/// `serve --http` taking JWTs against the JWKS at `url`, with `extra` flags and `env` added to
/// its environment.
fn jwks_url_front(
    ws: &Workspace,
    config: &Path,
    url: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Front {
    let mut args = vec![
        "--jwks-url",
        url,
        "--jwt-issuer",
        ISS,
        "--jwt-audience",
        AUD,
    ];
    args.extend_from_slice(extra);
    Front::start_env(ws, config, &args, env)
}

// OAuth 2.1 resource-server mode: JWT access tokens checked for signature (JWKS), issuer,
// audience, expiry and scope; a wrong one is a 401 naming the metadata, and nothing reaches a
// server; a good one works with the real SDK client, and its `sub` is the principal.
#[test]
fn jwt_access_tokens_are_checked_and_the_resource_metadata_is_served() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let (iss, aud) = (ISS, AUD);
    let minted = mint(&jwks, iss, aud);
    let front = Front::start(
        &ws,
        &config,
        &[
            "--jwks",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            iss,
            "--jwt-audience",
            aud,
            "--jwt-scope",
            "mcp:tools",
        ],
    );
    let mut refused = Vec::new();
    for bad in [
        "expired",
        "wrong_audience",
        "wrong_issuer",
        "wrong_key",
        "missing_scope",
        "hs256",
        "not_yet_valid",
    ] {
        let bearer = format!("Bearer {}", minted[bad].as_str().unwrap());
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        refused.push((
            bad,
            status,
            text.to_ascii_lowercase()
                .contains("resource_metadata=\"http://"),
        ));
    }
    let (meta_status, meta) = front.raw("GET", "/.well-known/oauth-protected-resource", &[]);
    let good = front.client(
        minted["good"].as_str().unwrap(),
        json!([{"tool": "fs__list_roots", "args": {}}]),
    );
    front.stop();
    for (bad, status, names_metadata) in &refused {
        assert_eq!(*status, 401, "{bad}");
        assert!(
            names_metadata,
            "{bad}: WWW-Authenticate names the resource metadata"
        );
    }
    assert_eq!(meta_status, 200, "{meta}");
    let body: Value = serde_json::from_str(meta.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["resource"], aud);
    assert_eq!(body["authorization_servers"], json!([iss]));
    assert_eq!(good["calls"][0]["ok"], true, "{good}\n{}", ws.stderr_text());
    let dirs: Vec<_> = std::fs::read_dir(sandbox.join("principals"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "only the good token's principal started servers: {dirs:?}"
    );
    assert!(
        dirs[0].starts_with("sub-"),
        "carol@example.com is hashed into a safe name: {dirs:?}"
    );
    let records = support::read_jsonl(&audit);
    assert!(!records.is_empty(), "the good call is audited");
    for r in &records {
        assert_eq!(r["principal"], json!(dirs[0]), "{r}");
    }
}

// OAuth resource-server mode with the JWKS at a URL (a real HTTP server, Python's
// http.server): while the URL cannot be fetched a valid token gets 503 naming the reason (fail
// closed; nothing reaches a server); once it serves, the token is accepted; after a key
// rotation a token signed by the new key (an unknown kid) makes palisade fetch again and is
// accepted, while a token claiming the old kid but signed by another key stays refused.
#[test]
fn a_jwks_url_fails_closed_while_unreachable_and_is_fetched_again_for_a_new_key() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    support::merge_settings(&config, json!({"http": {"jwksRefetch": 0}}));
    let site = ws.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let jwks = site.join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/jwks.json");
    let front = jwks_url_front(&ws, &config, &url, &[], &[]);
    let bearer = |name: &str| format!("Bearer {}", minted[name].as_str().unwrap());
    let (down, down_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let reached_while_down = sandbox.join("principals").exists();
    let mut server = Command::new(support::python())
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(&site)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut serving = false;
    for _ in 0..400 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            serving = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let (up, up_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let (early_rotated, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer("rotated"))]);
    std::fs::rename(site.join("jwks.json.rotated"), &jwks).unwrap();
    let (rotated, rotated_text) =
        front.raw("POST", "/mcp", &[("Authorization", &bearer("rotated"))]);
    let (forged, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer("wrong_key"))]);
    let status = front.stop();
    let _ = server.kill();
    let _ = server.wait();
    let err = ws.stderr_text();
    assert!(serving, "the JWKS server did not come up");
    assert_eq!(down, 503, "{down_text}");
    assert!(down_text.contains("could not be fetched"), "{down_text}");
    assert!(
        err.contains("cannot fetch the JWKS"),
        "the reason is logged:\n{err}"
    );
    assert!(
        !reached_while_down,
        "a principal's servers started while no key was known"
    );
    assert_eq!(up, 200, "{up_text}\n{err}");
    assert_eq!(early_rotated, 401, "k2 is not served yet");
    assert_eq!(
        rotated, 200,
        "the rotated key was fetched: {rotated_text}\n{err}"
    );
    assert_eq!(forged, 401, "a token claiming k1, signed by another key");
    assert!(status.success(), "{status}\n{err}");
}

// An https:// JWKS URL (the issuer's usual `https://issuer/.well-known/jwks.json`) whose
// certificate chains to the CA of `jwksCa` (the config field; the attack test below gives
// `--jwks-ca`): fetched over real TLS (a tokio-rustls server with a certificate for
// localhost), a token signed by the served key is admitted, and one signed by another key is
// refused. A CA file that holds no certificate, or one given for a plain http:// URL, stops
// palisade at start with the flag, the file and the fix.
#[test]
fn a_jwks_over_https_is_verified_with_the_ca_file_and_its_keys_admit_tokens() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let (ca_pem, chain, key) = test_pki(&["localhost", "127.0.0.1"], false);
    let ca = ws.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let server = HttpsJwks::start(chain, key, jwks);
    let url = format!("https://localhost:{}/.well-known/jwks.json", server.port);
    let not_pem = ws.path().join("not-a-ca.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let base = [
        "--http",
        "127.0.0.1:1",
        "--jwt-issuer",
        ISS,
        "--jwt-audience",
        AUD,
        "--jwks-ca",
        not_pem.to_str().unwrap(),
        "--jwks-url",
    ];
    for (url, want) in [
        (url.as_str(), "holds no certificate"),
        ("http://127.0.0.1:1/jwks.json", "plain http on loopback"),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&config)
            .args(base)
            .arg(url)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {err}");
        assert!(err.contains(want), "{url}: {err}");
        assert!(
            err.contains(&format!("--jwks-ca {}", not_pem.display())),
            "names the flag and the file: {err}"
        );
    }
    support::merge_settings(&config, json!({"http": {"jwksCa": ca}}));
    let front = jwks_url_front(&ws, &config, &url, &[], &[]);
    let bearer = |name: &str| format!("Bearer {}", minted[name].as_str().unwrap());
    let (good, good_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let (forged, forged_text) =
        front.raw("POST", "/mcp", &[("Authorization", &bearer("wrong_key"))]);
    let status = front.stop();
    let err = ws.stderr_text();
    assert_eq!(good, 200, "{good_text}\n{err}");
    assert!(good_text.contains("protocolVersion"), "{good_text}");
    assert!(err.contains("JWKS fetched"), "{err}");
    assert_eq!(forged, 401, "a token signed by another key: {forged_text}");
    assert!(
        sandbox.join("principals").exists(),
        "the good token's principal was served"
    );
    assert!(status.success(), "{status}\n{err}");
}

// Attack: someone answers for the issuer's host with a certificate palisade must not trust (a
// CA not in the trust store, a certificate for another name, an expired one). Each fetch fails
// at the handshake, the reason is logged, and every JWT (even one the served key signed) is
// refused with that reason, no principal's server started. The server was reached each time,
// so the refusal is the certificate check; with the CA file the same kind of server admits the
// token (the control, `a_jwks_over_https_is_verified_with_the_ca_file_and_its_keys_admit_tokens`).
// Fails if certificate verification were off: the keys would be fetched and the token admitted.
#[test]
fn a_jwks_over_https_with_an_untrusted_misnamed_or_expired_certificate_is_never_used() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let bearer = format!("Bearer {}", minted["good"].as_str().unwrap());
    let cases: [(&str, &[&str], bool, bool, &str); 3] = [
        // No CA file: the system trust store does not hold the test CA.
        (
            "unknown CA",
            &["localhost", "127.0.0.1"],
            false,
            false,
            "UnknownIssuer",
        ),
        (
            "wrong name",
            &["jwks.other.example"],
            false,
            true,
            "not valid for name",
        ),
        (
            "expired",
            &["localhost", "127.0.0.1"],
            true,
            true,
            "certificate expired",
        ),
    ];
    for (what, names, expired, with_ca, reason) in cases {
        let (ca_pem, chain, key) = test_pki(names, expired);
        let ca = ws.path().join("ca.pem");
        std::fs::write(&ca, ca_pem).unwrap();
        let server = HttpsJwks::start(chain, key, jwks.clone());
        let url = format!("https://localhost:{}/jwks.json", server.port);
        let ca_flag = ["--jwks-ca", ca.to_str().unwrap()];
        let extra: &[&str] = if with_ca { &ca_flag } else { &[] };
        let front = jwks_url_front(&ws, &config, &url, extra, &[]);
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let (again, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let exit = front.stop();
        let err = ws.stderr_text();
        assert_eq!(status, 503, "{what}: {text}\n{err}");
        assert_eq!(again, 503, "{what}: still refused");
        assert!(text.contains("could not be fetched"), "{what}: {text}");
        assert!(
            text.contains("TLS handshake") && text.contains(reason),
            "{what}: the refusal names the TLS failure: {text}"
        );
        assert!(
            err.contains("cannot fetch the JWKS") && err.contains(reason),
            "{what}: the reason is logged:\n{err}"
        );
        assert!(server.handshakes() > 0, "{what}: the server was reached");
        assert!(
            !sandbox.join("principals").exists(),
            "{what}: a principal's servers started while no key was known"
        );
        assert!(exit.success(), "{what}: {exit}\n{err}");
    }
}

// The JWKS at an https:// URL behind an HTTP proxy (`HTTPS_PROXY`): fetched through a CONNECT
// tunnel, TLS end to end with the JWKS host (its certificate checked against `jwksCa`). The
// host `jwks.test` resolves nowhere but in the proxy, so a token admitted proves the keys came
// through it, and the proxy saw the CONNECT. `NO_PROXY` naming the host sends the fetch
// direct (where the name does not resolve: JWTs get 503, the proxy sees nothing more); a
// proxy that refuses the tunnel fails closed (503, the refusal logged). Before proxies were
// honoured the first case failed like the second.
#[test]
fn a_jwks_over_https_is_fetched_through_https_proxy_and_no_proxy_is_honoured() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let (ca_pem, chain, key) = test_pki(&["jwks.test"], false);
    let ca = ws.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    support::merge_settings(&config, json!({"http": {"jwksCa": ca}}));
    let server = HttpsJwks::start(chain, key, jwks);
    let url = format!("https://jwks.test:{}/.well-known/jwks.json", server.port);
    let bearer = format!("Bearer {}", minted["good"].as_str().unwrap());
    let try_token = |env: &[(&str, &str)]| {
        let front = jwks_url_front(&ws, &config, &url, &[], env);
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let stopped = front.stop();
        assert!(stopped.success(), "{stopped}\n{}", ws.stderr_text());
        (status, text, ws.stderr_text())
    };

    let proxy = ConnectProxy::start(false);
    let (status, text, err) = try_token(&[("HTTPS_PROXY", &proxy.url())]);
    assert_eq!(status, 200, "{text}\n{err}");
    assert!(err.contains("JWKS fetched"), "{err}");
    assert!(
        err.contains("through the proxy"),
        "the start says so: {err}"
    );
    assert_eq!(
        proxy.seen(),
        vec![format!("CONNECT jwks.test:{} HTTP/1.1", server.port)]
    );
    assert_eq!(server.handshakes(), 1, "the TLS server was reached once");

    let (status, text, err) =
        try_token(&[("https_proxy", &proxy.url()), ("NO_PROXY", "jwks.test")]);
    assert_eq!(status, 503, "{text}\n{err}");
    assert_eq!(proxy.seen().len(), 1, "NO_PROXY: the proxy was not asked");
    assert_eq!(server.handshakes(), 1);

    let refusing = ConnectProxy::start(true);
    let (status, text, err) = try_token(&[("HTTPS_PROXY", &refusing.url())]);
    assert_eq!(status, 503, "{text}\n{err}");
    assert!(
        err.contains("refused the tunnel: HTTP/1.1 403 Forbidden"),
        "the refusal is said: {err}"
    );
    assert!(text.contains("could not be fetched"), "{text}");
    assert!(!refusing.seen().is_empty());
    assert_eq!(server.handshakes(), 1, "never fetched around the proxy");
}

// Tokens from a tokens file beside JWTs: a JWT whose `sub` names a principal of the file
// (`alice`) is refused (401 saying why), since it would be handed that principal's servers,
// sandbox directory and sessions; the file's own token for alice and another subject's JWT
// both work. Before, the JWT was admitted as alice.
#[test]
fn a_jwt_whose_subject_names_a_tokens_file_principal_is_refused() {
    let ws = Workspace::new();
    let (config, _sandbox, _audit) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let tokens = crate::fixtures::tokens_file(&ws);
    let front = Front::start(
        &ws,
        &config,
        &[
            "--tokens",
            tokens.to_str().unwrap(),
            "--jwks",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            ISS,
            "--jwt-audience",
            AUD,
        ],
    );
    let bearer = format!("Bearer {}", minted["sub_alice"].as_str().unwrap());
    let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
    let calls = json!([{"tool": "fs__list_roots", "args": {}}]);
    let file_alice = front.client(crate::fixtures::ALICE, calls.clone());
    let carol = front.client(minted["good"].as_str().unwrap(), calls);
    front.stop();
    let err = ws.stderr_text();
    assert_eq!(status, 401, "{text}\n{err}");
    assert!(
        text.contains("also a principal of the tokens file"),
        "{text}"
    );
    assert_eq!(file_alice["calls"][0]["ok"], true, "{file_alice}\n{err}");
    assert_eq!(carol["calls"][0]["ok"], true, "{carol}\n{err}");
}
