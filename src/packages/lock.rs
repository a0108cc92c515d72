//! The package lock: which exact version (and registry integrity hash) a package runner line
//! resolved to on first use, and which cache entry holds it. Keys and entry names are pure
//! functions of the parsed line; reading and writing the file are the only I/O here, and a
//! write replaces the file atomically (write beside, then rename).
//!
//! Never: let a lock entry name a path outside the cache (entries and commands are checked
//! to be plain relative names when read back).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::runner::{PackageRun, Wanted};

/// The lock file's name inside the cache directory.
pub const LOCK_FILE: &str = "lock.json";

/// The whole lock file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Format version (1).
    pub version: u32,
    /// By `lock_key`, sorted.
    pub packages: BTreeMap<String, Locked>,
}

/// One resolved package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    pub ecosystem: super::Ecosystem,
    pub package: String,
    /// The exact version installed.
    pub version: String,
    /// The registry's integrity hash (npm `sha512-...`), or for PyPI the sha256 of the
    /// installed distribution's RECORD (which lists every installed file's hash).
    pub integrity: String,
    /// The entry's directory name under `<cache>/<ecosystem>/`.
    pub entry: String,
    /// The entry point to run, relative to the entry directory.
    pub command: String,
    /// The package's install scripts ran during the fetch (in the fetch sandbox), because
    /// its profile asked for them. Absent (false) for the default fetch.
    #[serde(default, skip_serializing_if = "is_false")]
    pub install_scripts: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Locked {
    /// Whether the entry and command are plain relative paths (a hand-edited or corrupt
    /// lock must not point a launch outside the cache).
    pub fn is_contained(&self) -> bool {
        let plain = |p: &str, single: bool| {
            let comps: Vec<Component<'_>> = Path::new(p).components().collect();
            !comps.is_empty()
                && (!single || comps.len() == 1)
                && comps.iter().all(|c| matches!(c, Component::Normal(_)))
        };
        plain(&self.entry, true) && plain(&self.command, false)
    }
}

/// What a runner line asks for, as a lock key: ecosystem, package, the version as asked
/// (not as resolved), and what else changes the install or its entry point.
pub fn lock_key(run: &PackageRun) -> String {
    let wanted = match &run.wanted {
        Wanted::Latest => "latest".to_string(),
        Wanted::Exact(v) => format!("={v}"),
        Wanted::Range(r) => r.clone(),
    };
    let mut key = format!("{}:{}@{wanted}", run.ecosystem, run.package);
    let mut with = run.with.clone();
    with.sort();
    if !with.is_empty() {
        key.push_str(&format!(" with={}", with.join(",")));
    }
    if let Some(p) = &run.python {
        key.push_str(&format!(" python={p}"));
    }
    if let Some(b) = &run.bin {
        key.push_str(&format!(" bin={b}"));
    }
    if run.install_scripts {
        key.push_str(" scripts");
    }
    key
}

/// The cache entry's directory name for an exact resolution: a hash of everything that
/// decides its content, so two lines resolving to the same install share it.
pub fn entry_name(run: &PackageRun, version: &str) -> String {
    let mut with = run.with.clone();
    with.sort();
    let mut text = format!(
        "{}\n{}\n{}\n{}\n{}",
        run.ecosystem,
        run.package,
        version,
        with.join(","),
        run.python.as_deref().unwrap_or("")
    );
    // An install whose scripts ran is another content than one without (and the default
    // entry keeps the name it always had).
    if run.install_scripts {
        text.push_str("\nscripts");
    }
    let digest = Sha256::digest(text.as_bytes());
    hex::encode(&digest[..16])
}

/// Why the lock cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error(
        "{path} is not a valid package lock ({cause}); remove it and run `palisade prefetch` again"
    )]
    Parse {
        path: String,
        cause: serde_json::Error,
    },
    #[error("cannot write {path}: {cause}")]
    Write { path: String, cause: std::io::Error },
}

/// Reads the lock in `dir` (an empty lock when there is none yet).
pub fn read(dir: &Path) -> Result<LockFile, LockError> {
    let path = dir.join(LOCK_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LockFile {
                version: 1,
                ..LockFile::default()
            })
        }
        Err(cause) => {
            return Err(LockError::Read {
                path: path.display().to_string(),
                cause,
            })
        }
    };
    serde_json::from_str(&text).map_err(|cause| LockError::Parse {
        path: path.display().to_string(),
        cause,
    })
}

/// Replaces the lock in `dir` with `lock`, atomically.
pub fn write(dir: &Path, lock: &LockFile) -> Result<(), LockError> {
    let path = dir.join(LOCK_FILE);
    let err = |cause: std::io::Error| LockError::Write {
        path: path.display().to_string(),
        cause,
    };
    let text = serde_json::to_string_pretty(lock)
        .map_err(|e| err(std::io::Error::other(e.to_string())))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".lock-")
        .tempfile_in(dir)
        .map_err(err)?;
    tmp.write_all(text.as_bytes()).map_err(err)?;
    tmp.write_all(b"\n").map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(&path).map_err(|e| err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::runner::{classify, Launcher};

    fn run(cmd: &str, args: &[&str]) -> PackageRun {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match classify(cmd, &args) {
            Launcher::Package(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_follow_what_was_asked_and_ignore_the_servers_arguments() {
        let a = run("npx", &["-y", "@m/server-memory", "/a"]);
        let b = run("npm", &["exec", "--yes", "--", "@m/server-memory", "/b"]);
        assert_eq!(lock_key(&a), "npm:@m/server-memory@latest");
        assert_eq!(lock_key(&a), lock_key(&b));
        assert_eq!(
            lock_key(&run("npx", &["-y", "@m/server-memory@1.2.3"])),
            "npm:@m/server-memory@=1.2.3"
        );
        assert_eq!(
            lock_key(&run("uvx", &["--with", "b", "--with", "a", "t@1"])),
            "pypi:t@=1 with=a,b"
        );
    }

    #[test]
    fn entry_names_are_per_exact_install() {
        let a = run("npx", &["-y", "x"]);
        let pinned = run("npx", &["-y", "x@1.0.0"]);
        assert_eq!(entry_name(&a, "1.0.0"), entry_name(&pinned, "1.0.0"));
        assert_ne!(entry_name(&a, "1.0.0"), entry_name(&a, "1.0.1"));
        let py = run("uvx", &["x"]);
        assert_ne!(entry_name(&a, "1.0.0"), entry_name(&py, "1.0.0"));
        assert_eq!(entry_name(&a, "1.0.0").len(), 32);
    }

    #[test]
    fn an_install_with_scripts_has_its_own_key_and_entry() {
        let off = run("npx", &["-y", "x@1.0.0"]);
        let on = PackageRun {
            install_scripts: true,
            ..off.clone()
        };
        assert_eq!(lock_key(&on), "npm:x@=1.0.0 scripts");
        assert_ne!(lock_key(&on), lock_key(&off));
        assert_ne!(entry_name(&on, "1.0.0"), entry_name(&off, "1.0.0"));
    }

    #[test]
    fn install_scripts_appear_in_the_lock_only_when_they_ran() {
        let l = Locked {
            ecosystem: super::super::Ecosystem::Npm,
            package: "x".into(),
            version: "1.0.0".into(),
            integrity: "sha512-abc".into(),
            entry: "0123".into(),
            command: "node_modules/x/index.js".into(),
            install_scripts: false,
        };
        let text = serde_json::to_string(&l).unwrap();
        assert!(!text.contains("install_scripts"), "{text}");
        let on = Locked {
            install_scripts: true,
            ..l
        };
        let text = serde_json::to_string(&on).unwrap();
        assert!(text.contains("\"install_scripts\":true"), "{text}");
        assert_eq!(serde_json::from_str::<Locked>(&text).unwrap(), on);
    }

    #[test]
    fn lock_round_trips_and_rejects_entries_outside_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = read(dir.path()).unwrap();
        assert!(lock.packages.is_empty());
        let l = Locked {
            ecosystem: super::super::Ecosystem::Npm,
            package: "x".into(),
            version: "1.0.0".into(),
            integrity: "sha512-abc".into(),
            entry: "0123".into(),
            command: "node_modules/x/index.js".into(),
            install_scripts: false,
        };
        assert!(l.is_contained());
        lock.packages.insert("npm:x@latest".into(), l.clone());
        write(dir.path(), &lock).unwrap();
        assert_eq!(read(dir.path()).unwrap(), lock);
        for (entry, command) in [
            ("../x", "a"),
            ("a/b", "a"),
            ("a", "/etc/passwd"),
            ("a", "x/../../y"),
        ] {
            let bad = Locked {
                entry: entry.into(),
                command: command.into(),
                ..l.clone()
            };
            assert!(!bad.is_contained(), "{entry} {command}");
        }
    }
}
