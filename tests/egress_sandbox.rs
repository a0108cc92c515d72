//! End to end with the real pieces: a process in a real bubblewrap sandbox (own network
//! namespace) reaches `allowed.test` only through Palisade's egress proxy, via real socat
//! bridges started by the `wiring` wrapper, with real curl; it is refused `denied.test`, and
//! cannot connect to the host's loopback origin, resolve names or send UDP by itself. Each
//! "cannot" is also run unsandboxed, where it must work, so it cannot pass vacuously.
//!
//! The bwrap argv is built here by `sandbox_argv`; when the native launcher lands, replace
//! that one function with the launcher's rendering of a `NetworkSpec::Proxied` spec.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod egress_support;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use egress_support::*;
use palisade::egress::wiring::{wiring, EgressWiring, WiringOptions};
use palisade::egress::{Limits, RefusalReason};
use tokio::io::AsyncWriteExt;

/// Tools this test needs; `None` (with the reason printed) skips it.
fn tools() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let find = |n: &str| which::which(n).ok();
    match (find("bwrap"), find("socat"), find("curl")) {
        (Some(b), Some(s), Some(c)) => Some((b, s, c)),
        missing => {
            skip::skip(&format!(
                "needs bwrap, socat and curl on PATH, found {missing:?}"
            ));
            None
        }
    }
}

/// The sandbox the issue describes: everything unshared (network included), /usr read-only,
/// plus the egress wiring's bind. Stand-in for the native launcher.
fn sandbox_argv(bwrap: &Path, w: &EgressWiring, inner: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = [
        bwrap.to_str().unwrap(),
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (k, v) in &w.env {
        argv.extend(["--setenv".to_string(), k.clone(), v.clone()]);
    }
    argv.extend(
        w.bwrap_args
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    argv.push("--".into());
    argv.extend(inner.iter().cloned());
    argv
}

/// What the sandboxed "server" does: one line per probe, `name=result`.
fn probe_script(port: u16) -> String {
    format!(
        r#"read -r line; echo "stdin=$line"
c() {{ curl -sS --max-time 10 "$@" 2>/dev/null; echo " rc=$?"; }}
echo "forward=$(c http://allowed.test:{port}/forward)"
echo "connect=$(c --proxytunnel http://allowed.test:{port}/connect)"
echo "socks=$(c --proxy socks5h://127.0.0.1:1080 http://allowed.test:{port}/socks)"
echo "denied=$(c -o /dev/null -w '%{{http_code}}' http://denied.test:{port}/)"
echo "denied_connect=$(c --proxytunnel http://denied.test:{port}/)"
echo "denied_socks=$(c --proxy socks5h://127.0.0.1:1080 http://denied.test:{port}/)"
echo "ip_literal=$(c -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/ --noproxy '' -x http://127.0.0.1:3128)"
echo "direct=$(c --noproxy '*' http://127.0.0.1:{port}/direct)"
echo "dns=$(c --noproxy '*' http://allowed.test:{port}/)"
echo "udp=$(echo x | socat -u - UDP4-SENDTO:192.0.2.1:53 2>/dev/null; echo rc=$?)"
"#
    )
}

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= line in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_process_reaches_only_allowed_names_through_the_proxy() {
    let Some((bwrap, socat, _curl)) = tools() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let origin = http_origin().await;
    let port = origin.port();
    let p = proxy(dir.path(), Limits::default());
    let mut events = p.subscribe();
    let sock = p
        .add_server("sandboxed", &lists(&[format!("allowed.test:{port}")], &[]))
        .unwrap();
    let w = wiring(&WiringOptions::new(&sock, &socat));
    let inner = w.wrap("/bin/sh", &["-c".to_string(), probe_script(port)]);
    let argv = sandbox_argv(&bwrap, &w, &inner);

    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The server's stdin is its MCP channel: it must reach the server, not the bridges.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"mcp-line\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sandbox failed: {stdout}\n{stderr}");

    assert_eq!(field(&stdout, "stdin"), "mcp-line");
    // Allowed: plain forward, CONNECT tunnel, SOCKS5 with remote DNS.
    assert_eq!(
        field(&stdout, "forward"),
        format!("origin saw [GET /forward HTTP/1.1] host [allowed.test:{port}] rc=0"),
    );
    assert_eq!(
        field(&stdout, "connect"),
        format!("origin saw [GET /connect HTTP/1.1] host [allowed.test:{port}] rc=0"),
    );
    assert_eq!(
        field(&stdout, "socks"),
        format!("origin saw [GET /socks HTTP/1.1] host [allowed.test:{port}] rc=0"),
    );
    // Refused by the proxy.
    assert_eq!(field(&stdout, "denied"), "403 rc=0");
    assert!(
        field(&stdout, "denied_connect").ends_with("rc=56"),
        "{stdout}"
    );
    assert!(
        !field(&stdout, "denied_socks").ends_with("rc=0"),
        "{stdout}"
    );
    assert!(
        !field(&stdout, "denied_socks").contains("origin saw"),
        "{stdout}"
    );
    assert_eq!(field(&stdout, "ip_literal"), "403 rc=0");
    // No way around it: no route to the host's loopback, no DNS, no UDP.
    assert_eq!(field(&stdout, "direct"), " rc=7", "{stdout}");
    assert_eq!(field(&stdout, "dns"), " rc=6", "{stdout}");
    assert!(!field(&stdout, "udp").ends_with("rc=0"), "{stdout}");

    // The refusals were attributed to this server.
    let mut refused = Vec::new();
    while let Ok(ev) = events.try_recv() {
        assert_eq!(ev.server, "sandboxed");
        refused.push((ev.host, ev.reason));
    }
    assert!(
        refused.contains(&("denied.test".into(), RefusalReason::NotAllowed)),
        "{refused:?}"
    );
    assert!(refused.contains(&("127.0.0.1".into(), RefusalReason::IpLiteralNotAllowed)));

    // Unprotected controls: the same direct probes succeed outside the sandbox.
    let direct = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--noproxy", "*"])
        .arg(format!("http://127.0.0.1:{port}/direct"))
        .output()
        .unwrap();
    assert!(direct.status.success(), "the origin answers on the host");
    assert!(String::from_utf8_lossy(&direct.stdout).contains("origin saw [GET /direct"));
    let udp = std::process::Command::new("sh")
        .args(["-c", "echo x | socat -u - UDP4-SENDTO:192.0.2.1:53"])
        .output()
        .unwrap();
    if !udp.status.success() {
        eprintln!(
            "NOTE: this host cannot send UDP to 192.0.2.1 either; the UDP probe proves less here"
        );
    }
}

/// The MCP client side of the fetch test: the `mcp` SDK spawns the sandboxed server over
/// stdio, calls `fetch` once per URL, prints one JSON line per call. `raw`: the HTML
/// simplifier (readabilipy) runs `npm install` on first use when it finds node, which a
/// sandbox rightly refuses; that is a profile matter, not the network's.
const FETCH_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters, stdio_client

async def main():
    argv = json.loads(sys.argv[1])
    urls = json.loads(sys.argv[2])
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), 60)
            for url in urls:
                try:
                    r = await asyncio.wait_for(session.call_tool("fetch", {"url": url, "raw": True}), 60)
                    text = " ".join(getattr(c, "text", "") for c in r.content)
                    print(json.dumps({"url": url, "error": bool(r.is_error), "text": text}), flush=True)
                except Exception as e:
                    print(json.dumps({"url": url, "error": True, "text": repr(e)}), flush=True)

asyncio.run(main())
"#;

fn test_deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_mcp_server_fetch_in_a_sandbox_fetches_allowed_urls_only() {
    let Some((bwrap, socat, _)) = tools() else {
        return;
    };
    let venv = test_deps().join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        skip::skip(&format!(
            "no test venv at {} (run scripts/install-test-deps.sh)",
            venv.display()
        ));
        return;
    }
    // The venv's interpreter lives elsewhere (pyenv): bind its installation read-only too.
    let real_python = std::fs::canonicalize(&python).unwrap();
    let python_home = real_python
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();

    let dir = tempfile::tempdir().unwrap();
    let origin = http_origin().await;
    let port = origin.port();
    let p = proxy(dir.path(), Limits::default());
    let mut events = p.subscribe();
    let sock = p
        .add_server("fetch", &lists(&[format!("allowed.test:{port}")], &[]))
        .unwrap();
    let w = wiring(&WiringOptions::new(&sock, &socat));
    let inner = w.wrap(
        python.to_str().unwrap(),
        &[
            "-m".into(),
            "mcp_server_fetch".into(),
            "--ignore-robots-txt".into(),
        ],
    );
    let mut argv = sandbox_argv(&bwrap, &w, &inner);
    // Insert the runtime binds before `--`.
    let sep = argv.iter().position(|a| a == "--").unwrap();
    // The private /tmp comes first: a tmpfs mounted after the binds would hide a checkout
    // (and its venv) that lives under /tmp, as the launcher's own ordering rules say.
    argv.splice(1..1, ["--tmpfs".to_string(), "/tmp".to_string()]);
    let sep = sep + 2;
    let extra: Vec<String> = [
        "--ro-bind".to_string(),
        python_home.display().to_string(),
        python_home.display().to_string(),
        "--ro-bind".to_string(),
        venv.display().to_string(),
        venv.display().to_string(),
        "--setenv".to_string(),
        "HOME".to_string(),
        "/tmp".to_string(),
    ]
    .into();
    argv.splice(sep..sep, extra);

    let allowed = format!("http://allowed.test:{port}/page");
    let denied = format!("http://denied.test:{port}/page");
    let out = tokio::process::Command::new(&python)
        .arg("-c")
        .arg(FETCH_CLIENT)
        .arg(serde_json::to_string(&argv).unwrap())
        .arg(serde_json::to_string(&[&allowed, &denied]).unwrap())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let results: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 2, "{stdout}\n{stderr}");
    let text = |i: usize| results[i]["text"].as_str().unwrap().to_string();
    assert_eq!(results[0]["error"], false, "{}\n{stderr}", text(0));
    assert!(
        text(0).contains(&format!(
            "origin saw [GET /page HTTP/1.1] host [allowed.test:{port}]"
        )),
        "{}",
        text(0)
    );
    assert_eq!(results[1]["error"], true, "{}", text(1));
    assert!(text(1).contains("403"), "{}", text(1));
    assert!(!text(1).contains("origin saw"), "{}", text(1));

    let ev = events.try_recv().expect("the refusal was published");
    assert_eq!(
        (ev.server.as_str(), ev.host.as_str(), ev.port),
        ("fetch", "denied.test", port)
    );
}
