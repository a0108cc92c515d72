//! A passed trial sandbox, remembered for this boot and this context, so that `palisade run`
//! pays bubblewrap's trial (a whole sandbox started and ended, about 4.5 ms here) once rather
//! than on every launch.
//!
//! What is remembered: only that the trial *passed*, under a fingerprint of everything that
//! decides whether bubblewrap can create its namespaces here: the boot, the effective user,
//! bubblewrap's file (path, device, inode, size, change times), the namespaces this process
//! is in, the namespace sysctls, this process's seccomp, no_new_privs and capability state,
//! and its AppArmor label. A fingerprint that differs in any of them is a miss and the trial
//! runs again; so does any doubt (a fact that cannot be read, a record that cannot be read).
//! A failed trial is never recorded: a host that starts to allow namespaces is seen at once,
//! and a refusal always comes with the trial's own words.
//!
//! Why this is safe: the trial only chooses a tier and words a refusal. If something outside
//! the fingerprint broke namespaces after a pass was recorded, bubblewrap itself fails at
//! launch, with its own error, and nothing runs: it fails closed, as an unsandboxed start is
//! never the fallback of a failed bubblewrap.
//!
//! Where: `$PALISADE_RUNTIME_DIR`, else `/run/palisade` for root and
//! `$XDG_RUNTIME_DIR/palisade` for other users (both emptied at boot); without one, nothing is
//! remembered. The directory must be this user's, mode 0700, and not a symlink; a record
//! must be a regular file of this user's. Never in `/tmp`.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Environment variable naming the directory for per-boot state (the remembered trial).
pub const RUNTIME_DIR_ENV: &str = "PALISADE_RUNTIME_DIR";

/// Bump when the fingerprint's facts change, so records of an older palisade never match.
const FORMAT: &str = "palisade-trial-v1";

/// How long a pass is trusted: long enough for a client starting its servers, or a script's
/// runs, to pay one trial; short enough that a change the fingerprint cannot see stops
/// `auto` from choosing Landlock for minutes, not for the rest of the boot.
pub const TRUSTED_FOR: Duration = Duration::from_secs(300);

/// A record is one fingerprint: a few kilobytes. Anything longer is not one.
const MAX_RECORD: u64 = 64 * 1024;

/// The fingerprint of this context for a trial of the bubblewrap at `bwrap` (run with
/// `--disable-userns`, as every palisade sandbox is), or `None` when nothing can be
/// remembered here (no runtime directory) or a fact cannot be read.
pub fn fingerprint(bwrap: &Path) -> Option<String> {
    runtime_dir()?;
    let meta = std::fs::metadata(bwrap).ok()?;
    let nproc = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC).ok()?;
    let mut facts = vec![
        ("format", FORMAT.to_string()),
        ("boot", read_trimmed("/proc/sys/kernel/random/boot_id")?),
        ("euid", nix::unistd::geteuid().to_string()),
        (
            "bwrap",
            format!(
                "{} dev={} ino={} size={} mtime={}.{} ctime={}.{}",
                bwrap.display(),
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec()
            ),
        ),
        ("rlimit_nproc", format!("{} {}", nproc.0, nproc.1)),
        (
            "cgroup",
            read_trimmed("/proc/self/cgroup")?.replace('\n', " "),
        ),
    ];
    for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()?;
        facts.push(("ns", link.to_string_lossy().into_owned()));
    }
    for limit in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        let path = format!("/proc/sys/user/max_{limit}_namespaces");
        facts.push(("sysctl", format!("{path}={}", read_or_absent(&path))));
    }
    for path in [
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined",
    ] {
        facts.push(("sysctl", format!("{path}={}", read_or_absent(path))));
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    facts.extend(status_facts(&status).into_iter().map(|l| ("status", l)));
    facts.push((
        "lsm",
        read_or_absent("/proc/self/attr/apparmor/current")
            + " "
            + &read_or_absent("/proc/self/attr/current"),
    ));
    Some(render(&facts))
}

/// The lines of `/proc/self/status` that bear on creating namespaces.
fn status_facts(status: &str) -> Vec<String> {
    const KEYS: [&str; 6] = [
        "Seccomp:",
        "Seccomp_filters:",
        "NoNewPrivs:",
        "CapEff:",
        "CapPrm:",
        "CapBnd:",
    ];
    status
        .lines()
        .filter(|l| KEYS.iter().any(|k| l.starts_with(k)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// One fact per line, in a fixed order: equal contexts give equal text.
fn render(facts: &[(&str, String)]) -> String {
    facts.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// The record's file name for a fingerprint: one record per context, so two contexts that
/// share the directory (a host and a container with /run bound in) do not overwrite each
/// other.
fn record_name(fingerprint: &str) -> String {
    let digest = Sha256::digest(fingerprint.as_bytes());
    format!("trial-{}", hex::encode(&digest[..12]))
}

fn read_trimmed(path: &str) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

fn read_or_absent(path: &str) -> String {
    read_trimmed(path).unwrap_or_else(|| "-".into())
}

/// Where records live for this user, if anywhere (always an absolute path).
fn runtime_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return dir.is_absolute().then_some(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from("/run/palisade"));
    }
    let xdg = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    xdg.is_absolute().then(|| xdg.join("palisade"))
}

/// Why a directory or record cannot be trusted, if it cannot: it must be of the expected kind
/// (a directory, or a regular file: never a FIFO that would block the read, never a symlink),
/// this user's, and closed to everyone else (a directory 0700, a file not writable by
/// others). `mode` is `st_mode`, file type bits included. Pure, for the tests.
fn untrusted(owner: u32, mode: u32, want_dir: bool, euid: u32) -> Option<String> {
    let (kind, open_to_others) = match want_dir {
        true => (libc::S_IFDIR, 0o077),
        false => (libc::S_IFREG, 0o022),
    };
    if mode & libc::S_IFMT != kind {
        return Some(format!(
            "not a {}",
            if want_dir {
                "directory"
            } else {
                "regular file"
            }
        ));
    }
    if owner != euid {
        return Some(format!("owned by uid {owner}, not {euid}"));
    }
    (mode & open_to_others != 0).then(|| format!("mode {:o} is open to others", mode & 0o7777))
}

fn trusted_meta(meta: &std::fs::Metadata, want_dir: bool) -> Result<(), String> {
    let euid = nix::unistd::geteuid().as_raw();
    untrusted(meta.uid(), meta.mode(), want_dir, euid).map_or(Ok(()), Err)
}

/// The runtime directory, if it exists and can be trusted (a symlink to one cannot).
fn trusted_dir() -> Result<PathBuf, String> {
    let dir = runtime_dir().ok_or("no runtime directory")?;
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    trusted_meta(&meta, true).map_err(|why| format!("{}: {why}", dir.display()))?;
    Ok(dir)
}

/// Whether a pass is recorded for exactly this fingerprint, less than `TRUSTED_FOR` ago.
pub fn passed_before(fingerprint: &str) -> bool {
    match read_record(fingerprint) {
        Ok(record) => {
            tracing::debug!(record = %record.display(), "trial sandbox skipped: a recorded pass");
            true
        }
        Err(why) => {
            tracing::debug!("trial record not used: {why}");
            false
        }
    }
}

/// The path of a record that holds `fingerprint` and may be trusted, or why there is none.
/// Opened without following a symlink and without blocking, and judged by the descriptor it
/// is read through, so what is judged is what is read.
fn read_record(fingerprint: &str) -> Result<PathBuf, String> {
    let record = trusted_dir()?.join(record_name(fingerprint));
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", record.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&record)
        .map_err(|e| at(&e))?;
    let meta = file.metadata().map_err(|e| at(&e))?;
    trusted_meta(&meta, false).map_err(|why| at(&why))?;
    let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
    if age.is_none_or(|age| age >= TRUSTED_FOR) {
        return Err(at(&format!("older than {} s", TRUSTED_FOR.as_secs())));
    }
    let mut text = String::new();
    file.take(MAX_RECORD)
        .read_to_string(&mut text)
        .map_err(|e| at(&e))?;
    if text != fingerprint {
        return Err(at(&"another context's fingerprint"));
    }
    Ok(record)
}

/// Records a passed trial for `fingerprint` (taken before the trial ran). Best effort: a
/// record that cannot be written costs the next launch a trial, nothing else.
pub fn record_pass(fingerprint: &str) {
    let Some(dir) = runtime_dir() else {
        return;
    };
    if let Err(why) = write_record(&dir, fingerprint) {
        tracing::debug!(dir = %dir.display(), "trial not recorded: {why}");
    }
}

/// Removes the record of a pass for `fingerprint`, if there is one: a fresh trial in that
/// context has just failed.
pub fn forget(fingerprint: &str) {
    let Ok(dir) = trusted_dir() else {
        return;
    };
    let record = dir.join(record_name(fingerprint));
    match std::fs::remove_file(&record) {
        Ok(()) => tracing::debug!(record = %record.display(), "trial failed: record removed"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::debug!(record = %record.display(), "record not removed: {e}"),
    }
}

fn write_record(dir: &Path, fingerprint: &str) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create it: {e}")),
    }
    trusted_dir()?;
    // Written beside the record and renamed over it: a reader sees a whole record or none.
    // `create_new` refuses an existing name, a symlink included.
    let name = record_name(fingerprint);
    let partial = dir.join(format!(".{name}.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| f.write_all(fingerprint.as_bytes()))
        .and_then(|()| std::fs::rename(&partial, dir.join(&name)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e.to_string());
    }
    tracing::debug!(record = %dir.join(name).display(), "trial sandbox passed: recorded");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_of_this_users_closed_to_others_is_trusted() {
        assert_eq!(untrusted(1000, 0o40700, true, 1000), None);
        assert!(untrusted(1000, 0o40750, true, 1000).is_some());
        assert!(untrusted(1000, 0o40777, true, 1000).is_some());
        assert!(untrusted(0, 0o40700, true, 1000).is_some());
        assert!(untrusted(1000, 0o100600, true, 1000).is_some());
        assert!(untrusted(1000, 0o120777, true, 1000).is_some(), "a symlink");
    }

    #[test]
    fn a_record_must_be_a_regular_file_of_this_users_that_others_cannot_write() {
        assert_eq!(untrusted(0, 0o100600, false, 0), None);
        assert_eq!(untrusted(0, 0o100644, false, 0), None);
        assert!(untrusted(0, 0o100666, false, 0).is_some());
        assert!(untrusted(0, 0o100620, false, 0).is_some());
        assert!(untrusted(1000, 0o100600, false, 0).is_some());
        assert!(untrusted(0, 0o40700, false, 0).is_some(), "a directory");
        assert!(
            untrusted(0, 0o10600, false, 0).is_some(),
            "a FIFO would block the read"
        );
        assert!(untrusted(0, 0o140600, false, 0).is_some(), "a socket");
    }

    #[test]
    fn the_status_facts_are_the_seccomp_privilege_and_capability_lines() {
        let status = "Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t1\nNoNewPrivs:\t1\n\
                      CapEff:\t0000000000000000\nVmRSS:\t100 kB\nCapBnd:\t000001ffffffffff\n";
        assert_eq!(
            status_facts(status),
            [
                "Seccomp: 2",
                "Seccomp_filters: 1",
                "NoNewPrivs: 1",
                "CapEff: 0000000000000000",
                "CapBnd: 000001ffffffffff"
            ]
        );
    }

    #[test]
    fn different_contexts_get_different_records() {
        let a = render(&[("boot", "1".into()), ("ns", "user:[1]".into())]);
        let b = render(&[("boot", "1".into()), ("ns", "user:[2]".into())]);
        assert_ne!(record_name(&a), record_name(&b));
        assert_eq!(record_name(&a), record_name(&a.clone()));
        assert!(record_name(&a).starts_with("trial-"));
    }
}
