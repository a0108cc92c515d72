//! Which tier runs, and what it does, when bubblewrap is missing or cannot make a user
//! namespace: enforce refuses, warn runs unsandboxed and says so, auto picks Landlock (where
//! the attacks still fail); and `run --backend landlock` passes on status and signals and
//! leaves no scratch.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{hostile, marker_path, palisade, text, PY};
use crate::hostile::{attack, scene, ATTACKS, HOST_DEPENDENT};
use crate::skip;
use crate::teardown::{processes_with, spawn_until_up};

#[test]
fn enforce_without_bubblewrap_refuses_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = palisade()
        .args(["run", "--backend", "bwrap", "--rw"])
        .arg(dir.path())
        .args(["--", "/usr/bin/touch"])
        .arg(marker_path(dir.path()))
        .env("PALISADE_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("PALISADE_BWRAP") && err.contains("fix:"),
        "{err}"
    );
    assert!(!marker_path(dir.path()).exists());
}

#[test]
fn warn_without_bubblewrap_runs_unsandboxed_and_says_so() {
    let sc = scene();
    let secret = sc.cfg["secret"].as_str().unwrap().to_string();
    // Once with the override pointing nowhere, once with a PATH that has no bwrap.
    let bin = sc.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/usr/bin/cat", bin.join("cat")).unwrap();
    for (key, value) in [
        ("PALISADE_BWRAP", "/nonexistent/bwrap".to_string()),
        ("PATH", bin.display().to_string()),
    ] {
        let out = palisade()
            .args([
                "run",
                "--backend",
                "bwrap",
                "--sandbox-policy",
                "warn",
                "--",
                "cat",
            ])
            .arg(&secret)
            .env(key, &value)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(out.status.success(), "{key}: {err}");
        assert!(text(&out.stdout).starts_with("palisade-marker"), "{key}");
        assert!(err.contains("WITHOUT ANY SANDBOX"), "{key}: {err}");
        assert!(err.contains("bubblewrap") || err.contains("bwrap"), "{err}");
    }
    // And with bwrap present, warn mode still sandboxes.
    let out = palisade()
        .args(["run", "--sandbox-policy", "warn", "--", "/usr/bin/cat"])
        .arg(&secret)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        !text(&out.stderr).contains("WARNING"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn auto_without_bubblewrap_runs_under_landlock_and_says_which_tier() {
    let sc = scene();
    let secret = sc.cfg["secret"].as_str().unwrap().to_string();
    let work = sc.dir.path().join("work");
    let out = palisade()
        .env("PALISADE_LOG_LEVEL", "info")
        .args(["run", "--rw"])
        .arg(&work)
        .args([
            "--",
            "/bin/sh",
            "-c",
            "cat \"$1\"; echo made > \"$2/made\"",
            "sh",
        ])
        .arg(&secret)
        .arg(&work)
        .env("PALISADE_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!text(&out.stdout).contains("palisade-marker"), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains("sandboxed by landlock"), "{err}");
    assert!(err.contains("PALISADE_BWRAP"), "the log says why: {err}");
    assert!(err.contains("host processes are visible in /proc"), "{err}");
    assert_eq!(
        std::fs::read_to_string(work.join("made")).unwrap(),
        "made\n",
        "the grant works"
    );
}

/// Runs `argv` inside a bubblewrap sandbox whose user namespace forbids nesting: what a
/// container or an agent's own sandbox without user namespaces looks like to palisade
/// (bubblewrap then fails with ENOSPC). `None` when this host cannot make one.
pub fn without_userns(argv: &[&std::ffi::OsStr]) -> Option<Command> {
    let probe = Command::new("bwrap")
        .args([
            "--unshare-user",
            "--disable-userns",
            "--dev-bind",
            "/",
            "/",
            "--",
        ])
        .args([
            "bwrap",
            "--unshare-user",
            "--dev-bind",
            "/",
            "/",
            "--",
            "true",
        ])
        .output()
        .ok()?;
    if probe.status.success() || !text(&probe.stderr).contains("ENOSPC") {
        return None;
    }
    let mut c = Command::new("bwrap");
    c.args([
        "--unshare-user",
        "--disable-userns",
        "--dev-bind",
        "/",
        "/",
        "--",
    ])
    .args(argv);
    Some(c)
}

#[test]
fn without_user_namespaces_auto_picks_landlock_and_the_attacks_fail() {
    let bin = Path::new(env!("CARGO_BIN_EXE_palisade")).as_os_str();
    let Some(mut check) = without_userns(&[bin, "check".as_ref(), "--json".as_ref()]) else {
        skip::host_skip(
            "sandbox::without_user_namespaces_auto_picks_landlock_and_the_attacks_fail",
            "bwrap cannot make a sandbox without nested user namespaces here",
        );
        return;
    };
    let out = check.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["default_tier"]["backend"], "landlock", "{report}");
    assert_eq!(report["default_server"]["status"], "sandboxed", "{report}");
    assert!(
        report["default_tier"]["why"]
            .as_str()
            .unwrap()
            .contains("ENOSPC"),
        "{report}"
    );

    let sc = scene();
    let d = sc.dir.path();
    let cfg = sc.cfg.to_string();
    let (py, host) = (PY.as_ref(), hostile());
    // Control: the nested environment itself lets every attack through (but those it
    // refuses on its own, such as a further user namespace).
    let mut control = without_userns(&[py, host.as_os_str(), cfg.as_ref()]).unwrap();
    control.env("HOME", d.join("home"));
    let plain = attack(&sc, control);
    let (ro, work) = (d.join("ro"), d.join("work"));
    let mut run = without_userns(&[
        bin,
        "run".as_ref(),
        "--ro".as_ref(),
        ro.as_os_str(),
        "--rw".as_ref(),
        work.as_os_str(),
        "--".as_ref(),
        py,
        host.as_os_str(),
        cfg.as_ref(),
    ])
    .unwrap();
    run.env("HOME", d.join("home"));
    let boxed = attack(&sc, run);
    let mut failures = Vec::new();
    let mut controls = 0;
    for (name, _) in ATTACKS {
        let (c_ok, c_detail) = plain[*name].clone();
        let (s_ok, s_detail) = boxed[*name].clone();
        if c_ok {
            controls += 1;
        } else if !HOST_DEPENDENT.contains(name) {
            failures.push(format!("control for {name} failed: {c_detail}"));
        }
        let beyond = *name == "see_host_process";
        match (s_ok, beyond) {
            (true, false) => {
                failures.push(format!("ESCAPE under auto/landlock {name}: {s_detail}"))
            }
            (false, true) => {
                failures.push(format!("{name} is beyond Landlock yet blocked: {s_detail}"))
            }
            _ => {}
        }
    }
    assert!(controls >= 12, "too few controls succeeded: {plain:?}");
    assert!(failures.is_empty(), "{}\n{boxed:?}", failures.join("\n"));
}

/// The Landlock ABI `palisade check` reports, or `None` (reported as a host skip).
pub fn landlock_abi(test: &str) -> Option<u64> {
    let abi = skip::landlock_abi();
    if abi.is_none() {
        skip::host_skip(test, "Landlock is not available on this kernel");
    }
    abi
}

/// `run --backend landlock` spawns and waits instead of exec'ing (its private HOME/TMPDIR
/// must be removed afterwards): the exit status and a death by signal come back, SIGTERM and
/// SIGHUP sent to palisade end the command (128+N), the command starts with no signal
/// blocked (regression: palisade blocks them to wait with sigwait, and a child that
/// inherited that mask ignored the forwarded SIGTERM and hung), HOME and TMPDIR are private
/// and writable, and nothing is left in palisade's TMPDIR.
#[test]
fn landlock_run_passes_on_status_and_signals_and_leaves_no_scratch() {
    let test = "sandbox::landlock_run_passes_on_status_and_signals_and_leaves_no_scratch";
    if landlock_abi(test).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let real_tmp = std::fs::canonicalize(tmp.path()).unwrap();
    let run = |argv: &[&str]| {
        let mut c = palisade();
        c.env("TMPDIR", tmp.path())
            .args(["run", "--backend", "landlock", "--"])
            .args(argv);
        c
    };
    for (script, code) in [("exit 0", 0), ("exit 42", 42), ("kill -9 $$", 137)] {
        let st = run(&["/bin/sh", "-c", script]).status().unwrap();
        assert_eq!(st.code(), Some(code), "{script}");
    }

    let out = run(&[
        "/bin/sh",
        "-c",
        "echo h > \"$HOME/f\" && echo t > \"$TMPDIR/f\" && cat \"$HOME/f\" \"$TMPDIR/f\" \
         && echo \"$HOME\" && echo \"$TMPDIR\"",
    ])
    .output()
    .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[..2], ["h", "t"], "HOME and TMPDIR are writable");
    let (home, tmpdir) = (Path::new(lines[2]), Path::new(lines[3]));
    assert_ne!(home, tmpdir);
    for d in [home, tmpdir] {
        assert!(
            d.starts_with(&real_tmp),
            "private, under palisade's TMPDIR: {d:?}"
        );
    }

    let out = run(&["/bin/grep", "^SigBlk", "/proc/self/status"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "SigBlk:\t0000000000000000");

    let mut n = 600_000 + std::process::id() % 50_000;
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        n += 1;
        let mut cmd = run(&["/bin/sh", "-c", &format!("echo up; exec sleep {n}")]);
        cmd.stderr(Stdio::null());
        let mut child = spawn_until_up(cmd);
        // Safety net so a command that ignores the forwarded signal fails the test instead
        // of hanging it (palisade then dies by SIGKILL, not with 128+N).
        let pid = child.id() as i32;
        let sleeper = format!("sleep {n}");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watched = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            if watched.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            for p in processes_with(&sleeper) {
                // SAFETY: kill() on a process this test started.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
            // SAFETY: kill() on the pid of the child this test spawned.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        // SAFETY: kill() on the pid of the child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
        let status = child.wait().unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}: {status:?}");
    }

    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// `run --backend landlock` starts its command without forking palisade's memory (its own
/// `clone`, not `Command`): the command must start as `Command` started it. A file without
/// a `#!` line runs under `/bin/sh` (as `execvp` runs it), SIGPIPE is back to its default
/// (palisade ignores it), the arguments and working directory are the command's.
#[test]
fn landlock_run_starts_the_command_as_command_did() {
    let test = "sandbox::landlock_run_starts_the_command_as_command_did";
    if landlock_abi(test).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("plain");
    std::fs::write(
        &script,
        "echo \"$0|$1|$2\"; grep -E '^Sig(Ign|Cgt)' /proc/self/status; exit 9\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = palisade()
        .args(["run", "--backend", "landlock", "--ro"])
        .arg(dir.path())
        .args(["--cwd"])
        .arg(dir.path())
        .arg("--")
        .arg(&script)
        .args(["a b", "c"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], format!("{}|a b|c", script.display()));
    // dash ignores nothing and catches nothing of its own here; SIGPIPE (bit 12) must not
    // be ignored as it is in palisade.
    let ign = lines
        .iter()
        .find_map(|l| l.strip_prefix("SigIgn:\t"))
        .unwrap();
    let ign = u64::from_str_radix(ign.trim(), 16).unwrap();
    assert_eq!(
        ign & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {ign:#x}"
    );
}
