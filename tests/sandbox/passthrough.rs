//! What passes through the sandbox unchanged: the exit status and a death by signal,
//! stdin and stdout byte for byte, and only the environment palisade was told to give.

use std::io::{Read, Write};
use std::process::Stdio;

use crate::common::{palisade, text};

#[test]
fn exit_status_and_death_by_signal_propagate() {
    for (script, code) in [("exit 0", 0), ("exit 42", 42), ("kill -9 $$", 137)] {
        let st = palisade()
            .args(["run", "--", "/bin/sh", "-c", script])
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(code), "{script}");
    }
}

#[test]
fn stdin_and_stdout_pass_through_byte_for_byte() {
    let payload: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 256) as u8).collect();
    let mut child = palisade()
        .args(["run", "--", "/bin/cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let p = payload.clone();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&p).unwrap();
    });
    let mut got = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // As root, `run` truthfully warns that uid 0 is exempt from RLIMIT_NPROC (no cgroup in
    // `run`); that line is expected, anything else on stderr is not.
    let stderr = text(&out.stderr);
    let unexpected: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("kernel exempts uid 0 from RLIMIT_NPROC"))
        .collect();
    assert!(unexpected.is_empty(), "stderr: {stderr}");
    assert!(got == payload, "stdout differs ({} bytes)", got.len());
}

#[test]
fn the_sandbox_sees_only_the_given_environment() {
    let out = palisade()
        .args(["run", "--env", "GIVEN=yes", "--env", "PASSED"])
        .args([
            "--",
            "/bin/sh",
            "-c",
            "env | sort; tr '\\0' '\\n' < /proc/1/environ | sort",
        ])
        .env("PASSED", "through")
        .env("SECRET_TOKEN", "nope")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("GIVEN=yes") && s.contains("PASSED=through"),
        "{s}"
    );
    assert!(s.contains("TMPDIR=/tmp"), "{s}");
    assert!(!s.contains("SECRET_TOKEN"), "{s}");
    assert!(!s.contains("PALISADE_LOG_LEVEL"), "{s}");
}
