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
pub fn skip(reason: &str) {
    if std::env::var_os("PALISADE_TEST_STRICT").is_some_and(|v| v == "1") {
        panic!("prerequisite missing under PALISADE_TEST_STRICT=1: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}
