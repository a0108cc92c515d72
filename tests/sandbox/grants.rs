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
