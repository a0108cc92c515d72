//! `palisade run` remembers a passed trial sandbox in one context: the next run starts no
//! trial; a change the fingerprint sees (bubblewrap's file) runs it again; a record made stale
//! by a bubblewrap that broke afterwards fails closed, under `--backend bwrap` and `auto`
//! alike (bubblewrap's own error, the command does not run); a record in a directory others
//! can reach is not trusted; `palisade check` takes a pass back when its fresh trial fails.
//! A real bubblewrap behind a wrapper that logs each call and can be told to fail.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{marker_path, palisade, text};
use crate::skip;

/// The bubblewrap calls the wrapper logged, one line each.
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

fn records(runtime: &Path) -> Vec<String> {
    std::fs::read_dir(runtime)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

struct Scene {
    dir: tempfile::TempDir,
    wrapper: PathBuf,
    log: PathBuf,
    broken: PathBuf,
    runtime: PathBuf,
}

impl Scene {
    /// `palisade run --backend BACKEND -- ARGV` with the wrapper as bubblewrap.
    fn run(&self, backend: &str, argv: &[&str]) -> Output {
        palisade()
            .args(["run", "--backend", backend, "--rw"])
            .arg(self.dir.path())
            .arg("--")
            .args(argv)
            .env("PALISADE_BWRAP", &self.wrapper)
            .env("PALISADE_RUNTIME_DIR", &self.runtime)
            .output()
            .unwrap()
    }

    /// The calls made since `before` calls had been logged.
    fn new_calls(&self, before: usize) -> Vec<String> {
        calls(&self.log).split_off(before)
    }
}

fn scene(bwrap: &Path) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let (log, broken, runtime) = (
        dir.path().join("calls"),
        dir.path().join("broken"),
        dir.path().join("runtime"),
    );
    let wrapper = dir.path().join("bwrap");
    // `--version` keeps working when "broken": bubblewrap is there, its namespaces are not.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nif [ -e '{}' ] && [ \"$1\" != --version ]; then\n  \
             echo 'bwrap: Creating new namespace failed: No space left on device' >&2\n  \
             exit 1\nfi\nexec '{}' \"$@\"\n",
            log.display(),
            broken.display(),
            bwrap.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    Scene {
        dir,
        wrapper,
        log,
        broken,
        runtime,
    }
}

#[test]
fn a_passed_trial_is_remembered_and_a_stale_record_fails_closed() {
    let Ok(bwrap) = which::which("bwrap") else {
        skip::skip("bubblewrap is not installed (scripts/install-test-deps.sh)");
        return;
    };
    let sc = scene(&bwrap);

    // The first run proves the sandbox with a trial, and records the pass.
    let out = sc.run("bwrap", &["/usr/bin/true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = sc.new_calls(0);
    assert_eq!(first.len(), 2, "a trial, then the launch: {first:?}");
    assert!(is_trial(&first[0]) && !is_trial(&first[1]), "{first:?}");
    let mode = std::fs::metadata(&sc.runtime).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the record's directory is private");
    let kept = records(&sc.runtime);
    assert!(
        kept.len() == 1 && kept[0].starts_with("trial-"),
        "one record, no partial file left: {kept:?}"
    );

    // The second run in the same context starts no trial.
    let out = sc.run("bwrap", &["/usr/bin/true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let second = sc.new_calls(2);
    assert!(second.len() == 1 && !is_trial(&second[0]), "{second:?}");

    // bubblewrap's file changes (its change time, here): another context, a trial again.
    // The command is the one the broken launches below must not run: here, with bubblewrap
    // working, it runs and leaves its marker (the control).
    let perms = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(&sc.wrapper, perms).unwrap();
    let marker = marker_path(sc.dir.path());
    let out = sc.run("bwrap", &["/usr/bin/touch", marker.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        marker.exists(),
        "the control: the command runs in a working sandbox"
    );
    std::fs::remove_file(&marker).unwrap();
    let third = sc.new_calls(3);
    assert!(third.len() == 2 && is_trial(&third[0]), "{third:?}");

    // bubblewrap breaks in a way the record cannot see: the launch fails with bubblewrap's
    // own error and the command never runs, sandboxed or not, with either backend.
    std::fs::write(&sc.broken, "").unwrap();
    for (backend, before) in [("bwrap", 5), ("auto", 6)] {
        let out = sc.run(backend, &["/usr/bin/touch", marker.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{backend}: {err}");
        assert!(err.contains("No space left on device"), "{backend}: {err}");
        assert!(
            !marker.exists(),
            "{backend}: the command ran though bubblewrap failed"
        );
        let made = sc.new_calls(before);
        assert!(
            made.len() == 1 && !is_trial(&made[0]),
            "{backend}: {made:?}"
        );
    }

    // A record in a directory others can reach is not trusted: the trial runs again, and this
    // time it fails, so enforce refuses before the launch and says why.
    std::fs::set_permissions(&sc.runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = sc.run("bwrap", &["/usr/bin/touch", marker.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let refused = sc.new_calls(7);
    assert!(refused.len() == 1 && is_trial(&refused[0]), "{refused:?}");
    assert!(!marker.exists());

    // `palisade check` runs a fresh trial; when it fails it takes the recorded pass back.
    std::fs::set_permissions(&sc.runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let before = records(&sc.runtime);
    assert_eq!(
        before.len(),
        2,
        "a pass per bubblewrap file seen: {before:?}"
    );
    let out = palisade()
        .arg("check")
        .env("PALISADE_BWRAP", &sc.wrapper)
        .env("PALISADE_RUNTIME_DIR", &sc.runtime)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(report.contains("No space left on device"), "{report}");
    let after = records(&sc.runtime);
    assert_eq!(
        after.len(),
        1,
        "check took back its context's pass: {after:?}"
    );
    assert!(before.contains(&after[0]), "{before:?} {after:?}");
}
