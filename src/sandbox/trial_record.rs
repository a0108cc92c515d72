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

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Environment variable naming the directory for per-boot state (the remembered trial).
pub const RUNTIME_DIR_ENV: &str = "PALISADE_RUNTIME_DIR";

/// Bump when the fingerprint's facts change, so records of an older palisade never match.
const FORMAT: &str = "palisade-trial-v1";

/// The fingerprint of this context for a trial of the bubblewrap at `bwrap`, or `None` when
/// a fact cannot be read (then nothing is remembered or trusted).
pub fn fingerprint(bwrap: &Path, disable_userns: bool) -> Option<String> {
    let meta = std::fs::metadata(bwrap).ok()?;
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
        ("disable_userns", disable_userns.to_string()),
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

/// Where records live for this user, if anywhere.
fn runtime_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from("/run/palisade"));
    }
    let xdg = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    xdg.is_absolute().then(|| xdg.join("palisade"))
}

/// Why a directory or record cannot be trusted, if it cannot: it must be this user's, not
/// reachable by anyone else (a directory 0700, a file not writable by others), and of the
/// expected kind. Pure, for the tests.
fn untrusted(owner: u32, mode: u32, is_dir: bool, want_dir: bool, euid: u32) -> Option<String> {
    if is_dir != want_dir {
        return Some("not the expected kind of file".into());
    }
    if owner != euid {
        return Some(format!("owned by uid {owner}, not {euid}"));
    }
    let open_to_others = if want_dir { 0o077 } else { 0o022 };
    (mode & open_to_others != 0).then(|| format!("mode {:o} is open to others", mode & 0o7777))
}

/// `path`'s metadata (not following a symlink), if it can be trusted.
fn trusted(path: &Path, want_dir: bool) -> Result<std::fs::Metadata, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("a symlink".into());
    }
    let euid = nix::unistd::geteuid().as_raw();
    match untrusted(meta.uid(), meta.mode(), meta.is_dir(), want_dir, euid) {
        Some(why) => Err(why),
        None => Ok(meta),
    }
}

/// Whether a passed trial is recorded for exactly this fingerprint.
pub fn passed_before(fingerprint: &str) -> bool {
    let Some(dir) = runtime_dir() else {
        return false;
    };
    let record = dir.join(record_name(fingerprint));
    let check = trusted(&dir, true).and_then(|_| trusted(&record, false));
    if let Err(why) = check {
        if record.exists() || dir.exists() {
            tracing::debug!(record = %record.display(), "trial record not used: {why}");
        }
        return false;
    }
    std::fs::read_to_string(&record).is_ok_and(|text| text == fingerprint)
}

/// Records a passed trial for `fingerprint`. Best effort: a record that cannot be written
/// costs the next launch a trial, nothing else.
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
    let Some(dir) = runtime_dir() else {
        return;
    };
    let record = dir.join(record_name(fingerprint));
    match std::fs::remove_file(&record) {
        Ok(()) => tracing::debug!(record = %record.display(), "trial failed: record removed"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(record = %record.display(), "cannot remove a stale trial record: {e}")
        }
    }
}

fn write_record(dir: &Path, fingerprint: &str) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create it: {e}")),
    }
    trusted(dir, true)?;
    // Written beside the record and renamed over it: a reader sees a whole record or none.
    let name = record_name(fingerprint);
    let partial = dir.join(format!(".{name}.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
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
        assert_eq!(untrusted(1000, 0o40700, true, true, 1000), None);
        assert!(untrusted(1000, 0o40750, true, true, 1000).is_some());
        assert!(untrusted(1000, 0o40777, true, true, 1000).is_some());
        assert!(untrusted(0, 0o40700, true, true, 1000).is_some());
        assert!(untrusted(1000, 0o100600, false, true, 1000).is_some());
    }

    #[test]
    fn a_record_must_be_a_file_of_this_users_that_others_cannot_write() {
        assert_eq!(untrusted(0, 0o100600, false, false, 0), None);
        assert_eq!(untrusted(0, 0o100644, false, false, 0), None);
        assert!(untrusted(0, 0o100666, false, false, 0).is_some());
        assert!(untrusted(0, 0o100620, false, false, 0).is_some());
        assert!(untrusted(1000, 0o100600, false, false, 0).is_some());
        assert!(untrusted(0, 0o40700, true, false, 0).is_some());
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

    #[test]
    fn this_process_has_a_fingerprint_that_names_the_bwrap_file() {
        let exe = std::env::current_exe().unwrap();
        let fp = fingerprint(&exe, true).unwrap();
        assert!(fp.contains(&format!("bwrap {}", exe.display())), "{fp}");
        assert!(fp.lines().any(|l| l.starts_with("ns user:[")), "{fp}");
        assert_eq!(fingerprint(&exe, true).as_deref(), Some(fp.as_str()));
        assert_ne!(fingerprint(&exe, false).as_deref(), Some(fp.as_str()));
        assert_eq!(fingerprint(Path::new("/nonexistent/bwrap"), true), None);
    }
}
