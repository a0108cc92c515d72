//! Package runners (`npx -y`, `npm exec`, `uvx`, `uv tool run`, `pipx run`) made to work in a
//! sandbox that has no registry access: the package is fetched ahead, outside the server's
//! sandbox (in a fetch sandbox of its own, see `contained`), into a per-user cache
//! (`$XDG_CACHE_HOME/palisade/packages/<ecosystem>/<hash>/`), its exact version recorded in
//! a lock there, and the launch rewritten to run the package's own entry
//! point from that entry. The sandbox's runtime closure (`sandbox::closure`) then grants the
//! entry read-only, as it would any install directory; nothing of the registry is reachable.
//!
//! Flow: `runner` reads the command line (pure), `lock` keys and records (pure keys, atomic
//! file), `fetch` runs npm/uv and reads back the install, `contained` builds and runs the
//! fetch's own sandbox (the only parts that start processes or need a network), `hooks` are
//! the small entry points `run` and `serve` call (`commands::prefetch` calls `resolve`).
//!
//! Never: run a package that was not resolved to an exact version in the lock, or fetch when
//! the lock already names a complete entry (the first use is the only one that needs the
//! registry; `prefetch --refresh` is the only way to move an unpinned package on).

pub mod contained;
pub mod fetch;
pub mod hooks;
pub mod lock;
pub mod runner;

use std::path::{Path, PathBuf};

pub use runner::{classify, Ecosystem, Launcher, PackageRun, Wanted};

/// Overrides the cache directory (tests, images, air-gapped hosts).
pub const CACHE_ENV: &str = "PALISADE_PACKAGE_CACHE";

/// The package cache: `<root>/lock.json`, `<root>/<ecosystem>/<entry>/`.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// Whether unpinned packages keep their locked version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Use the locked version; fetch only what is not in the cache.
    Locked,
    /// Resolve unpinned packages again (`palisade prefetch --refresh`).
    Refresh,
}

/// A runner line resolved to a cache entry.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The entry point to run (absolute, inside the cache entry).
    pub command: PathBuf,
    /// The server's own arguments, unchanged.
    pub args: Vec<String>,
    pub locked: lock::Locked,
    /// True when this call fetched it (false: served from the cache).
    pub fetched: bool,
}

/// Why a runner line could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("no package cache directory: set XDG_CACHE_HOME, HOME or {CACHE_ENV}")]
    NoCacheDir,
    #[error("package cache {path}: {cause}")]
    Cache { path: String, cause: std::io::Error },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    Fetch(Box<FetchFailed>),
}

/// A first fetch that failed: which package, for which runner, and the client's cause.
#[derive(Debug)]
pub struct FetchFailed {
    pub ecosystem: Ecosystem,
    pub package: String,
    pub runner: String,
    pub cache: String,
    pub cause: fetch::FetchError,
}

impl std::fmt::Display for FetchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let FetchFailed {
            ecosystem,
            package,
            runner,
            cache,
            cause,
        } = self;
        write!(
            f,
            "cannot fetch {ecosystem} package `{package}` (for `{runner}`), and it is not in \
             palisade's package cache ({cache}): {cause}"
        )?;
        // The client missing is fixed by installing it, not by fetching again elsewhere.
        match cause {
            fetch::FetchError::NoClient { tool, .. } => write!(
                f,
                "\n  fix: install `{tool}` where palisade runs (it fetches the package once, \
                 outside the server's sandbox), then start again"
            ),
            _ => write!(
                f,
                "\n  fix: run `palisade prefetch --config FILE` (or `palisade prefetch -- \
                 {runner} ...`) where the registry is reachable; the sandboxed server itself \
                 never reaches the registry"
            ),
        }
    }
}

impl std::error::Error for FetchFailed {}

impl Cache {
    /// The cache at `root`.
    pub fn at(root: PathBuf) -> Self {
        Cache { root }
    }

    /// `$PALISADE_PACKAGE_CACHE`, else `$XDG_CACHE_HOME/palisade/packages`, else
    /// `$HOME/.cache/palisade/packages`.
    pub fn from_env() -> Result<Self, PackageError> {
        let var = |k: &str| {
            std::env::var_os(k)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        if let Some(p) = var(CACHE_ENV) {
            return Ok(Cache::at(p));
        }
        let base = var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .ok_or(PackageError::NoCacheDir)?;
        Ok(Cache::at(base.join("palisade/packages")))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, eco: Ecosystem) -> Result<PathBuf, PackageError> {
        let d = self.root.join(eco.as_str());
        crate::private_dir::create(&d).map_err(|cause| PackageError::Cache {
            path: d.display().to_string(),
            cause,
        })?;
        Ok(d)
    }

    /// The cache entry directory a locked package lives in.
    pub fn entry_dir(&self, locked: &lock::Locked) -> PathBuf {
        self.root
            .join(locked.ecosystem.as_str())
            .join(&locked.entry)
    }

    /// The locked entry for `run`, when the lock has it and the entry is complete; never
    /// fetches (what `palisade check` reports).
    pub fn lookup(&self, run: &PackageRun) -> Result<Option<Resolved>, PackageError> {
        self.cached(run)
    }

    /// The locked entry for `run`, when the lock has it and the entry is complete.
    fn cached(&self, run: &PackageRun) -> Result<Option<Resolved>, PackageError> {
        let lock = lock::read(&self.root)?;
        let Some(l) = lock.packages.get(&lock::lock_key(run)) else {
            return Ok(None);
        };
        // A hand-edited lock must not hand an install whose scripts ran to a line that
        // asked for none (the keys differ; this says so where it is used).
        if !l.is_contained() || l.install_scripts != run.install_scripts {
            return Ok(None);
        }
        let command = self.entry_dir(l).join(&l.command);
        Ok(command.is_file().then(|| Resolved {
            command,
            args: run.args.clone(),
            locked: l.clone(),
            fetched: false,
        }))
    }
}

/// Resolves `run` to a cache entry: from the lock when it has it, else (or for an unpinned
/// package with `Mode::Refresh`) by fetching and locking it. Concurrent palisades serialise
/// on a lock file; a fetch fills a private directory renamed into place only when complete.
pub fn resolve(cache: &Cache, run: &PackageRun, mode: Mode) -> Result<Resolved, PackageError> {
    let refresh = mode == Mode::Refresh && !matches!(run.wanted, Wanted::Exact(_));
    if !refresh {
        if let Some(r) = cache.cached(run)? {
            return Ok(r);
        }
    }
    let eco_dir = cache.dir(run.ecosystem)?;
    let cache_err = |path: &Path| {
        let path = path.display().to_string();
        move |cause: std::io::Error| PackageError::Cache { path, cause }
    };
    let guard_path = cache.root.join(".fetch.lock");
    let guard = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&guard_path)
        .map_err(cache_err(&guard_path))?;
    let _held = nix::fcntl::Flock::lock(guard, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| cache_err(&guard_path)(std::io::Error::from(e)))?;
    // Another palisade may have fetched it while this one waited.
    if !refresh {
        if let Some(r) = cache.cached(run)? {
            return Ok(r);
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(&eco_dir)
        .map_err(cache_err(&eco_dir))?;
    let log = tempfile::Builder::new()
        .prefix(".fetch-log-")
        .tempfile_in(&eco_dir)
        .map_err(cache_err(&eco_dir))?;
    let installed = fetch::install(run, tmp.path(), log.path()).map_err(|cause| {
        PackageError::Fetch(Box::new(FetchFailed {
            ecosystem: run.ecosystem,
            package: run.package.clone(),
            runner: run.runner.clone(),
            cache: cache.root.display().to_string(),
            cause,
        }))
    })?;
    let entry = lock::entry_name(run, &installed.version);
    let target = eco_dir.join(&entry);
    if target.exists() {
        // The same exact install is already there (another line, or a refresh that found
        // no newer version): keep it, drop this copy.
        drop(tmp);
    } else {
        let filled = tmp.keep();
        std::fs::rename(&filled, &target).map_err(cache_err(&target))?;
    }
    let locked = lock::Locked {
        ecosystem: run.ecosystem,
        package: run.package.clone(),
        version: installed.version,
        integrity: installed.integrity,
        entry,
        command: installed.command.to_string_lossy().into_owned(),
        install_scripts: run.install_scripts,
    };
    let mut file = lock::read(&cache.root)?;
    file.version = 1;
    file.packages.insert(lock::lock_key(run), locked.clone());
    lock::write(&cache.root, &file)?;
    Ok(Resolved {
        command: target.join(&installed.command),
        args: run.args.clone(),
        locked,
        fetched: true,
    })
}

#[cfg(test)]
mod fetch_failed_tests {
    use super::*;

    #[test]
    fn a_missing_client_is_fixed_by_installing_it_not_by_fetching_again() {
        let failed = |cause| FetchFailed {
            ecosystem: Ecosystem::Pypi,
            package: "mcp-server-time".into(),
            runner: "uvx".into(),
            cache: "/c".into(),
            cause,
        };
        let text = failed(fetch::FetchError::NoClient {
            tool: "uv",
            ecosystem: Ecosystem::Pypi,
            hint: "install it",
        })
        .to_string();
        assert!(text.contains("fix: install `uv`"), "{text}");
        assert!(!text.contains("prefetch"), "{text}");
        let text = failed(fetch::FetchError::Io("x".into())).to_string();
        assert!(text.contains("palisade prefetch"), "{text}");
    }
}
