//! The pins file: per server and tool, the definition a person trusted and its digest, plus
//! the changes seen since and held for review. JSON, written atomically (a temporary file in
//! the same directory, then a rename), mode 0600, read-modify-write under a lock on its
//! directory (the gateway and `palisade pins approve` may write it at the same time).
//!
//! Refused, with the file and the fix named, rather than read as "trust everything": a file
//! that is malformed, unreadable, owned by another user, or writable by group or others.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::review::ChangeKind;

#[derive(Debug, thiserror::Error)]
pub enum PinsError {
    #[error("pins file {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(
        "pins file {path} is malformed ({why}); fix it, or move it away to pin again from scratch"
    )]
    Malformed { path: PathBuf, why: String },
    #[error("pins file {path} {why}")]
    Unsafe { path: PathBuf, why: String },
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PinsFile {
    #[serde(default = "version_one")]
    pub version: u32,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerPins>,
}

fn version_one() -> u32 {
    1
}

impl Default for PinsFile {
    fn default() -> Self {
        PinsFile {
            version: 1,
            servers: BTreeMap::new(),
        }
    }
}

/// One server's pins. Its presence means the server has been pinned (a tool it lists later
/// is an addition, not a first contact).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerPins {
    #[serde(default)]
    pub tools: BTreeMap<String, ToolPin>,
    /// Definitions seen that differ from the pins, held for review.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending: BTreeMap<String, PendingTool>,
}

/// A trusted definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolPin {
    pub digest: String,
    pub definition: Value,
    pub approved_at: String,
    /// `first use`, `pins approve`, or the approver that accepted it.
    pub approved_by: String,
}

/// A definition seen that is not the pinned one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PendingTool {
    pub kind: ChangeKind,
    pub digest: String,
    pub definition: Value,
    pub seen_at: String,
}

impl PinsFile {
    /// The server's pinned tools; `None` when it has never been pinned.
    pub fn server(&self, name: &str) -> Option<&BTreeMap<String, ToolPin>> {
        self.servers.get(name).map(|s| &s.tools)
    }

    /// Pins `tools` (name, definition, digest) of a server seen for the first time.
    pub fn pin_first_use(&mut self, server: &str, tools: &[(String, Value, String)], at: &str) {
        let entry = self.servers.entry(server.to_string()).or_default();
        for (name, definition, digest) in tools {
            entry.tools.insert(
                name.clone(),
                ToolPin {
                    digest: digest.clone(),
                    definition: definition.clone(),
                    approved_at: at.to_string(),
                    approved_by: "first use".into(),
                },
            );
        }
    }

    /// Records changes for review; true when the file changed (a change already pending
    /// with the same digest is not news).
    pub fn hold(&mut self, server: &str, changes: &[super::Change], at: &str) -> bool {
        let entry = self.servers.entry(server.to_string()).or_default();
        let mut news = false;
        for c in changes {
            if entry
                .pending
                .get(&c.tool)
                .is_some_and(|p| p.digest == c.digest)
            {
                continue;
            }
            entry.pending.insert(
                c.tool.clone(),
                PendingTool {
                    kind: c.kind,
                    digest: c.digest.clone(),
                    definition: c.definition.clone(),
                    seen_at: at.to_string(),
                },
            );
            news = true;
        }
        news
    }

    /// Accepts the pending definition of `server`'s `tool`; false when none is pending.
    pub fn approve(&mut self, server: &str, tool: &str, by: &str, at: &str) -> bool {
        let Some(entry) = self.servers.get_mut(server) else {
            return false;
        };
        let Some(p) = entry.pending.remove(tool) else {
            return false;
        };
        entry.tools.insert(
            tool.to_string(),
            ToolPin {
                digest: p.digest,
                definition: p.definition,
                approved_at: at.to_string(),
                approved_by: by.to_string(),
            },
        );
        true
    }

    /// Every pending (server, tool), in order.
    pub fn pending(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .flat_map(|(s, p)| p.pending.keys().map(move |t| (s.clone(), t.clone())))
            .collect()
    }
}

/// Loads the file; a missing file is an empty one (it is created on the first write).
pub fn load(path: &Path) -> Result<PinsFile, PinsError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PinsFile::default()),
        Err(source) => {
            return Err(PinsError::Io {
                path: path.into(),
                cause: source,
            })
        }
    };
    check_safe(path, &meta)?;
    let text = std::fs::read_to_string(path).map_err(|source| PinsError::Io {
        path: path.into(),
        cause: source,
    })?;
    let file: PinsFile = serde_json::from_str(&text).map_err(|e| PinsError::Malformed {
        path: path.into(),
        why: e.to_string(),
    })?;
    if file.version != 1 {
        return Err(PinsError::Malformed {
            path: path.into(),
            why: format!("version {} is not 1", file.version),
        });
    }
    Ok(file)
}

/// Whether pins from this file can be trusted: ours, and nobody else can change them.
fn check_safe(path: &Path, meta: &std::fs::Metadata) -> Result<(), PinsError> {
    let unsafe_ = |why: String| PinsError::Unsafe {
        path: path.into(),
        why,
    };
    if !meta.is_file() {
        return Err(unsafe_(
            "is not a regular file; give the path of a file".into(),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_(format!(
            "is owned by uid {}, not by this user (uid {me}); pins another user can change \
             protect nothing: use a file of your own",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_(format!(
            "is writable by group or others (mode {:o}); run `chmod 600 {}`",
            meta.mode() & 0o777,
            path.display()
        )));
    }
    Ok(())
}

/// Loads, changes and saves the file under an exclusive lock on its directory. `change`
/// returns whether anything changed (nothing is written otherwise).
pub fn update<T>(
    path: &Path,
    change: impl FnOnce(&mut PinsFile) -> (bool, T),
) -> Result<T, PinsError> {
    let io = |source| PinsError::Io {
        path: path.into(),
        cause: source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir_fd = std::fs::File::open(dir).map_err(io)?;
    let _lock = nix::fcntl::Flock::lock(dir_fd, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| io(e.into()))?;
    let mut file = load(path)?;
    let (changed, out) = change(&mut file);
    if changed {
        save(path, &file)?;
    }
    Ok(out)
}

/// Writes the file atomically, mode 0600.
fn save(path: &Path, file: &PinsFile) -> Result<(), PinsError> {
    let io = |source| PinsError::Io {
        path: path.into(),
        cause: source,
    };
    let mut text = serde_json::to_string_pretty(file).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::approval::dir::write_atomically(dir, path, text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn round_trip_approve_and_refusals() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("pins.json");
        assert_eq!(load(&path).unwrap(), PinsFile::default());
        let def = json!({"name": "read"});
        update(&path, |f| {
            f.pin_first_use(
                "fs",
                &[("read".into(), def.clone(), "sha256:a".into())],
                "t0",
            );
            (true, ())
        })
        .unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let change = crate::pins::Change {
            tool: "read".into(),
            kind: ChangeKind::Changed,
            definition: json!({"name": "read", "description": "new"}),
            digest: "sha256:b".into(),
        };
        let news = update(&path, |f| {
            let n = f.hold("fs", std::slice::from_ref(&change), "t1");
            (n, n)
        })
        .unwrap();
        assert!(news);
        assert!(
            !load(&path).unwrap().hold("fs", &[change], "t2"),
            "already pending"
        );
        assert_eq!(
            load(&path).unwrap().pending(),
            [("fs".into(), "read".into())]
        );
        update(&path, |f| {
            let ok = f.approve("fs", "read", "pins approve", "t3");
            (ok, ())
        })
        .unwrap();
        let f = load(&path).unwrap();
        assert_eq!(f.server("fs").unwrap()["read"].digest, "sha256:b");
        assert!(f.pending().is_empty());

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("malformed") && e.contains("pins.json"), "{e}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}
