//! What this machine can enforce, probed for real when it is asked, so that a package
//! installed or a sysctl changed between two runs shows at once. `Depth::Quick` only reads
//! files and searches PATH (microseconds); it assumes the bwrap found is 0.8 or later, and an
//! older one refuses the `--disable-userns` flag itself before anything runs. `Depth::Trial`
//! adds a trivial sandbox, the only proof that user namespaces really work (`palisade run`
//! in enforce mode, to choose a tier and word a refusal); a pass is remembered for a few
//! minutes in exactly this context (`trial_record`), so the runs that follow skip it: the one
//! answer that is not fresh, and it can only be wrong towards a bubblewrap that fails at the
//! launch. `Depth::Full` runs `bwrap --version` and, side by side with it, a fresh trial
//! (`palisade check`, warn mode and the gateway use it, once).
//!
//! Probes only; the decision what to do about a gap is `resolve`'s.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::{sys, trial_record};

/// Environment variable naming the bubblewrap binary to use instead of searching PATH. A
/// test and operations knob: pointing it at a missing file makes bubblewrap unavailable.
pub const BWRAP_ENV: &str = "PALISADE_BWRAP";

/// How much to probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Files and PATH only: no process is started.
    Quick,
    /// `Quick`, plus a trivial sandbox (what `auto` needs to choose a tier), or a pass
    /// recorded for this context in the last few minutes (`trial_record`).
    Trial,
    /// `bwrap --version`, a fresh trivial sandbox, and `srt --version`. Its trial's outcome
    /// is recorded for the `Trial`s that follow: a pass, or the removal of a recorded one.
    Full,
    /// Landlock and seccomp only, for a launch whose backend is explicitly `landlock`
    /// (`palisade run --backend landlock`): that tier needs neither bubblewrap, socat,
    /// ripgrep nor srt, so they are not looked up and read as absent, and the user-namespace
    /// sysctls are not read; nor are the connect checks (`probe_connect_mediation`, for a
    /// launch with an allowlist). Never for `auto`, `check`, or a report of the machine.
    LandlockOnly,
}

/// The bubblewrap found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BwrapInfo {
    pub path: PathBuf,
    /// `0.8.0` for `bubblewrap 0.8.0`; `None` when `--version` said something else or was
    /// not asked (`Depth::Quick`).
    pub version: Option<String>,
    /// bwrap 0.8 added `--disable-userns`, which palisade always uses (assumed by
    /// `Depth::Quick`).
    pub disable_userns: bool,
}

/// Whether a sandbox could actually be created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Userns {
    /// A trivial sandbox ran.
    Usable,
    /// It failed; `error` is what bwrap said.
    Unusable { error: String },
    /// Not tried (`Depth::Quick`); the static signals below still apply.
    NotProbed,
}

/// Everything palisade knows about the machine's sandboxing abilities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    pub bwrap: Option<BwrapInfo>,
    /// Set when `PALISADE_BWRAP` names something unusable (reported, never silently ignored).
    pub bwrap_override_problem: Option<String>,
    pub userns: Userns,
    /// `/proc/sys/user/max_user_namespaces`.
    pub max_user_namespaces: Option<u64>,
    /// Debian's `kernel.unprivileged_userns_clone` (absent on most kernels).
    pub unprivileged_userns_clone: Option<bool>,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns` (absent elsewhere).
    pub apparmor_restrict_userns: Option<bool>,
    /// True when running as root (the unprivileged-userns restrictions do not apply).
    pub root: bool,
    /// The kernel supports seccomp filters.
    pub seccomp: bool,
    pub socat: Option<PathBuf>,
    /// ripgrep, which srt needs on Linux.
    pub ripgrep: Option<PathBuf>,
    pub srt: Option<PathBuf>,
    /// Set when srt was found but `srt --version` failed (`Depth::Full` only): e.g. a Node.js
    /// too old for it.
    pub srt_problem: Option<String>,
    /// The kernel's Landlock support (one system call, probed at every depth).
    pub landlock: Landlock,
    /// Palisade can decide a Landlock server's connects itself (seccomp user notification,
    /// `pidfd_getfd`, `process_vm_readv`; `connect_gate`): what holds an allowlist under
    /// Landlock to the proxy's address, not only its port.
    pub connect_mediation: bool,
}

/// What the kernel offers of Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Landlock {
    /// Usable, at this ABI version (1: filesystem, 4: TCP ports, 6: scoping of abstract
    /// unix sockets and signals, 7: audit logging).
    Available { abi: u32 },
    /// Built into the kernel but not enabled at boot (not in the `lsm=` list).
    NotEnabled,
    /// Not built into the kernel (before 5.13, or CONFIG_SECURITY_LANDLOCK off), or refused
    /// by a seccomp profile around palisade.
    NotImplemented,
}

impl Landlock {
    /// The ABI version, when Landlock is usable.
    pub fn abi(self) -> Option<u32> {
        match self {
            Landlock::Available { abi } => Some(abi),
            _ => None,
        }
    }
}

/// Asks the kernel which Landlock ABI it has (`landlock_create_ruleset` with the VERSION
/// flag: creates nothing).
pub fn probe_landlock() -> Landlock {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: a null attribute pointer with size 0 and the VERSION flag is the documented
    // way to ask for the ABI version; no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v > 0 {
        return Landlock::Available { abi: v as u32 };
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => Landlock::NotEnabled,
        _ => Landlock::NotImplemented,
    }
}

/// Environment variable naming the srt binary to use instead of searching PATH (it is
/// usually installed by npm outside PATH).
pub const SRT_ENV: &str = "PALISADE_SRT";

/// Probes the machine.
pub fn probe(depth: Depth) -> Capabilities {
    probe_for(depth, SrtProbe::Run)
}

/// Whether a `Depth::Full` probe runs `srt --version`, a Node start of 100-300 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrtProbe {
    /// Ask srt whether it runs (`check`, a config that uses srt).
    Run,
    /// Only look for it: nothing will run under srt.
    Locate,
}

/// Probes the machine, running srt only when `srt` says it may be used.
pub fn probe_for(depth: Depth, srt_probe: SrtProbe) -> Capabilities {
    if depth == Depth::LandlockOnly {
        return landlock_only();
    }
    let srt = find_srt();
    // The probes that start a process run side by side (`srt --version` here, the trial
    // sandbox beside `bwrap --version` in `probe_bwrap`): one after the other they were the
    // largest part of `serve`'s time to its first answer.
    let ((bwrap, bwrap_override_problem, userns), srt_problem) = std::thread::scope(|s| {
        let srt_check = match (&srt, depth, srt_probe) {
            (Some(p), Depth::Full, SrtProbe::Run) => Some(s.spawn(|| srt_runs(p).err())),
            _ => None,
        };
        let bwrap = probe_bwrap(depth);
        let srt_problem = srt_check.and_then(|h| {
            h.join()
                .unwrap_or_else(|_| Some("the srt probe failed".to_string()))
        });
        (bwrap, srt_problem)
    });
    Capabilities {
        bwrap,
        bwrap_override_problem,
        userns,
        max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
        unprivileged_userns_clone: read_sysctl("/proc/sys/kernel/unprivileged_userns_clone")
            .map(|v| v != 0),
        apparmor_restrict_userns: read_sysctl(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        )
        .map(|v| v != 0),
        root: nix::unistd::geteuid().is_root(),
        seccomp: seccomp_supported(),
        socat: which::which("socat").ok(),
        ripgrep: which::which("rg").ok(),
        srt,
        srt_problem,
        landlock: probe_landlock(),
        connect_mediation: sys::mediation_available(),
    }
}

/// `Depth::LandlockOnly`: what the Landlock tier reads (its ABI, seccomp) and nothing it
/// does not; the four PATH searches and three sysctl reads of the other depths were about a
/// tenth of a millisecond of `run --backend landlock` (docs/benchmarks.md).
fn landlock_only() -> Capabilities {
    Capabilities {
        bwrap: None,
        bwrap_override_problem: None,
        userns: Userns::NotProbed,
        max_user_namespaces: None,
        unprivileged_userns_clone: None,
        apparmor_restrict_userns: None,
        root: nix::unistd::geteuid().is_root(),
        seccomp: seccomp_supported(),
        socat: None,
        ripgrep: None,
        srt: None,
        srt_problem: None,
        landlock: probe_landlock(),
        // Looked for only where a server has an allowlist (`probe_connect_mediation`).
        connect_mediation: false,
    }
}

/// Whether palisade can check a Landlock server's connects (`Capabilities::connect_mediation`).
pub fn probe_connect_mediation() -> bool {
    sys::mediation_available()
}

fn find_srt() -> Option<PathBuf> {
    match std::env::var_os(SRT_ENV) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => which::which("srt").ok(),
    }
}

/// `srt --version` must run (srt 0.0.83 declares Node >= 22.12; it may or may not run on an
/// older Node, so ask it).
fn srt_runs(path: &Path) -> Result<(), String> {
    let out = Command::new(path)
        .arg("--version")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr)
            .trim()
            .chars()
            .take(300)
            .collect())
    }
}

fn read_sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether the kernel was built with seccomp: `prctl(PR_GET_SECCOMP)` answers (this
/// process's mode) exactly when it was, and fails with EINVAL when it was not. It is asked
/// first because it is one system call, where generating `/proc/self/status` is dear on
/// every launch; on any other answer (a filter refusing `prctl`) the `Seccomp:` line of
/// `/proc/self/status`, which appears only on kernels built with seccomp, decides as before.
fn seccomp_supported() -> bool {
    // SAFETY: PR_GET_SECCOMP reads this process's seccomp mode; it takes no pointer and
    // changes nothing.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode >= 0 {
        return true;
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        return false;
    }
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false)
}

/// The bubblewrap found, a problem with an overridden one, and (`Trial`, `Full`) whether a
/// trial sandbox runs (`Trial`: or ran, in a recorded pass).
fn probe_bwrap(depth: Depth) -> (Option<BwrapInfo>, Option<String>, Userns) {
    match std::env::var_os(BWRAP_ENV) {
        Some(p) if !p.is_empty() => probe_bwrap_at(PathBuf::from(p), true, depth),
        _ => match which::which("bwrap") {
            Ok(p) => probe_bwrap_at(p, false, depth),
            Err(_) => (None, None, Userns::NotProbed),
        },
    }
}

/// `probe_bwrap` of the bubblewrap at `path` (`overridden`: named by `PALISADE_BWRAP`).
fn probe_bwrap_at(
    path: PathBuf,
    overridden: bool,
    depth: Depth,
) -> (Option<BwrapInfo>, Option<String>, Userns) {
    if depth != Depth::Full {
        return match is_executable(&path) {
            true => {
                let userns = match depth {
                    Depth::Trial => trial_or_record(&path),
                    _ => Userns::NotProbed,
                };
                let info = BwrapInfo {
                    path,
                    version: None,
                    disable_userns: true,
                };
                (Some(info), None, userns)
            }
            false if overridden => (
                None,
                Some(format!(
                    "{BWRAP_ENV}={} is not an executable file",
                    path.display()
                )),
                Userns::NotProbed,
            ),
            false => (None, None, Userns::NotProbed),
        };
    }
    // The trial assumes bwrap 0.8 or later (`--disable-userns`) and runs while `--version`
    // is asked; an older or unrecognised bwrap has it run again without the flag.
    // Taken before the trial, so a pass is recorded for the context it ran in.
    let fingerprint = trial_record::fingerprint(&path);
    let (version, optimistic) = std::thread::scope(|s| {
        let trial = s.spawn(|| trial_sandbox(&path, true));
        (bwrap_version(&path), trial.join())
    });
    match version {
        Ok(version) => {
            let disable_userns = version
                .as_deref()
                .and_then(parse_version)
                .is_some_and(|v| v >= (0, 8, 0));
            let userns = match (disable_userns, optimistic) {
                (true, Ok(userns)) => userns,
                _ => trial_sandbox(&path, disable_userns),
            };
            // A fresh pass serves the `run`s that follow (`Depth::Trial`), and a fresh failure
            // takes back a pass recorded earlier (`palisade check` after namespaces broke).
            // A fresh probe is never answered from a record.
            match (&userns, &fingerprint, disable_userns) {
                (Userns::Usable, Some(fp), true) => trial_record::record_pass(fp),
                (Userns::Unusable { .. }, Some(fp), true) => trial_record::forget(fp),
                _ => {}
            }
            let info = BwrapInfo {
                path,
                version,
                disable_userns,
            };
            (Some(info), None, userns)
        }
        Err(e) if overridden => (
            None,
            Some(format!("{BWRAP_ENV}={} cannot be run: {e}", path.display())),
            Userns::NotProbed,
        ),
        Err(_) => (None, None, Userns::NotProbed),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `bwrap --version`; `Ok(None)` when it ran but said something unexpected.
fn bwrap_version(path: &Path) -> std::io::Result<Option<String>> {
    let out = Command::new(path)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .trim()
        .strip_prefix("bubblewrap ")
        .map(|v| v.trim().to_string()))
}

/// `"0.8.0"` -> `(0, 8, 0)`.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split('.').map(|p| p.parse::<u32>());
    let major = it.next()?.ok()?;
    let minor = it.next().unwrap_or(Ok(0)).ok()?;
    let patch = it.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// `Depth::Trial`'s answer: a pass recorded for exactly this context in the last
/// `trial_record::TRUSTED_FOR` (a miss or any doubt runs the trial), else the trial sandbox,
/// recorded when it passes.
fn trial_or_record(bwrap: &Path) -> Userns {
    let fingerprint = trial_record::fingerprint(bwrap);
    if fingerprint
        .as_deref()
        .is_some_and(trial_record::passed_before)
    {
        return Userns::Usable;
    }
    let userns = trial_sandbox(bwrap, true);
    if let (Userns::Usable, Some(fingerprint)) = (&userns, &fingerprint) {
        trial_record::record_pass(fingerprint);
    }
    userns
}

/// Starts the smallest sandbox with the namespaces palisade uses and runs `true` in it.
fn trial_sandbox(bwrap: &Path, disable_userns: bool) -> Userns {
    let mut cmd = Command::new(bwrap);
    cmd.args(["--unshare-all", "--unshare-user"]);
    if disable_userns {
        cmd.arg("--disable-userns");
    }
    cmd.args([
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "true",
    ])
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    match cmd.output() {
        Ok(out) if out.status.success() => Userns::Usable,
        Ok(out) => Userns::Unusable {
            error: String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(500)
                .collect(),
        },
        Err(e) => Userns::Unusable {
            error: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seccomp_probe_agrees_with_the_status_file() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let listed = status.lines().any(|l| l.starts_with("Seccomp:"));
        assert_eq!(seccomp_supported(), listed);
    }

    #[test]
    fn this_kernel_reports_a_landlock_abi_or_why_not() {
        // Any answer is valid; the probe must not crash, and an ABI is at least 1.
        if let Landlock::Available { abi } = probe_landlock() {
            assert!(abi >= 1);
        }
    }

    #[test]
    fn the_landlock_only_probe_agrees_with_the_full_one_on_what_landlock_reads() {
        let quick = probe(Depth::Quick);
        let only = probe(Depth::LandlockOnly);
        assert_eq!(only.landlock, quick.landlock);
        assert_eq!(only.seccomp, quick.seccomp);
        assert_eq!(only.root, quick.root);
        assert_eq!((only.bwrap, only.socat, only.srt), (None, None, None));
    }

    /// The trial runs beside `--version` assuming bwrap 0.8; an older bwrap, which refuses
    /// `--disable-userns`, must get its trial again without the flag, not be reported as
    /// unable to create namespaces.
    #[test]
    fn an_older_bwrap_gets_its_trial_again_without_disable_userns() {
        let Ok(real) = which::which("bwrap") else {
            eprintln!("skipped: no bubblewrap on this machine");
            return;
        };
        if probe_bwrap_at(real.clone(), false, Depth::Full).2 != Userns::Usable {
            eprintln!("skipped: bubblewrap cannot create its namespaces here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("bwrap");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\n\
                 [ \"$1\" = --version ] && {{ echo 'bubblewrap 0.7.0'; exit 0; }}\n\
                 for a in \"$@\"; do [ \"$a\" = --disable-userns ] && \
                 {{ echo 'bwrap: Unknown option --disable-userns' >&2; exit 1; }}; done\n\
                 exec {} \"$@\"\n",
                real.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (info, problem, userns) = probe_bwrap_at(fake, true, Depth::Full);
        let info = info.unwrap();
        assert_eq!(info.version.as_deref(), Some("0.7.0"));
        assert!(!info.disable_userns);
        assert_eq!(problem, None);
        assert_eq!(userns, Userns::Usable);
    }

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(parse_version("0.8.0"), Some((0, 8, 0)));
        assert_eq!(parse_version("0.11"), Some((0, 11, 0)));
        assert!(parse_version("0.11").unwrap() > (0, 8, 0));
        assert_eq!(parse_version("x"), None);
    }
}
