//! The network as the other commands see it: `palisade check` reports the gap and an
//! allowlist under Landlock, `palisade run --allow-domain` keeps a proxy alive for its server,
//! and the srt backend runs a server under srt with the lists.

use std::path::Path;

use serde_json::json;

use crate::egress_support::http_origin;
use crate::*;

/// `palisade check` shows what would happen to an allowlisted server without socat.
#[test]
fn check_reports_the_network_gap() {
    if which::which("bwrap").is_err() {
        skip::skip("bwrap is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"net": {"command": "/bin/true", "sandbox": {"policy": "warn", "network": {"allowedDomains": ["example.com"]}}}}}).to_string(),
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(which::which("bwrap").unwrap(), bin.path().join("bwrap")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--config"])
        .arg(&cfg)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("DEGRADED"), "{text}");
    assert!(text.contains("socat is not installed"), "{text}");
    // With socat on PATH the same server is fully sandboxed.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("net (warn): sandboxed"), "{text}");
}

/// An allowlisted server under `backend: landlock`: Landlock's network rules name the egress
/// proxy's port, not its address; palisade checks each connect's address itself
/// (`connect_gate`), so `palisade check` says sandboxed under enforce, in Landlock (socat off
/// PATH, so it cannot be the bubblewrap bridge), and `palisade run --allow-domain` runs the
/// command under enforce.
#[test]
fn an_allowlist_under_landlock_is_enforced_where_palisade_checks_each_connect() {
    if landlock_allowlist(
        "an_allowlist_under_landlock_is_enforced_where_palisade_checks_each_connect",
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = check_allowlisted(dir.path(), "enforce", Outer::Nothing);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("net (enforce): sandboxed"), "{text}");
    assert!(text.contains("tier: landlock"), "{text}");
    let marker = dir.path().join("ran");
    let (code, stderr) = run_allowlisted(dir.path(), "enforce", &marker, Outer::Nothing);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(marker.exists(), "the command did not run: {stderr}");
}

/// The same server where palisade cannot check connects: `pidfd_getfd` refused by a
/// seccomp profile around palisade (as a container's could be). The allowlist would hold by
/// port only, so `palisade check` says REFUSED under enforce (exit 3), naming the field and
/// the fix, and DEGRADED under warn, in Landlock still; `palisade run --allow-domain` under
/// enforce refuses to run the command (exit 3), and under warn (the control) runs it.
#[test]
fn an_allowlist_under_landlock_without_connect_checks_is_refused_under_enforce_and_degraded_under_warn(
) {
    if landlock_abi_4().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = check_allowlisted(dir.path(), "enforce", Outer::RefusesPidfdGetfd);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("net (enforce): REFUSED"), "{text}");
    assert!(
        text.contains("sandbox.network.allowedDomains cannot be enforced by the Landlock tier"),
        "{text}"
    );
    assert!(
        text.contains("pidfd_getfd"),
        "the fix names the call: {text}"
    );
    let (code, text) = check_allowlisted(dir.path(), "warn", Outer::RefusesPidfdGetfd);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("net (warn): DEGRADED: runs in a weaker sandbox"),
        "{text}"
    );
    assert!(text.contains("tier: landlock"), "{text}");
    let marker = dir.path().join("ran");
    let (code, stderr) = run_allowlisted(dir.path(), "enforce", &marker, Outer::RefusesPidfdGetfd);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("allowedDomains"), "{stderr}");
    assert!(!marker.exists(), "the command ran under enforce");
    let (code, stderr) = run_allowlisted(dir.path(), "warn", &marker, Outer::RefusesPidfdGetfd);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        marker.exists(),
        "the control did not run the command: {stderr}"
    );
}

/// Palisade started inside another sandbox whose seccomp filter already holds a listener
/// (the kernel allows one per chain: a Landlock child's own would fail with EBUSY). The
/// probe finds out, so `palisade check` says REFUSED under enforce with the reason, `palisade
/// run` under enforce refuses (exit 3), and under warn runs the command (by port only)
/// instead of failing to start it.
#[test]
fn an_outer_listener_is_found_by_the_probe_and_warn_still_runs() {
    if landlock_abi_4().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = check_allowlisted(dir.path(), "enforce", Outer::HoldsAListener);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("connect checks:        NO"), "{text}");
    assert!(text.contains("net (enforce): REFUSED"), "{text}");
    let marker = dir.path().join("ran");
    let (code, stderr) = run_allowlisted(dir.path(), "enforce", &marker, Outer::HoldsAListener);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(!marker.exists(), "the command ran under enforce: {stderr}");
    let (code, stderr) = run_allowlisted(dir.path(), "warn", &marker, Outer::HoldsAListener);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        marker.exists(),
        "the command did not run under warn: {stderr}"
    );
}

/// What surrounds palisade in a test.
#[derive(Clone, Copy)]
enum Outer {
    Nothing,
    /// A seccomp filter refusing `pidfd_getfd` (EPERM).
    RefusesPidfdGetfd,
    /// An allow-all seccomp filter whose listener palisade inherits open.
    HoldsAListener,
}

/// `palisade check` of a config with one Landlock server allowlisted to example.com under
/// `policy`, with an empty PATH: its exit code and stdout.
fn check_allowlisted(dir: &Path, policy: &str, outer: Outer) -> (Option<i32>, String) {
    let cfg = dir.join(format!("{policy}.json"));
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"net": {"command": "/bin/true", "sandbox": {"backend": "landlock", "policy": policy, "network": {"allowedDomains": ["example.com"]}}}}}).to_string(),
    )
    .unwrap();
    let empty = dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"));
    cmd.args(["check", "--config"])
        .arg(&cfg)
        .env("PATH", &empty);
    surround(&mut cmd, outer);
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

/// `palisade run --backend landlock --allow-domain example.com` under `policy`, `dir`
/// granted read-write, touching `marker`: its exit code and stderr.
fn run_allowlisted(dir: &Path, policy: &str, marker: &Path, outer: Outer) -> (Option<i32>, String) {
    let own = dir.join(format!("run-{policy}"));
    std::fs::create_dir_all(&own).unwrap();
    let tmp = private_tmp(&own);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"));
    cmd.env("TMPDIR", &tmp)
        .args(["run", "--backend", "landlock", "--sandbox-policy", policy])
        .args(["--allow-domain", "example.com", "--rw"])
        .arg(dir)
        .arg("--")
        .args(["/bin/touch".as_ref(), marker.as_os_str()]);
    surround(&mut cmd, outer);
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Starts `cmd` inside `outer`.
fn surround(cmd: &mut std::process::Command, outer: Outer) {
    use std::os::unix::process::CommandExt;
    // ld nr; jeq pidfd_getfd (438 on x86_64 and aarch64) ? errno(EPERM) : allow.
    static NO_PIDFD_GETFD: [libc::sock_filter; 4] = [
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: 438,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000,
        },
    ];
    static ALLOW: [libc::sock_filter; 1] = [libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0x7fff_0000,
    }];
    let (filter, flags): (&'static [libc::sock_filter], u32) = match outer {
        Outer::Nothing => return,
        Outer::RefusesPidfdGetfd => (&NO_PIDFD_GETFD, 0),
        Outer::HoldsAListener => (&ALLOW, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32),
    };
    // SAFETY: the hook makes a few system calls on static data between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::syscall(libc::SYS_seccomp, 1u32, flags, &prog);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The listener survives the exec: palisade runs with it held open.
            if flags != 0 && libc::fcntl(fd as i32, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `palisade run --allow-domain`: the command (real curl) reaches the allowed name through
/// the proxy `run` keeps alive, is refused the other, and `run` exits with curl's status and
/// leaves no socket directory behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_allow_domain_keeps_a_proxy_alive_and_propagates_the_exit_code() {
    if prerequisites().is_none() {
        return;
    }
    let Ok(curl) = which::which("curl") else {
        skip::skip("curl is not installed");
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 allowed.test denied.test\n").unwrap();
    let tmp = private_tmp(dir.path());
    let run = |url: String| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_palisade"));
        c.env("TMPDIR", &tmp)
            .env("RUST_LOG", "info")
            .arg("run")
            .arg("--allow-domain")
            .arg(format!("allowed.test:{port}"))
            .arg("--egress-hosts-file")
            .arg(&hosts)
            .arg("--")
            .arg(&curl)
            .args(["-sS", "-f", "--max-time", "20"])
            .arg(url)
            .kill_on_drop(true);
        c
    };
    let first = run(format!("http://allowed.test:{port}/run"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        stdout,
        format!("origin saw [GET /run HTTP/1.1] host [allowed.test:{port}]")
    );

    let out_denied = run(format!("http://denied.test:{port}/run"))
        .output()
        .await
        .unwrap();
    // curl -f: 22 for an HTTP error (the proxy's 403), propagated by `run`.
    assert_eq!(
        out_denied.status.code(),
        Some(22),
        "{}",
        String::from_utf8_lossy(&out_denied.stderr)
    );
    assert!(String::from_utf8_lossy(&out_denied.stderr).contains("egress refused"));

    // Control: without --allow-domain the same command has no network at all (exit 6: the
    // name cannot be resolved), so the success above is the proxy's doing.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["run", "--"])
        .arg(&curl)
        .args(["-sS", "--max-time", "20"])
        .arg(format!("http://allowed.test:{port}/run"))
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert_socket_dir_used_and_removed(&tmp, &String::from_utf8_lossy(&first.stderr));
    assert_socket_dir_used_and_removed(&tmp, &String::from_utf8_lossy(&out_denied.stderr));
}

/// `backend: srt` through `palisade serve`: the server runs under the real srt (found through
/// `PALISADE_SRT`), recorded as such in the audit; srt's proxy refuses a name outside the
/// allowlist and the sandbox has no direct route. srt resolves names with the system
/// resolver and refuses loopback addresses, so the fake `allowed.test` cannot be reached on a
/// machine without internet: the allowed case is covered by the golden settings test only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srt_backend_runs_the_server_under_srt_with_the_lists() {
    let Some(python) = prerequisites() else {
        return;
    };
    let srt = deps().join("node_modules/.bin/srt");
    if !srt.exists() || which::which("rg").is_err() {
        skip::skip(&format!(
            "srt ({}) or ripgrep is not installed",
            srt.display()
        ));
        return;
    }
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "net": {"command": python.display().to_string(), "args": [net_probe()],
                "sandbox": {"backend": "srt", "network": {"allowedDomains": ["allowed.test"]}}},
    });
    let calls = json!([
        http_get(
            "net__http_get",
            &format!("http://denied.test:{port}/x"),
            "env"
        ),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        call("net__proxy_env", json!({})),
    ]);
    let srt_s = srt.display().to_string();
    let r = serve(
        dir.path(),
        &python,
        servers,
        json!({}),
        calls,
        &[("PALISADE_SRT", &srt_s)],
    )
    .await;
    assert!(
        r.tools.contains(&"net__http_get".to_string()),
        "{:?}\n{}",
        r.tools,
        r.stderr
    );
    let text = |i: usize| r.calls[i]["text"].as_str().unwrap().to_string();
    assert_eq!(r.calls[0]["error"], true, "{}", text(0));
    assert!(!text(0).contains("origin saw"), "{}", text(0));
    assert_eq!(r.calls[1]["error"], true, "{}", text(1));
    // srt's own proxy variables, not palisade's bridges.
    assert!(text(2).contains("HTTP_PROXY=http://"), "{}", text(2));
    assert!(!text(2).contains("127.0.0.1:3128"), "{}", text(2));
    assert!(
        r.audit
            .iter()
            .all(|a| a["sandboxBackend"] == "srt" && a["sandboxed"] == true),
        "{:#?}",
        r.audit
    );
}
