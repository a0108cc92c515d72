//! The runtime closure of a command: the directories it needs to even start, granted
//! read-only (`MountOrigin::Runtime`) so that reads can stay closed by default.
//!
//! Found by following what the kernel and the interpreters will follow: the command resolved
//! with `which` against the sandbox's PATH, every hop of its symlink chain, its shebang
//! interpreter (`#!/usr/bin/env node` resolved against the same PATH), a script given to an
//! interpreter as its first argument, and for each file the install directory it belongs to:
//! the project holding `node_modules`, a Python venv (`pyvenv.cfg`, plus the base
//! installation its `home` names), for a version manager's shim the one version it would run
//! (the command becomes that version's executable; the manager's root only when the version
//! cannot be told), or
//! a `PREFIX/bin` whose `PREFIX/lib` holds its libraries.
//! Anything under the system base (`/usr`, ...) needs nothing more.
//!
//! Reads the filesystem (metadata, link targets, first line of scripts, `pyvenv.cfg`), never
//! writes. Never returns `/`, a top-level directory or a home directory: a closure that would
//! be that broad falls back to the narrower directory or the file itself.
//!
//! Never follows, out of what the sandbox already shows, an input the server itself can
//! write (`Writable`): a symlink, a `pyvenv.cfg` or a `#!` line inside a read-write grant is
//! the server's to rewrite between two launches, and the closure computed at its restart
//! would grant whatever it then named (a server that rewrote its venv's `home` read the
//! prefix it chose after a restart). What such an input leads to is granted only when it is
//! in the system base or inside the grants; otherwise it is left out, and said.

mod writable;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use writable::Writable;

/// Why the command cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ClosureError {
    #[error("command `{command}` not found in PATH ({path}); give its absolute path or add its directory to PATH")]
    NotFound { command: String, path: String },
    /// A command given as a path (`/opt/x/bin/server`, `./server`) that is not there.
    #[error("command `{0}` does not exist; fix the path (or install it there)")]
    Missing(PathBuf),
    #[error("command `{0}` is not an executable file")]
    NotExecutable(PathBuf),
}

/// Where to look things up: the sandbox's PATH, the working directory, the user's home (the
/// closure never grants it whole), and what the server can write.
#[derive(Debug, Clone)]
pub struct Lookup<'a> {
    pub path_var: &'a str,
    pub cwd: &'a Path,
    pub home: Option<&'a Path>,
    pub grants: Option<&'a Writable>,
}

/// Prefixes the system base already shows read-only.
const BASE_PREFIXES: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Interpreters whose first non-option argument is a script to run.
const INTERPRETERS: &[&str] = &[
    "node", "nodejs", "deno", "bun", "python", "python3", "ruby", "perl", "bash", "sh", "dash",
];

/// Resolves `command` the way the sandbox's shell would: a name with a `/` is relative to
/// `cwd`, a bare name is searched in `path_var`. The result is absolute but not
/// canonicalised: a venv's `bin/python` must keep its path to find its `pyvenv.cfg`.
pub fn resolve_program(command: &str, lk: &Lookup<'_>) -> Result<PathBuf, ClosureError> {
    let found = which::which_in(command, Some(lk.path_var), lk.cwd).map_err(|_| {
        if command.contains('/') {
            ClosureError::Missing(lk.cwd.join(command))
        } else {
            ClosureError::NotFound {
                command: command.to_string(),
                path: lk.path_var.to_string(),
            }
        }
    })?;
    let abs = if found.is_absolute() {
        found
    } else {
        lk.cwd.join(found)
    };
    if !abs.is_file() {
        return Err(ClosureError::NotExecutable(abs));
    }
    let abs = crate::roots::canon::lexical_normalize(&abs);
    // A version manager's shim runs the manager, which needs its whole root; the version it
    // would pick is known, so run that directly and grant only its directory.
    Ok(through_version_shim(&abs, lk.cwd).unwrap_or(abs))
}

/// Version managers whose `ROOT/shims/NAME` runs `ROOT/versions/VERSION/bin/NAME`, with the
/// file that names the version in a project (searched from the working directory up), else
/// `ROOT/version`.
const VERSION_MANAGERS: &[(&str, &str)] = &[
    (".pyenv", ".python-version"),
    (".rbenv", ".ruby-version"),
    (".nodenv", ".node-version"),
];

/// The real executable behind a version manager's shim, when the version it would pick can
/// be read and is installed; `None` for anything else (including the `system` version).
pub fn through_version_shim(file: &Path, cwd: &Path) -> Option<PathBuf> {
    let shims = file
        .parent()
        .filter(|d| d.file_name() == Some(OsStr::new("shims")))?;
    let root = shims.parent()?;
    let root_name = root.file_name()?.to_str()?;
    let (_, local_file) = VERSION_MANAGERS.iter().find(|(r, _)| *r == root_name)?;
    let version = cwd
        .ancestors()
        .find_map(|d| first_word(&d.join(local_file)))
        .or_else(|| first_word(&root.join("version")))?;
    if version == "system" || version.contains('/') || version.starts_with('.') {
        return None;
    }
    let real = root
        .join("versions")
        .join(&version)
        .join("bin")
        .join(file.file_name()?);
    real.is_file().then_some(real)
}

/// The first word of a version file (comments and blank lines skipped).
fn first_word(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string)
}

/// The read-only directories (or files) `program args...` needs, sorted and deduplicated.
pub fn closure(program: &Path, args: &[String], lk: &Lookup<'_>) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    // Each file with whether the kernel would read its `#!` line: the command's and its
    // interpreters' are; a script handed to an explicit interpreter's is not (following it
    // granted, say, a pyenv root for `/usr/bin/python3 server.py` whose shebang says
    // `env python3` and whose PATH led to a shim).
    // And whether it was reached through an input the server can write ("tainted"): what
    // it then adds is kept only where the sandbox shows it anyway (`trusted_grant`).
    let mut queue = vec![(program.to_path_buf(), true, false)];
    if let Some(script) = script_argument(program, args, lk.cwd) {
        queue.push((script, false, false));
    }
    let mut seen = BTreeSet::new();
    while let Some((file, executed, tainted)) = queue.pop() {
        if !seen.insert(file.clone()) || seen.len() > 64 {
            continue;
        }
        if let Some((link, target)) = writable_link_on_the_way(&file, lk) {
            left_out(&link, "the target of this symbolic link", &target);
            continue;
        }
        let (hops, whole, through_writable) = symlink_chain(&file, lk);
        let tainted = tainted || through_writable;
        for hop in hops {
            let mut found = BTreeSet::new();
            add_install_dir(&hop, lk, &mut found);
            for dir in found {
                if !tainted || trusted_grant(&dir, lk) {
                    out.insert(dir);
                } else {
                    left_out(&hop, "its installation directory", &dir);
                }
            }
        }
        if !executed || !whole {
            continue;
        }
        let Ok(real) = std::fs::canonicalize(&file) else {
            continue;
        };
        if let Some((interp, by_path)) = shebang_interpreter(&real, lk) {
            // A `#!` line the server can write names an interpreter of the machine's only
            // through PATH (`env node`: the config's PATH decides where it is), or one the
            // sandbox shows anyway.
            let written = untrusted(&real, lk);
            if written && !by_path && !trusted_target(&interp, lk) {
                left_out(&real, "its #! interpreter", &interp);
                continue;
            }
            // Found through PATH, the interpreter is the config's choice however the script
            // was reached: not tainted.
            queue.push((interp, true, !by_path && (tainted || written)));
        }
    }
    // Drop entries already inside another entry.
    let all: Vec<PathBuf> = out.into_iter().collect();
    all.iter()
        .filter(|p| !all.iter().any(|q| q != *p && p.starts_with(q)))
        .cloned()
        .collect()
}

/// Whether `p` lies where the server can write (see `Writable`).
fn untrusted(p: &Path, lk: &Lookup<'_>) -> bool {
    lk.grants.is_some_and(|g| g.writable(p))
}

/// Whether what an input the server can write leads to may be granted: what the sandbox
/// shows anyway (the system base, the grants), or a file of a Python installation (a venv's
/// `python` and `home` name one; reading another Python is no secret), judged where it
/// really is.
fn trusted_target(p: &Path, lk: &Lookup<'_>) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    trusted_grant(&real, lk)
        || real
            .parent()
            .and_then(Path::parent)
            .is_some_and(python_installation)
}

/// Whether `dir` (a closure entry reached through an input the server can write) may be
/// granted: in the system base, inside a grant, or a Python installation's prefix.
fn trusted_grant(dir: &Path, lk: &Lookup<'_>) -> bool {
    in_base(dir) || lk.grants.is_some_and(|g| g.shown(dir)) || python_installation(dir)
}

/// Whether `prefix` is a Python installation: `lib/python3.N/os.py` under it (a standard
/// library, which the server cannot make outside what it can write).
fn python_installation(prefix: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("python3") && e.path().join("os.py").is_file()
    })
}

/// The first symlink on `p`'s way (a directory above it included) that lies where the server
/// can write and leads out of what it may be granted, with where it leads.
fn writable_link_on_the_way(p: &Path, lk: &Lookup<'_>) -> Option<(PathBuf, PathBuf)> {
    // Nothing the server can write (`run -- true`): no lstat of every component.
    let grants = lk.grants.filter(|g| g.any_writable())?;
    let mut prefix = PathBuf::new();
    for part in p.components() {
        prefix.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&prefix) else {
            return None;
        };
        if meta.file_type().is_symlink() && grants.writable(&prefix) {
            let target = std::fs::canonicalize(&prefix).ok()?;
            if !trusted_target(&target, lk) {
                return Some((prefix, target));
            }
        }
    }
    None
}

/// Says that `input` (where the server can write) named `what`, which is not granted.
fn left_out(input: &Path, what: &str, target: &Path) {
    tracing::warn!(
        "{} lies where the server can write, so {what} ({}) is not granted read access: the \
         server could change it between launches. If it is right, add it to \
         sandbox.filesystem.allowRead, or make {} read-only (sandbox.filesystem.denyWrite)",
        input.display(),
        target.display(),
        input.display()
    );
}

/// `path` and every path its symlinks lead through, in order (at most 40 hops, as the
/// kernel allows), whether the chain was followed to its end (a link the server can write
/// that leads out of what it may be granted is not followed), and whether it went through
/// a link the server can write.
fn symlink_chain(path: &Path, lk: &Lookup<'_>) -> (Vec<PathBuf>, bool, bool) {
    let mut through_writable = false;
    let mut chain = vec![path.to_path_buf()];
    let mut cur = path.to_path_buf();
    for _ in 0..40 {
        // Resolve the directories above the link first, so a relative target is joined to
        // the link's real parent.
        let parent = cur
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        let Ok(target) = std::fs::read_link(&cur) else {
            break;
        };
        let Some(name) = cur.file_name() else { break };
        if parent.join(name) != cur {
            chain.push(parent.join(name));
        }
        let next = crate::roots::canon::lexical_normalize(&parent.join(target));
        let escape = if untrusted(&parent.join(name), lk) {
            through_writable = true;
            (!trusted_target(&next, lk)).then(|| (parent.join(name), next.clone()))
        } else {
            None
        }
        .or_else(|| writable_link_on_the_way(&next, lk));
        if let Some((link, target)) = escape {
            left_out(&link, "the target of this symbolic link", &target);
            chain.dedup();
            return (chain, false, through_writable);
        }
        cur = next;
        chain.push(cur.clone());
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        chain.push(real);
    }
    chain.dedup();
    (chain, true, through_writable)
}

fn in_base(p: &Path) -> bool {
    BASE_PREFIXES.iter().any(|b| p.starts_with(b))
}

/// `/`, a top-level directory (`/root`, `/home`, `/opt`) or a home directory.
pub fn is_broad(p: &Path, home: Option<&Path>) -> bool {
    p.components().count() <= 2
        || home.is_some_and(|h| h == p)
        || p.parent() == Some(Path::new("/home"))
}

/// Adds the install directory `file` belongs to.
fn add_install_dir(file: &Path, lk: &Lookup<'_>, out: &mut BTreeSet<PathBuf>) {
    if in_base(file) || !file.exists() {
        return;
    }
    let narrow = |dir: Option<PathBuf>, fallback: &Path| match dir {
        Some(d) if !is_broad(&d, lk.home) => d,
        _ => fallback.to_path_buf(),
    };
    // A Python venv: the venv, plus the installation it was made from.
    if let Some(venv) = file
        .ancestors()
        .skip(1)
        .find(|a| a.join("pyvenv.cfg").is_file())
    {
        out.insert(narrow(Some(venv.to_path_buf()), file));
        let cfg = venv.join("pyvenv.cfg");
        if let Some(home) = venv_home(&cfg) {
            if let Some(prefix) = prefix_of_bin_dir(&home) {
                if untrusted(&cfg, lk) && !trusted_grant(&prefix, lk) {
                    left_out(&cfg, "the base installation its `home` names", &prefix);
                } else if !in_base(&prefix) {
                    out.insert(narrow(Some(prefix), &home));
                }
            }
        }
        return;
    }
    // A node project: everything up to the outermost node_modules (hoisted dependencies
    // live there); if that is too broad, the node_modules directory itself.
    let comps: Vec<_> = file.components().collect();
    if let Some(i) = comps
        .iter()
        .position(|c| c.as_os_str() == OsStr::new("node_modules"))
    {
        let project: PathBuf = comps[..i].iter().collect();
        let modules: PathBuf = comps[..=i].iter().collect();
        let dir = if is_broad(&project, lk.home) {
            modules
        } else {
            project
        };
        out.insert(narrow(Some(dir), file));
        return;
    }
    // A version manager's shim (pyenv, rbenv, nodenv: ROOT/shims/NAME next to
    // ROOT/versions): the shim runs the manager, which picks a version, so grant its root.
    if let Some(root) = file
        .parent()
        .filter(|d| d.file_name() == Some(OsStr::new("shims")))
        .and_then(Path::parent)
        .filter(|r| r.join("versions").is_dir())
    {
        out.insert(narrow(Some(root.to_path_buf()), file));
        return;
    }
    // PREFIX/bin/tool with PREFIX/lib: the whole prefix (pyenv, nvm, /opt/foo).
    if let Some(prefix) = file.parent().and_then(prefix_of_bin_dir) {
        let in_home = |h: &Path| {
            prefix.parent() == Some(h)
                || std::fs::canonicalize(h).is_ok_and(|real| prefix.parent() == Some(&*real))
        };
        if lk.home.is_some_and(in_home) {
            // A prefix kept in the home directory itself (`~/.local`, pip --user's): its
            // `share` and `state` hold keyrings and other programs' private state (Palisade's
            // own servers' among them), so only its libraries and the file.
            out.insert(file.to_path_buf());
            for libs in ["lib", "libexec"].map(|d| prefix.join(d)) {
                if libs.is_dir() {
                    out.insert(libs);
                }
            }
            return;
        }
        out.insert(narrow(Some(prefix), file));
        return;
    }
    // A lone script whose package we cannot tell: its directory if it has a package.json,
    // else just the file.
    let dir = file
        .parent()
        .filter(|d| d.join("package.json").is_file())
        .map(Path::to_path_buf);
    out.insert(narrow(dir, file));
}

/// `PREFIX` for a `PREFIX/bin` or `PREFIX/sbin` directory that has a `PREFIX/lib`.
fn prefix_of_bin_dir(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?;
    if name != "bin" && name != "sbin" {
        return None;
    }
    let prefix = dir.parent()?;
    (prefix.join("lib").is_dir() || prefix.join("libexec").is_dir()).then(|| prefix.to_path_buf())
}

/// The `home = ...` line of a `pyvenv.cfg`.
fn venv_home(cfg: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(cfg).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| PathBuf::from(v.trim()))
    })
}

/// The interpreter a `#!` line names, resolved (`env NAME` through the sandbox PATH), and
/// whether it was found through PATH as one of the known interpreters (`INTERPRETERS`).
fn shebang_interpreter(script: &Path, lk: &Lookup<'_>) -> Option<(PathBuf, bool)> {
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut buf).ok()?;
    let head = buf.get(..n)?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name() == Some(OsStr::new("env")) {
        let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        let known =
            INTERPRETERS.contains(&name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'));
        return resolve_program(name, lk).ok().map(|p| (p, known));
    }
    Some((interp, false))
}

/// The interpreter's script argument made absolute, when it was given relative to `cwd` (the
/// caller's directory): the sandbox's working directory is not the caller's, so there a
/// relative script would not be found (`palisade run -- node build/index.js` failed with
/// "Cannot find module"). `None` when there is nothing to rewrite.
pub fn absolute_script(program: &Path, args: &[String], cwd: &Path) -> Option<String> {
    if Path::new(args.first()?).is_absolute() {
        return None;
    }
    script_argument(program, args, cwd).map(|p| p.display().to_string())
}

/// The script an interpreter is asked to run: its first argument, when it is not an option
/// and names an existing file.
fn script_argument(program: &Path, args: &[String], cwd: &Path) -> Option<PathBuf> {
    let name = std::fs::canonicalize(program)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))?;
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let called = program.file_name()?.to_string_lossy();
    let called = called.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if !INTERPRETERS.contains(&base) && !INTERPRETERS.contains(&called) {
        return None;
    }
    let first = args.first().filter(|a| !a.starts_with('-'))?;
    let p = cwd.join(first);
    p.is_file()
        .then(|| crate::roots::canon::lexical_normalize(&p))
}

#[cfg(test)]
mod tests;
