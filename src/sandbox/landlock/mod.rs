//! The Landlock tier: the same root set as bubblewrap's (one `SandboxSpec`), enforced without
//! namespaces by a Landlock ruleset, a seccomp filter and `no_new_privs`.
//!
//! Two halves. `plan` (here) is pure (directory listings come through a function the caller
//! passes): it turns the spec's mounts, its denyRead paths and the paths that must stay
//! read-only into Landlock path rules, and says what it could not enforce. `build` (its own
//! file) is the effect: it opens each path and creates the ruleset with the `landlock` crate
//! before the child is started; the child then only calls `landlock_restrict_self` on the
//! descriptor (`sys`).
//!
//! Landlock only allows: a right granted on a directory holds for everything beneath it,
//! and nothing can take it back. So a deny inside a grant is *carved*: the grant's
//! directory gets no right of its own (or read only), and each entry beside the path to the
//! denied one gets the grant's rights, down to the denied path. What that costs is said in
//! docs/security.md: a directory on the way to a denied path cannot have new entries made
//! in it, and one on the way to a hidden directory cannot be listed. Symlinks found while
//! carving get no rule (a rule would follow them to their target). Must never: drop a deny
//! silently; a deny that cannot be carved is a gap, refused under enforce.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::resolve::Reason;
use super::spec::{Access, SandboxSpec};

/// The rights one rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rights {
    /// List directories only (a directory on the way to a denied file).
    List,
    /// Read, list, execute.
    Read,
    /// Everything Landlock governs.
    ReadWrite,
    /// Read and write an existing file (device nodes such as /dev/null).
    Device,
}

/// One path rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub path: PathBuf,
    pub rights: Rights,
}

/// The network a Landlock sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Net {
    /// No internet socket at all (seccomp), no TCP bind or connect (Landlock, ABI >= 4).
    Closed,
    /// Plain TCP sockets (seccomp), no bind, connect to this one port only (Landlock ABI 4
    /// or later): the egress proxy's loopback endpoint. Landlock rules name ports, not
    /// addresses: the same port number on another host is reachable too.
    Proxy { port: u16 },
    /// The host network (a warn-mode degradation only).
    Host,
}

/// The TCP ports a Landlock ruleset lets the sandbox connect to, or `None` when the ruleset
/// does not govern TCP at all (the host network). Binding is never allowed where TCP is
/// governed.
pub fn tcp_connect_ports(net: Net) -> Option<Vec<u16>> {
    match net {
        Net::Closed => Some(Vec::new()),
        Net::Proxy { port } => Some(vec![port]),
        Net::Host => None,
    }
}

/// What the sandbox of one server is, in Landlock terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub rules: Vec<Rule>,
    pub net: Net,
    /// What the spec asks that this tier cannot enforce (refused under enforce).
    pub gaps: Vec<Reason>,
    /// The grants that could not be carved, whole: what warn mode grants instead (their
    /// denies then not enforced, as the gaps say).
    pub uncarved: Vec<Rule>,
    /// What carving cost, for the launch log.
    pub notes: Vec<String>,
}

/// A directory entry, as `plan` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub is_dir: bool,
    pub is_symlink: bool,
}

/// What the plan is built from, besides the spec.
pub struct Inputs<'a> {
    pub spec: &'a SandboxSpec,
    /// Paths that stay read-only even inside a read-write grant (the write-protected
    /// dangerous files found, and `denyWrite`); they need not exist.
    pub read_only: &'a [PathBuf],
    /// The private HOME and TMPDIR (read-write).
    pub scratch: &'a [PathBuf],
    pub net: Net,
}

/// Device nodes every program may read and write (the rest of /dev stays closed).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The most rules one carving may produce (each is an open descriptor at build time).
pub const CARVE_BUDGET: usize = 4096;

/// What a target path wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// denyRead: no right at all; `dir` when it is a directory.
    Hide { dir: bool },
    /// Read, never write.
    ReadOnly,
}

#[derive(Debug, Clone)]
struct Target {
    path: PathBuf,
    want: Want,
}

/// The ruleset plan for `inputs`. `list` lists a directory (the caller's I/O).
pub fn plan(
    inputs: &Inputs<'_>,
    list: &dyn Fn(&Path) -> std::io::Result<Vec<Entry>>,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Plan {
    let spec = inputs.spec;
    let mut targets: Vec<Target> = spec
        .deny
        .iter()
        .map(|p| Target {
            path: p.clone(),
            want: Want::Hide { dir: is_dir(p) },
        })
        .collect();
    targets.extend(inputs.read_only.iter().map(|p| Target {
        path: p.clone(),
        want: Want::ReadOnly,
    }));
    // A read-only mount nested in a read-write one: bwrap's later bind wins; Landlock would
    // union the two, so the nested one is carved like a write-protected path.
    for m in spec.mounts.iter().filter(|m| m.access == Access::Ro) {
        let nested = spec
            .mounts
            .iter()
            .any(|o| o.access == Access::Rw && m.path.starts_with(&o.path) && m.path != o.path);
        if nested {
            targets.push(Target {
                path: m.path.clone(),
                want: Want::ReadOnly,
            });
        }
    }
    let mut out = Plan {
        rules: Vec::new(),
        net: inputs.net,
        gaps: Vec::new(),
        uncarved: Vec::new(),
        notes: Vec::new(),
    };
    let mut budget = CARVE_BUDGET;
    let mounts = spec
        .mounts
        .iter()
        .map(|m| {
            (
                m.path.clone(),
                match m.access {
                    Access::Ro => Rights::Read,
                    Access::Rw => Rights::ReadWrite,
                },
            )
        })
        .chain(
            inputs
                .scratch
                .iter()
                .map(|p| (p.clone(), Rights::ReadWrite)),
        );
    for (path, mut rights) in mounts {
        if let Some(t) = targets
            .iter()
            .find(|t| matches!(t.want, Want::Hide { .. }) && path.starts_with(&t.path))
        {
            out.notes.push(format!(
                "{} is not granted: it is inside denyRead {}",
                path.display(),
                t.path.display()
            ));
            continue;
        }
        if rights == Rights::ReadWrite
            && targets
                .iter()
                .any(|t| t.want == Want::ReadOnly && path.starts_with(&t.path))
        {
            rights = Rights::Read;
        }
        let inside: Vec<Target> = targets
            .iter()
            .filter(|t| t.path.starts_with(&path) && t.path != path)
            .filter(|t| matches!(t.want, Want::Hide { .. }) || rights == Rights::ReadWrite)
            .cloned()
            .collect();
        if inside.is_empty() {
            out.rules.push(Rule { path, rights });
            continue;
        }
        if let Some(r) = own_rights(&inside, rights) {
            out.rules.push(Rule {
                path: path.clone(),
                rights: r,
            });
        }
        if let Err(why) = carve(&path, rights, &inside, list, &mut out.rules, &mut budget) {
            let denied: Vec<String> = inside
                .iter()
                .map(|t| t.path.display().to_string())
                .collect();
            out.gaps.push(Reason {
                problem: format!(
                    "Landlock cannot carve {} out of the grant {}: {why}",
                    denied.join(", "),
                    path.display()
                ),
                fix: "grant narrower directories that do not contain the denied paths (sandbox.filesystem \
                      allowRead/allowWrite, --ro/--rw), or use backend bwrap, which masks them"
                    .into(),
            });
            out.uncarved.push(Rule { path, rights });
            continue;
        }
        out.notes.push(format!(
            "{} is carved around {}: no new entries directly in the directories on the way",
            path.display(),
            inside
                .iter()
                .map(|t| t.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !spec.mounts.is_empty() {
        // What every process needs: its own /proc (host processes are visible there: the
        // tier has no PID namespace) and the harmless device nodes.
        out.rules.push(Rule {
            path: PathBuf::from("/proc"),
            rights: Rights::Read,
        });
        out.rules.extend(DEVICES.iter().map(|d| Rule {
            path: PathBuf::from(d),
            rights: Rights::Device,
        }));
    }
    out
}

/// The rights a directory on the way to `inside` keeps for itself: none on the way to a
/// hidden directory, listing only on the way to a hidden file, read on the way to a
/// read-only path.
fn own_rights(inside: &[Target], rights: Rights) -> Option<Rights> {
    if inside.iter().any(|t| t.want == Want::Hide { dir: true }) {
        None
    } else if inside.iter().any(|t| t.want == Want::Hide { dir: false }) {
        Some(Rights::List)
    } else if rights == Rights::ReadWrite {
        Some(Rights::Read)
    } else {
        Some(rights)
    }
}

/// Grants `rights` on every entry of `dir` except the way to each target (recursively).
fn carve(
    dir: &Path,
    rights: Rights,
    targets: &[Target],
    list: &dyn Fn(&Path) -> std::io::Result<Vec<Entry>>,
    out: &mut Vec<Rule>,
    budget: &mut usize,
) -> Result<(), String> {
    let entries = list(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for e in entries {
        if e.is_symlink {
            continue;
        }
        let under: Vec<Target> = targets
            .iter()
            .filter(|t| t.path.starts_with(&e.path))
            .cloned()
            .collect();
        let exact = under.iter().find(|t| t.path == e.path).map(|t| t.want);
        let below: Vec<Target> = under.iter().filter(|t| t.path != e.path).cloned().collect();
        let (own, rest, rest_rights) = match exact {
            _ if under.is_empty() => (Some(rights), Vec::new(), rights),
            Some(Want::Hide { .. }) => continue,
            Some(Want::ReadOnly) => {
                let hides: Vec<Target> = below
                    .into_iter()
                    .filter(|t| matches!(t.want, Want::Hide { .. }))
                    .collect();
                if hides.is_empty() {
                    (Some(Rights::Read), Vec::new(), Rights::Read)
                } else {
                    (own_rights(&hides, Rights::Read), hides, Rights::Read)
                }
            }
            None => (own_rights(&below, rights), below, rights),
        };
        // Listing is a directory right: a file on the way gets none.
        if let Some(r) = own.filter(|r| e.is_dir || *r != Rights::List) {
            if *budget == 0 {
                return Err(format!("more than {CARVE_BUDGET} rules would be needed"));
            }
            *budget -= 1;
            out.push(Rule {
                path: e.path.clone(),
                rights: r,
            });
        }
        if !rest.is_empty() {
            if !e.is_dir {
                continue;
            }
            carve(&e.path, rest_rights, &rest, list, out, budget)?;
        }
    }
    Ok(())
}

mod build;
#[cfg(test)]
mod tests;

pub use build::{build, list_dir, BuildError};
