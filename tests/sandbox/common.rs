//! What every sandbox test needs: the palisade binary (quiet), the hostile program and the
//! Python that runs it, the test dependencies, a lossy text view of output, and the marker a
//! refused start must never leave.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const PY: &str = "/usr/bin/python3";

pub fn palisade() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_palisade"));
    c.env("PALISADE_LOG_LEVEL", "warn");
    // Remembered trials stay in the build tree, not in the machine's /run/palisade.
    let runtime = Path::new(env!("CARGO_TARGET_TMPDIR")).join("palisade-runtime");
    c.env("PALISADE_RUNTIME_DIR", runtime);
    c
}

pub fn hostile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks/hostile.py")
}

pub fn test_deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn marker_path(dir: &Path) -> PathBuf {
    dir.join("started")
}
