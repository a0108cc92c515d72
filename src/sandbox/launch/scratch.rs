//! The Landlock tier's private HOME and TMPDIR: one host directory per launch, created 0700
//! with `home` and `tmp` inside, removed with everything in it when the launch is dropped.
//!
//! Cheap on purpose (it is on every `palisade run --backend landlock`): three `mkdir`s with
//! the mode given at creation (no `chmod` after), one path resolution, and on removal three
//! `rmdir`s when the command left nothing behind, the recursive removal only when it did.
//! Creates directories only. Never: reuse a directory (each launch gets a fresh one) or
//! leave one behind after the launch is dropped.

use std::path::{Path, PathBuf};

use super::prepared::{io, LaunchError};

/// The private HOME and TMPDIR of one Landlock launch: host directories created 0700 and
/// removed (with everything the server left in them) when the launch is dropped.
#[derive(Debug)]
pub struct Scratch {
    /// The directory holding `home` and `tmp`, symlinks resolved (the Landlock rules and
    /// the environment name real paths).
    dir: PathBuf,
}

const SUBDIRS: [&str; 2] = ["home", "tmp"];

impl Scratch {
    pub(super) fn create(name: &str) -> Result<Scratch, LaunchError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        // Made 0700 by mkdir itself: never visible to others, not even for a moment.
        let made = tempfile::Builder::new()
            .prefix(&format!("palisade-{safe}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        // Removed on any error below (the TempDir still owns it until `keep`).
        let dir = std::fs::canonicalize(made.path())
            .map_err(|e| io("cannot resolve the private HOME/TMPDIR directory", e))?;
        for sub in SUBDIRS {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.join(sub))
                .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        }
        let _ = made.keep();
        Ok(Scratch { dir })
    }

    /// The private HOME (a real path).
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// The private TMPDIR (a real path).
    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    #[cfg(test)]
    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The common case, nothing left inside: three rmdirs. Anything else (files left,
        // a subdirectory removed or replaced): the recursive removal, which does not follow
        // symlinks.
        let empty = SUBDIRS
            .iter()
            .all(|sub| std::fs::remove_dir(self.dir.join(sub)).is_ok())
            && std::fs::remove_dir(&self.dir).is_ok();
        if !empty {
            if let Err(e) = remove_all(&self.dir) {
                tracing::warn!(dir = %self.dir.display(), "cannot remove the private HOME/TMPDIR directory: {e}");
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
        for leave in [false, true] {
            let s = Scratch::create("a/b c").unwrap();
            let dir = s.path().to_path_buf();
            for d in [&dir, &s.home(), &s.tmp()] {
                let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o700, "{}", d.display());
            }
            assert_eq!(std::fs::canonicalize(&dir).unwrap(), dir, "a real path");
            if leave {
                std::fs::create_dir_all(s.home().join(".cache/x")).unwrap();
                std::fs::write(s.tmp().join("f"), "x").unwrap();
                std::os::unix::fs::symlink("/", s.tmp().join("root")).unwrap();
            }
            drop(s);
            assert!(!dir.exists(), "left={leave}: {} remains", dir.display());
        }
    }
}
