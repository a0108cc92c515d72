//! The curated read-only system base every sandbox starts from: `/usr`, the top-level
//! `/bin`, `/sbin`, `/lib*` (as the symlinks the host has, or read-only binds when the host
//! has real directories), and only the `/etc` entries programs need to run, resolve names
//! and verify TLS.
//!
//! Reads the host's root directory to see which of these exist and whether they are links;
//! never returns anything under a home directory, and never `/etc/shadow`, `/etc/gshadow`,
//! `/etc/sudoers`, SSH host keys or other credentials: the `/etc` list is an allowlist.

use std::path::{Path, PathBuf};

use super::spec::{Access, Mount, MountOrigin, Symlink};

/// `/etc` entries a program may need. Anything not named here stays invisible. Kept short on
/// purpose: each entry is one bind mount, about 0.2 ms of every sandbox start.
pub const ETC_ALLOWLIST: &[&str] = &[
    // dynamic linker (ld.so.conf and ld.so.conf.d are only read by ldconfig)
    "ld.so.cache",
    // users and groups by name (no password hashes: those are in shadow)
    "passwd",
    "group",
    "nsswitch.conf",
    // name resolution and service names
    "resolv.conf",
    "hosts",
    "services",
    "protocols",
    // TLS trust (Debian: ssl; Fedora/RHEL: pki, crypto-policies)
    "ssl",
    "pki",
    "crypto-policies",
    // time
    "localtime",
    // Debian's alternatives (/usr/bin/editor style links go through here)
    "alternatives",
    // content types and the distribution's identity
    "mime.types",
    "os-release",
    // the system git configuration (git servers read it; no credentials live there)
    "gitconfig",
];

/// Top-level directories that hold programs and libraries.
const TOP_LEVEL: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The base for a host root at `root` (`/` in production; tests point it elsewhere).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemBase {
    pub mounts: Vec<Mount>,
    pub links: Vec<Symlink>,
}

/// Discovers the system base of the host.
pub fn discover() -> SystemBase {
    discover_in(Path::new("/"))
}

/// Discovers the base under `root`; returned paths are absolute paths of the sandbox
/// (`/usr`, `/etc/passwd`, ...), i.e. `root` is stripped.
pub fn discover_in(root: &Path) -> SystemBase {
    let ro = |p: PathBuf| Mount {
        path: p,
        access: Access::Ro,
        origin: MountOrigin::SystemBase,
    };
    let mut base = SystemBase::default();
    if root.join("usr").is_dir() {
        base.mounts.push(ro(PathBuf::from("/usr")));
    }
    for name in TOP_LEVEL {
        let host = root.join(name);
        let Ok(meta) = host.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&host) {
                base.links.push(Symlink {
                    path: Path::new("/").join(name),
                    target,
                });
            }
        } else if meta.is_dir() {
            base.mounts.push(ro(Path::new("/").join(name)));
        }
    }
    for name in ETC_ALLOWLIST {
        if root.join("etc").join(name).exists() {
            base.mounts.push(ro(Path::new("/etc").join(name)));
        }
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_usr_links_and_only_allowlisted_etc_entries() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::create_dir_all(r.join("etc/ssl")).unwrap();
        std::fs::create_dir(r.join("lib64")).unwrap();
        std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
        for f in ["passwd", "shadow", "gshadow", "sudoers", "resolv.conf"] {
            std::fs::write(r.join("etc").join(f), "x").unwrap();
        }
        let b = discover_in(r);
        let paths: Vec<_> = b.mounts.iter().map(|m| m.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "/usr",
                "/lib64",
                "/etc/passwd",
                "/etc/resolv.conf",
                "/etc/ssl"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            b.links,
            vec![Symlink {
                path: "/bin".into(),
                target: "usr/bin".into()
            }]
        );
        assert!(b.mounts.iter().all(|m| m.access == Access::Ro));
    }

    #[test]
    fn the_allowlist_never_names_credentials() {
        for bad in ["shadow", "gshadow", "sudoers", "ssh", "npmrc", "pip.conf"] {
            assert!(!ETC_ALLOWLIST.contains(&bad), "{bad}");
        }
    }
}
