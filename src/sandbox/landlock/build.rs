//! The effect half of the Landlock tier: each planned path opened and the ruleset created
//! with the `landlock` crate, before the child is started; the child then only calls
//! `landlock_restrict_self` on the descriptor (`sys`). Also the directory listing `plan` is
//! given on a real machine.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{tcp_connect_ports, Entry, Net, Plan, Rights};

/// Lists a directory for `plan` (without following symlinks).
pub fn list_dir(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        out.push(Entry {
            path: e.path(),
            is_dir: ft.is_dir(),
            is_symlink: ft.is_symlink(),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Why the ruleset could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("cannot open {path} for a Landlock rule: {cause}")]
    Open { path: PathBuf, cause: nix::Error },
    #[error("the kernel returned no Landlock ruleset (Landlock unsupported)")]
    NoRuleset,
    #[error("Landlock ABI {0} has no network rules: TCP cannot be confined to the egress proxy (ABI 4, Linux 6.7, can)")]
    NoNetworkRules(u32),
}

/// Creates the ruleset for `plan` on a kernel with Landlock `abi` (before fork). The
/// returned descriptor is what the child hands to `landlock_restrict_self`.
pub fn build(plan: &Plan, abi: u32) -> Result<OwnedFd, BuildError> {
    use landlock::{
        Access as _, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };
    let abi_v = ABI::from(i32::try_from(abi).unwrap_or(i32::MAX));
    let all = AccessFs::from_all(abi_v);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)?;
    let ports = tcp_connect_ports(plan.net);
    if ports.is_some() && abi >= 4 {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    } else if matches!(plan.net, Net::Proxy { .. }) {
        // Only a port rule confines TCP to the proxy; resolve refuses this before.
        return Err(BuildError::NoNetworkRules(abi));
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    let mut created = ruleset.create()?;
    for rule in &plan.rules {
        let fd = match nix::fcntl::open(
            &rule.path,
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(raw) => {
                // SAFETY: `open` just returned this descriptor; nobody else owns it.
                unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) }
            }
            // A base entry or device node this host lacks: nothing to grant.
            Err(nix::Error::ENOENT) => continue,
            Err(source) => {
                return Err(BuildError::Open {
                    path: rule.path.clone(),
                    cause: source,
                })
            }
        };
        let is_dir = nix::sys::stat::fstat(fd.as_raw_fd())
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .unwrap_or(false);
        let mut access = match rule.rights {
            Rights::List => AccessFs::ReadDir.into(),
            Rights::Read => AccessFs::from_read(abi_v),
            Rights::ReadWrite => all,
            Rights::Device => AccessFs::from_file(abi_v) & !AccessFs::Execute,
        };
        if !is_dir {
            access &= AccessFs::from_file(abi_v);
        }
        if access.is_empty() {
            continue;
        }
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    if abi >= 4 {
        for port in ports.unwrap_or_default() {
            created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(BuildError::NoRuleset)
}
