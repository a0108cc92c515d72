//! The shape of the house (issue 18): no two modules of the gateway import each other,
//! directly or around a circle. `scripts/module_cycles.py` reads the `use` paths of every
//! module under `src/gateway`; this runs it on the tree the test was built from.

use std::process::Command;

#[test]
fn the_gateway_has_no_import_cycles() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/module_cycles.py"))
        .arg("--check")
        .arg(root)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "import cycles among the gateway's modules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
