//! `palisade run` remembers a passed trial sandbox for this boot and context: the next run
//! starts no trial; a record made stale by a bubblewrap that broke afterwards fails closed
//! (bubblewrap's own error, nothing runs); a record in a directory others can reach is not
//! trusted; `palisade check` takes back a pass when its fresh trial fails. A real bubblewrap behind a wrapper that logs each call and can be told to fail.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{marker_path, palisade, text};

/// The lines the wrapper logged: one per bubblewrap call.
fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A trial is the smallest sandbox, `bwrap ... --ro-bind / / ... -- true`.
fn is_trial(call: &str) -> bool {
    call.contains("--ro-bind / / ") && call.ends_with("-- true")
}

#[test]
fn a_passed_trial_is_remembered_and_a_stale_record_fails_closed() {
    if !Path::new("/usr/bin/bwrap").exists() {
        panic!("this test needs bubblewrap at /usr/bin/bwrap (scripts/install-test-deps.sh)");
    }
    let dir = tempfile::tempdir().unwrap();
    let (log, broken, runtime) = (
        dir.path().join("calls"),
        dir.path().join("broken"),
        dir.path().join("runtime"),
    );
    let wrapper = dir.path().join("bwrap");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nif [ -e '{}' ] && [ \"$1\" != --version ]; then\n  \
             echo 'bwrap: Creating new namespace failed: No space left on device' >&2\n  \
             exit 1\nfi\nexec /usr/bin/bwrap \"$@\"\n",
            log.display(),
            broken.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |argv: &[&str]| {
        palisade()
            .args(["run", "--backend", "bwrap", "--rw"])
            .arg(dir.path())
            .arg("--")
            .args(argv)
            .env("PALISADE_BWRAP", &wrapper)
            .env("PALISADE_RUNTIME_DIR", &runtime)
            .output()
            .unwrap()
    };

    // The first run proves the sandbox with a trial, and records the pass.
    let out = run(&["/usr/bin/true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = calls(&log);
    assert_eq!(first.len(), 2, "a trial, then the launch: {first:?}");
    assert!(is_trial(&first[0]) && !is_trial(&first[1]), "{first:?}");
    let mode = std::fs::metadata(&runtime).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the record's directory is private");
    let records: Vec<_> = std::fs::read_dir(&runtime)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        records.len() == 1 && records[0].starts_with("trial-"),
        "one record, no partial file left: {records:?}"
    );

    // The second run in the same context starts no trial.
    let out = run(&["/usr/bin/true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let second = calls(&log);
    assert_eq!(second.len(), 3, "the launch alone: {second:?}");
    assert!(!is_trial(&second[2]), "{second:?}");

    // bubblewrap breaks in a way the record cannot see: the launch fails with bubblewrap's
    // own error and the command never runs, sandboxed or not.
    std::fs::write(&broken, "").unwrap();
    let marker = marker_path(dir.path());
    let out = run(&["/usr/bin/touch", marker.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        !marker.exists(),
        "the command ran although bubblewrap failed"
    );
    assert_eq!(calls(&log).len(), 4, "the stale record skipped the trial");

    // A record in a directory others can reach is not trusted: the trial runs again, and
    // this time it fails, so enforce refuses before the launch and says why.
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&["/usr/bin/touch", marker.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let fourth = calls(&log);
    assert_eq!(fourth.len(), 5, "only the trial ran: {fourth:?}");
    assert!(is_trial(&fourth[4]), "{fourth:?}");
    assert!(!marker.exists());

    // `palisade check` runs a fresh trial; when it fails it takes back the recorded pass.
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_file(&broken).unwrap();
    assert!(run(&["/usr/bin/true"]).status.success());
    let records = || std::fs::read_dir(&runtime).unwrap().count();
    assert_eq!(records(), 1, "a pass recorded again");
    std::fs::write(&broken, "").unwrap();
    let out = palisade()
        .arg("check")
        .env("PALISADE_BWRAP", &wrapper)
        .env("PALISADE_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("No space left on device"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(records(), 0, "check removed the stale pass");
}
