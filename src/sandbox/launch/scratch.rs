//! The Landlock tier's private HOME and TMPDIR: one host directory per launch, created 0700
//! with `home` and `tmp` inside, removed with everything in it when the launch is dropped.
//!
//! Creates directories only. Never: reuse a directory (each launch gets a fresh one) or
//! leave one behind after the launch is dropped.

use std::path::PathBuf;

use super::prepared::{io, LaunchError};

/// The private HOME and TMPDIR of one Landlock launch: host directories created 0700 and
/// removed (with everything the server left in them) when the launch is dropped.
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub(super) fn create(name: &str) -> Result<Scratch, LaunchError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("palisade-{safe}-"))
            .tempdir()
            .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("cannot make the private HOME/TMPDIR directory private", e))?;
        for sub in ["home", "tmp"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.path().join(sub))
                .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        }
        Ok(Scratch { dir })
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
}
