//! The sandboxed process tree never outlives palisade: not when palisade dies, not when it
//! is sent SIGTERM or SIGINT (also while it supervises strace for --trace-denials).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::common::{palisade, text};

pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if text(&cmd).contains(needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Spawns `cmd` with its stdout piped and returns once it printed `up` (its command runs).
pub fn spawn_until_up(mut cmd: Command) -> std::process::Child {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "up\n");
    child
}

#[test]
fn the_whole_tree_dies_with_palisade() {
    let n = 800_000 + std::process::id() % 100_000;
    let (a, b) = (n.to_string(), (n + 1).to_string());
    let mut cmd = palisade();
    cmd.args(["run", "--", "/bin/sh", "-c"])
        .arg(format!("sleep {a} & sleep {b} & echo up; wait"));
    let mut child = spawn_until_up(cmd);
    // Both sleeps run on the host (seen from outside the PID namespace).
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = processes_with(&format!("sleep {a}"));
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !seen.is_empty(),
        "sandboxed sleep not visible from the host"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel kills the namespace when its init dies; give it time to reap (a wait for
    // an event, not a timing assertion).
    let mut left = Vec::new();
    for _ in 0..250 {
        left = [a.as_str(), b.as_str()]
            .iter()
            .flat_map(|x| processes_with(&format!("sleep {x}")))
            .collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// SIGTERM or SIGINT sent to `palisade run`'s pid ends the whole sandboxed tree, both when
/// palisade execs bwrap and when it supervises strace (--trace-denials, which used to leave
/// strace, bwrap and the command running and the trace log in TMPDIR), and the exit status
/// says a signal ended it.
#[test]
fn termination_signals_to_palisade_run_end_the_sandboxed_tree() {
    let mut n = 700_000 + std::process::id() % 50_000;
    for traced in [false, true] {
        for sig in [libc::SIGTERM, libc::SIGINT] {
            n += 1;
            let tmp = tempfile::tempdir().unwrap();
            let mut cmd = palisade();
            cmd.arg("run");
            if traced {
                cmd.arg("--trace-denials");
            }
            cmd.args(["--", "/bin/sh", "-c"])
                .arg(format!("sleep {n} & echo up; wait"))
                .env("TMPDIR", tmp.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            // A terminal's defaults: the test may have inherited SIGINT ignored (as a
            // background job does), which the sandbox would inherit too.
            // SAFETY: signal() is async-signal-safe; only dispositions are reset.
            unsafe {
                cmd.pre_exec(|| {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    libc::signal(libc::SIGTERM, libc::SIG_DFL);
                    Ok(())
                });
            }
            let mut child = spawn_until_up(cmd);
            let needle = format!("sleep {n}");
            assert!(!processes_with(&needle).is_empty(), "sleep not running");
            // SAFETY: kill() on the pid of the child this test spawned and has not reaped.
            assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
            let status = child.wait().unwrap();
            assert!(!status.success(), "traced={traced} sig={sig}: {status:?}");
            // The kernel tears the namespace down when its init dies; wait for that event
            // (bounded), never a timing assertion.
            let mut left = Vec::new();
            for _ in 0..250 {
                left = processes_with(&needle);
                if left.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(
                left.is_empty(),
                "traced={traced} sig={sig}: left behind {left:?}"
            );
            let files: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
            assert!(
                files.is_empty(),
                "traced={traced}: left in TMPDIR: {files:?}"
            );
        }
    }
}
