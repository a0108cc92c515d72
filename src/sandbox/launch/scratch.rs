//! The Landlock tier's private HOME and TMPDIR: two fresh host directories per launch,
//! `$TMPDIR/palisade-NAME-home-XXXX` and `$TMPDIR/palisade-NAME-tmp-XXXX`, created 0700 and
//! removed with everything in them when the launch is dropped.
//!
//! Cheap on purpose (it is on every `palisade run --backend landlock`, and a `mkdir` on an
//! ext4 `/tmp` is one of the dearest steps of a launch): two `mkdir`s with the mode given at
//! creation (no `chmod` after, no parent directory to hold them), one path resolution (of
//! `$TMPDIR`), and on removal two `rmdir`s when the command left nothing behind, the
//! recursive removal only when it did. Creates directories only. Never: reuse a directory
//! (each launch gets fresh ones, random names made by `mkdir` itself) or leave one behind
//! after the launch is dropped.

use std::path::{Path, PathBuf};

use super::prepared::{io, LaunchError};

/// The private HOME and TMPDIR of one Landlock launch: host directories created 0700 and
/// removed (with everything the server left in them) when the launch is dropped.
#[derive(Debug)]
pub struct Scratch {
    /// The private HOME, symlinks resolved (the Landlock rules and the environment name
    /// real paths).
    home: PathBuf,
    /// The private TMPDIR, symlinks resolved.
    tmp: PathBuf,
}

impl Scratch {
    pub(super) fn create(name: &str) -> Result<Scratch, LaunchError> {
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        // Resolved once: the directories made in it are real directories, so their paths
        // under the resolved parent are real paths too.
        let parent = std::fs::canonicalize(std::env::temp_dir())
            .map_err(|e| io("cannot resolve TMPDIR for the private HOME/TMPDIR", e))?;
        // HOME is removed again if TMPDIR cannot be made (the TempDir owns it until `keep`).
        let home = fresh_dir(&parent, &format!("palisade-{safe}-home-"))?;
        let tmp = fresh_dir(&parent, &format!("palisade-{safe}-tmp-"))?;
        Ok(Scratch {
            home: home.keep(),
            tmp: tmp.keep(),
        })
    }

    /// The private HOME (a real path).
    pub fn home(&self) -> PathBuf {
        self.home.clone()
    }

    /// The private TMPDIR (a real path).
    pub fn tmp(&self) -> PathBuf {
        self.tmp.clone()
    }
}

/// A new directory in `parent` named `prefix` plus random characters, made 0700 by `mkdir`
/// itself: never visible to others, not even for a moment.
fn fresh_dir(parent: &Path, prefix: &str) -> Result<tempfile::TempDir, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The common case, nothing left inside: one rmdir each. Anything else (files left,
        // the directory replaced): the recursive removal, which does not follow symlinks.
        for dir in [&self.home, &self.tmp] {
            if std::fs::remove_dir(dir).is_err() {
                if let Err(e) = remove_all(dir) {
                    tracing::warn!(dir = %dir.display(), "cannot remove the private HOME/TMPDIR directory: {e}");
                }
            }
        }
    }
}

fn remove_all(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn scratch_is_private_and_goes_with_the_launch_whatever_is_left_in_it() {
        let outside = tempfile::tempdir().unwrap();
        let kept = outside.path().join("kept");
        std::fs::write(&kept, "x").unwrap();
        for leave in [false, true] {
            let s = Scratch::create("a/b c").unwrap();
            let (home, tmp) = (s.home(), s.tmp());
            assert_ne!(home, tmp);
            let parent = std::fs::canonicalize(std::env::temp_dir()).unwrap();
            for d in [&home, &tmp] {
                let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o700, "{}", d.display());
                assert_eq!(&std::fs::canonicalize(d).unwrap(), d, "a real path");
                assert_eq!(d.parent(), Some(parent.as_path()), "in TMPDIR");
            }
            let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name(&home).starts_with("palisade-a_b_c-home-"), "{home:?}");
            assert!(name(&tmp).starts_with("palisade-a_b_c-tmp-"), "{tmp:?}");
            if leave {
                std::fs::create_dir_all(home.join(".cache/x")).unwrap();
                std::fs::write(tmp.join("f"), "x").unwrap();
                std::os::unix::fs::symlink(outside.path(), tmp.join("outside")).unwrap();
            }
            drop(s);
            for d in [&home, &tmp] {
                assert!(!d.exists(), "left={leave}: {} remains", d.display());
            }
            assert!(kept.exists(), "a symlink left inside is not followed");
        }
    }
}
