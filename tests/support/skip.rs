//! Skipping a test whose prerequisite is missing, said out loud.
//!
//! Locally a missing tool (bwrap, socat, curl, strace, the test venv) skips the test with a
//! message. Under `PALISADE_TEST_STRICT=1`, which scripts/test.sh sets after installing every
//! prerequisite, the same miss fails the test: libtest hides a passing test's stderr, so a
//! skip in CI would otherwise look exactly like a pass.
//!
//! Not for what the host itself refuses (an attack whose unprotected control fails): those
//! are facts about the kernel, reported by the suites that meet them.

/// Says why the test is skipped, or fails it when skips are not allowed.
#[allow(dead_code)] // a test binary may meet only host skips
pub fn skip(reason: &str) {
    if std::env::var_os("PALISADE_TEST_STRICT").is_some_and(|v| v == "1") {
        panic!("prerequisite missing under PALISADE_TEST_STRICT=1: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}

/// Skips a test that needs a host feature palisade itself reports on (a cgroup palisade can
/// make, see `palisade check`), not a prerequisite scripts/test.sh installs: never a failure,
/// but recorded in target/tmp/host-skips.txt, which scripts/test.sh prints after the suite.
#[allow(dead_code)] // not every test binary that includes this module meets a host skip
pub fn host_skip(test: &str, reason: &str) {
    use std::io::Write as _;
    eprintln!("SKIPPED (host): {test}: {reason}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("host-skips.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{test}: {reason}");
    }
}

/// The Landlock ABI `palisade check --json` reports for this kernel, `None` without Landlock.
/// Each caller decides whether a missing or too old ABI is a skip or a host skip.
#[allow(dead_code)] // not every test binary that includes this module needs Landlock
pub fn landlock_abi() -> Option<u64> {
    landlock_abi_of(env!("CARGO_BIN_EXE_palisade").as_ref())
}

/// `landlock_abi` as `palisade` reports it (the attack table inside the container runs the
/// image's binary, not this build's).
#[allow(dead_code)]
pub fn landlock_abi_of(palisade: &std::ffi::OsStr) -> Option<u64> {
    machine_of(palisade)["landlock"]["abi"].as_u64()
}

/// Whether the palisade binary at `palisade` can check a Landlock server's connects itself
/// here (`connect_mediation` in `palisade check --json`).
#[allow(dead_code)] // the attack table's only
pub fn connect_checks_of(palisade: &std::ffi::OsStr) -> bool {
    machine_of(palisade)["connect_mediation"] == true
}

/// The machine report of `palisade check --json`.
fn machine_of(palisade: &std::ffi::OsStr) -> serde_json::Value {
    let out = std::process::Command::new(palisade)
        .args(["check", "--json"])
        .output()
        .expect("run palisade check --json");
    let mut report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("palisade check --json prints JSON");
    report["machine"].take()
}
