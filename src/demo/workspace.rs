//! The demo's temporary workspace and the embedded gateway configuration that points the
//! built-in fs-server at it.
//!
//! Layout (all under one temporary directory, removed when `Workspace` is dropped):
//! `project/` is the fs-server's read-write root and the session sandbox dir (the policy
//! allows work there); `project/.git/hooks/` is a repository's hook directory, which the
//! sandbox keeps read-only inside every writable grant (`sandbox::write_protect`), so the
//! kernel refuses a planted hook although the policy and the server's own guard both see a
//! write inside a read-write root; `outside/secret.txt` is a planted file outside the
//! workspace that must never be returned.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

use crate::config::SandboxPolicy;

pub const NOTES_TEXT: &str = "Hello from the Palisade demo workspace.\n";
pub const SECRET_TEXT: &str = "demo-secret-7f3a: this must never reach the agent\n";

/// The temporary workspace. Dropping it removes everything.
pub struct Workspace {
    dir: tempfile::TempDir,
    /// Canonical path of the temporary directory.
    pub base: PathBuf,
}

impl Workspace {
    pub fn create() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("palisade-demo-")
            .tempdir()
            .context("cannot create the demo workspace")?;
        let base = dir
            .path()
            .canonicalize()
            .context("cannot resolve the demo workspace")?;
        let ws = Workspace { dir, base };
        std::fs::create_dir_all(ws.hooks_dir())?;
        std::fs::create_dir_all(ws.outside_dir())?;
        std::fs::write(ws.notes(), NOTES_TEXT)?;
        std::fs::write(
            ws.hooks_dir().join("pre-commit.sample"),
            "#!/bin/sh\n# a git hook runs on the user's next commit, outside any sandbox\n",
        )?;
        std::fs::write(ws.secret(), SECRET_TEXT)?;
        Ok(ws)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn project(&self) -> PathBuf {
        self.base.join("project")
    }
    /// A repository's hook directory: code there runs on the user's next commit.
    pub fn hooks_dir(&self) -> PathBuf {
        self.project().join(".git").join("hooks")
    }
    pub fn outside_dir(&self) -> PathBuf {
        self.base.join("outside")
    }
    pub fn notes(&self) -> PathBuf {
        self.project().join("notes.txt")
    }
    pub fn secret(&self) -> PathBuf {
        self.outside_dir().join("secret.txt")
    }
    /// Where the blocked write aims: a git hook, which would run outside any sandbox.
    pub fn blocked_write_target(&self) -> PathBuf {
        self.hooks_dir().join("pre-commit")
    }
    pub fn config_path(&self) -> PathBuf {
        self.base.join("palisade.json")
    }
    pub fn audit_log(&self) -> PathBuf {
        self.base.join("audit.jsonl")
    }
    pub fn gateway_log(&self) -> PathBuf {
        self.base.join("gateway.log")
    }

    /// Writes the embedded configuration; returns its text for the transcript.
    pub fn write_config(&self, palisade: &Path, policy: SandboxPolicy) -> anyhow::Result<Value> {
        let cfg = config(self, palisade, policy);
        let text = serde_json::to_string_pretty(&cfg)?;
        std::fs::write(self.config_path(), text).context("cannot write the demo config")?;
        Ok(cfg)
    }
}

/// The embedded default: one server, `fs`, the built-in fs-server over the project.
pub fn config(ws: &Workspace, palisade: &Path, policy: SandboxPolicy) -> Value {
    let p = |x: PathBuf| x.to_string_lossy().into_owned();
    json!({
        "mcpServers": {
            "fs": {
                "command": palisade.to_string_lossy(),
                "args": ["fs-server", "--root", p(ws.project())],
                "description": "palisade's built-in filesystem server over the demo workspace",
                "sandbox": {
                    "filesystem": {
                        "allowWrite": [p(ws.project())]
                    },
                    "network": false
                }
            }
        },
        "palisade": {
            "sandboxPolicy": match policy { SandboxPolicy::Enforce => "enforce", SandboxPolicy::Warn => "warn" },
            "sandboxDir": p(ws.project()),
            "auditLog": p(ws.audit_log())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_config_parses_with_palisades_own_loader() {
        let ws = Workspace::create().unwrap();
        let cfg = ws
            .write_config(Path::new("/usr/bin/palisade"), SandboxPolicy::Warn)
            .unwrap();
        let parsed = crate::config::load_file(&ws.config_path()).unwrap();
        let fs = parsed.server("fs").unwrap();
        assert_eq!(fs.args[0], "fs-server");
        assert_eq!(parsed.settings.sandbox_policy, Some(SandboxPolicy::Warn));
        assert_eq!(cfg["mcpServers"]["fs"]["command"], "/usr/bin/palisade");
        assert_eq!(std::fs::read_to_string(ws.secret()).unwrap(), SECRET_TEXT);
        let dir = ws.path().to_path_buf();
        drop(ws);
        assert!(!dir.exists(), "workspace must be removed on drop");
    }
}
