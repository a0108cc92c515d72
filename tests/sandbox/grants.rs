//! Filesystem grants as the sandbox enforces them: a read-only grant inside a read-write
//! one stays read-only, and a denyWrite path can be neither written nor created.

use std::path::Path;
use std::process::Command;

use crate::common::{palisade, text};

#[test]
fn a_read_only_grant_inside_a_read_write_grant_stays_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    let out = palisade()
        .args(["run", "--ro"])
        .arg(d.join("sub"))
        .arg("--rw")
        .arg(d)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "touch {0}/top; touch {0}/sub/inner; exit 0",
            d.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(d.join("top").exists(), "rw grant not writable");
    assert!(
        !d.join("sub/inner").exists(),
        "ro grant inside rw was writable"
    );
    assert!(text(&out.stderr).contains("Read-only file system"));
}

/// denyWrite on the native backend: inside a read-write grant, a denied file cannot be
/// overwritten, removed or renamed, and a denied path that does not exist cannot be created
/// (not even through its missing parent); other writes still work. The same script run
/// without the sandbox does all of it (the control).
#[test]
fn deny_write_paths_can_be_neither_written_nor_created() {
    let script = |d: &Path| {
        format!(
            "echo pwned > {0}/secret; rm -f {0}/keep; mv {0}/keep2 {0}/moved; \
             mkdir -p {0}/later/sub && echo pwned > {0}/later/sub/file; \
             echo pwned > {0}/.env; echo fine > {0}/other; exit 0",
            d.display()
        )
    };
    let setup = || {
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(dir.path()).unwrap();
        for f in ["secret", "keep", "keep2"] {
            std::fs::write(d.join(f), "orig").unwrap();
        }
        (dir, d)
    };

    // Control: unsandboxed, every write lands.
    let (_c, cd) = setup();
    let st = Command::new("/bin/sh")
        .args(["-c", &script(&cd)])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read_to_string(cd.join("secret")).unwrap(),
        "pwned\n"
    );
    assert!(!cd.join("keep").exists() && cd.join("moved").exists());
    assert_eq!(
        std::fs::read_to_string(cd.join("later/sub/file")).unwrap(),
        "pwned\n"
    );
    assert!(cd.join(".env").is_file());

    // Sandboxed with denyWrite on the existing files, a missing nested path and a missing
    // file: none of them changes; the undenied write still lands.
    let (_s, d) = setup();
    let out = palisade()
        .arg("run")
        .arg("--rw")
        .arg(&d)
        .args(["--deny-write", "secret", "--deny-write", "keep"])
        .args(["--deny-write", "keep2", "--deny-write", "later/sub/file"])
        .args(["--deny-write", ".env"])
        .current_dir(&d)
        .args(["--", "/bin/sh", "-c", &script(&d)])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(d.join("secret")).unwrap(), "orig");
    assert_eq!(std::fs::read_to_string(d.join("keep")).unwrap(), "orig");
    assert_eq!(std::fs::read_to_string(d.join("keep2")).unwrap(), "orig");
    assert!(!d.join("moved").exists(), "{err}");
    // The missing paths exist only as empty read-only placeholders.
    for p in ["later", ".env"] {
        let md = std::fs::symlink_metadata(d.join(p)).unwrap();
        assert!(md.is_file() && md.len() == 0, "{p}: {md:?}\n{err}");
    }
    assert!(!d.join("later/sub/file").exists());
    assert_eq!(std::fs::read_to_string(d.join("other")).unwrap(), "fine\n");
    assert!(err.contains("Read-only file system"), "{err}");
}

/// A server whose venv lies in its writable root rewrites the venv's `pyvenv.cfg` so that
/// its `home` names a prefix of the host's (one with a `lib`); at its next launch that prefix
/// must not be granted, under either tier: the closure does not follow what the server can
/// write out of the grants (and says so). Before, the second launch read the prefix's secret.
#[test]
fn a_venv_the_server_rewrote_grants_nothing_new_at_the_next_launch() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    let prefix = d.join("secret-prefix");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    let secret = prefix.join("lib/secret.txt");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let work = d.join("work");
    std::fs::create_dir(&work).unwrap();
    let made = Command::new(crate::common::PY)
        .args(["-m", "venv", "--without-pip"])
        .arg(work.join(".venv"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let server = work.join("server.py");
    std::fs::write(
        &server,
        "import pathlib, sys\n\
         try:\n    print('READ:', pathlib.Path(sys.argv[1]).read_text())\n\
         except OSError as e:\n    print('blocked:', e.strerror)\n\
         pathlib.Path(sys.argv[2]).write_text('home = ' + sys.argv[3] + '\\n')\n",
    )
    .unwrap();
    for tier in ["bwrap", "landlock"] {
        let launch = || {
            palisade()
                .args(["run", "--backend", tier, "--rw"])
                .arg(&work)
                .arg("--")
                .arg(work.join(".venv/bin/python"))
                .arg(&server)
                .arg(&secret)
                .arg(work.join(".venv/pyvenv.cfg"))
                .arg(prefix.join("bin"))
                .output()
                .unwrap()
        };
        let first = launch();
        let second = launch();
        let (out1, out2) = (text(&first.stdout), text(&second.stdout));
        let err2 = text(&second.stderr);
        assert!(
            first.status.success() && out1.contains("blocked:"),
            "{tier}, first launch: {out1}\n{}",
            text(&first.stderr)
        );
        assert!(
            second.status.success() && out2.contains("blocked:") && !out2.contains("TOP-SECRET"),
            "{tier}: the rewritten venv granted the prefix: {out2}\n{err2}"
        );
        assert!(
            err2.contains("lies where the server can write"),
            "{tier}: the prefix left out is said: {err2}"
        );
        // Control: the same `home`, written by the user into a venv the server can only
        // read, is followed, and the prefix's secret is read: the attack's cfg is one the
        // closure honours, and only who could write it changed the outcome.
        let control = palisade()
            .args(["run", "--backend", tier, "--ro"])
            .arg(&work)
            .arg("--")
            .arg(work.join(".venv/bin/python"))
            .arg(&server)
            .arg(&secret)
            .arg("/dev/null")
            .arg(prefix.join("bin"))
            .output()
            .unwrap();
        assert!(
            text(&control.stdout).contains("READ: TOP-SECRET"),
            "{tier}, control: {}\n{}",
            text(&control.stdout),
            text(&control.stderr)
        );
        // Reset the venv for the next tier.
        std::fs::write(work.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    }
}

/// Adversarial review of stop 43: under bwrap, a protected path deeper than its read-write
/// grant (`.git/hooks`, `.git/config`) could be moved away with the directory above it (`mv
/// .git .git-old`, then a fresh `.git` whose hooks the host's git runs). Both tiers now keep
/// `.git` where it is. The control renames a sibling directory in the same grant under
/// bwrap (Landlock, which carves the grant around `.git`, refuses any rename in it).
#[test]
fn the_directory_above_a_protected_path_cannot_be_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(d.join(".git/hooks")).unwrap();
    std::fs::write(d.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir(d.join("other")).unwrap();
    for tier in ["bwrap", "landlock"] {
        let mv = |from: &str, to: &str| {
            palisade()
                .args(["run", "--backend", tier, "--rw"])
                .arg(&d)
                .args(["--", "/bin/mv"])
                .arg(d.join(from))
                .arg(d.join(to))
                .output()
                .unwrap()
        };
        if tier == "bwrap" {
            let control = mv("other", "other2");
            assert!(
                control.status.success() && d.join("other2").is_dir(),
                "{tier}, control: {}",
                text(&control.stderr)
            );
            std::fs::rename(d.join("other2"), d.join("other")).unwrap();
        }
        let attack = mv(".git", ".git-old");
        // mv itself ran and was refused (not palisade refusing to launch it).
        assert!(
            !attack.status.success() && text(&attack.stderr).contains("cannot move"),
            "{tier}: .git was moved away, or mv never ran: {}",
            text(&attack.stderr)
        );
        assert!(d.join(".git/hooks").is_dir() && !d.join(".git-old").exists());
    }
}

/// Adversarial review of stop 43: `denyWrite W` with a read-write grant of `W/sub` (and no
/// grant of W) left `W/sub` writable under bwrap; Landlock refused. Control: the same write
/// without the deny.
#[test]
fn a_read_write_grant_below_a_denied_path_is_not_writable() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    let sub = d.join("w/sub");
    std::fs::create_dir_all(&sub).unwrap();
    for tier in ["bwrap", "landlock"] {
        let touch = |name: &str, deny: bool| {
            let mut c = palisade();
            c.args(["run", "--backend", tier, "--rw"]).arg(&sub);
            if deny {
                c.arg("--deny-write").arg(d.join("w"));
            }
            c.args(["--", "/bin/touch"])
                .arg(sub.join(name))
                .output()
                .unwrap()
        };
        let control = touch("control", false);
        assert!(
            control.status.success() && sub.join("control").exists(),
            "{tier}, control: {}",
            text(&control.stderr)
        );
        let denied = touch(tier, true);
        // touch itself ran and was refused (not palisade refusing to launch it).
        assert!(
            !sub.join(tier).exists() && text(&denied.stderr).contains("cannot touch"),
            "{tier}: written under a denied directory, or touch never ran: {}",
            text(&denied.stderr)
        );
    }
}

/// Review of stop 43: a read-only grant nested in a read-write one (`--rw proj --ro
/// proj/vendor/lib`) could be swapped for a directory the server wrote, by renaming its
/// parent (`mv proj/vendor proj/v.old; mkdir -p proj/vendor/lib`). The parent is pinned
/// under bwrap; Landlock refuses the rename as it did. Control: a sibling is renamed under
/// bwrap.
#[test]
fn the_parent_of_a_nested_read_only_grant_cannot_be_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(d.join("vendor/lib")).unwrap();
    std::fs::create_dir(d.join("other")).unwrap();
    for tier in ["bwrap", "landlock"] {
        let mv = |from: &str, to: &str| {
            palisade()
                .args(["run", "--backend", tier, "--rw"])
                .arg(&d)
                .arg("--ro")
                .arg(d.join("vendor/lib"))
                .args(["--", "/bin/mv"])
                .arg(d.join(from))
                .arg(d.join(to))
                .output()
                .unwrap()
        };
        if tier == "bwrap" {
            let control = mv("other", "other2");
            assert!(
                control.status.success() && d.join("other2").is_dir(),
                "{tier}, control: {}",
                text(&control.stderr)
            );
            std::fs::rename(d.join("other2"), d.join("other")).unwrap();
        }
        let attack = mv("vendor", "v.old");
        assert!(
            !attack.status.success() && text(&attack.stderr).contains("cannot move"),
            "{tier}: vendor was moved away, or mv never ran: {}",
            text(&attack.stderr)
        );
        assert!(d.join("vendor/lib").is_dir() && !d.join("v.old").exists());
    }
}
