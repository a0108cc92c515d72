//! Sandbox profiles: what a known MCP server needs inside palisade's closed-by-default
//! sandbox (extra reads, a private state directory, env, network, a relaxation and why), how
//! its roots become arguments, and which tool reports its roots.
//!
//! Sits between `config` and `sandbox::launch`: `catalog` loads the built-in profiles
//! (`sandbox-profiles/*.json`, compiled in) and a user directory that overrides them,
//! `select` picks one by name or from the command line (pure), and `apply` turns one into
//! concrete additions for a launch (pure). Never starts processes; only `catalog` reads files.
//!
//! A profile only ever widens the sandbox by what it lists, each widening visible in
//! `palisade profiles show`; anything it does not list stays closed.

pub mod apply;
pub mod catalog;
pub mod select;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use apply::{plan, Context, Plan};
pub use catalog::{Catalog, ProfileError, ProfileSource};
pub use select::{select, SelectError, Selected};

/// One profile, as written in `sandbox-profiles/NAME.json` (the name is the file stem).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Profile {
    /// Filled from the file name; not written in the file.
    #[serde(skip)]
    pub name: String,
    pub description: String,
    /// How a configured command is recognised as this server.
    #[serde(rename = "match", default)]
    pub matches: MatchRules,
    /// Paths the server reads beyond its runtime closure (absolute or `~/...`), read-only.
    /// A path missing on this machine is skipped (and shown as absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// The server keeps state: it gets a private read-write directory that persists across
    /// its restarts; `${STATE_DIR}` in `env` names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateRule>,
    /// Environment the server needs. Values may use `${STATE_DIR}` and `${HOME}`. The
    /// user's own `env` wins over these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `false`: loopback only. An object: domains it needs (added to the user's allowlist).
    #[serde(default)]
    pub network: ProfileNetwork,
    /// How the server's roots become its command-line arguments or environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots_as: Option<RootsAs>,
    /// The tool that reports the server's current roots, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots_tool: Option<String>,
    /// Relaxations of the default sandbox, each with its reason.
    #[serde(default, skip_serializing_if = "Relax::is_empty")]
    pub relax: Relax,
    /// Relaying of the server's sampling and elicitation requests to the agent (the
    /// server's own `relay` key overrides it field by field). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<crate::config::RelayConfig>,
    /// How the server's package is fetched when a package runner (`npx -y`) starts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageRule>,
}

/// A profile's `package` section: what the fetch of the server's package may do beyond the
/// default (see `crate::packages`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageRule {
    /// Run npm's install scripts (`preinstall`, `install`, `postinstall`) during the fetch,
    /// still inside the fetch sandbox. Off when absent.
    #[serde(default)]
    pub install_scripts: bool,
    /// Why the package needs them (shown to the user).
    pub reason: String,
}

impl Profile {
    /// Whether the fetch of this server's package runs its install scripts.
    pub fn install_scripts(&self) -> bool {
        self.package.as_ref().is_some_and(|p| p.install_scripts)
    }
}

/// How a command line is recognised. Any one rule matching selects the profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchRules {
    /// npm package names: `npx PKG[@version]`, `.../node_modules/PKG/...`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// Executable names (file name of the command, or what `uvx`/`npx` is asked to run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executables: Vec<String>,
    /// Python modules run with `python -m MODULE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_modules: Vec<String>,
    /// Argument-vector prefixes; the first element is compared with the command's file name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv_prefixes: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StateRule {
    /// Why the server needs persistent state (shown to the user).
    pub reason: String,
}

/// A profile's network needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ProfileNetwork {
    /// Loopback only (`false`).
    #[default]
    None,
    Domains {
        #[serde(rename = "allowedDomains")]
        allowed_domains: Vec<String>,
        reason: String,
    },
}

impl<'de> Deserialize<'de> for ProfileNetwork {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Domains {
            allowed_domains: Vec<String>,
            reason: String,
        }
        // Not untagged: an untagged enum would hide which key inside was wrong.
        let value = serde_json::Value::deserialize(d)?;
        match value {
            serde_json::Value::Bool(false) => Ok(ProfileNetwork::None),
            serde_json::Value::Object(_) => serde_json::from_value::<Domains>(value)
                .map(|d| ProfileNetwork::Domains {
                    allowed_domains: d.allowed_domains,
                    reason: d.reason,
                })
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "expected false or {{\"allowedDomains\": [...], \"reason\": \"...\"}}, found {other}"
            ))),
        }
    }
}

/// How roots are delivered to a server that reads them from its command line or env.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RootsAs {
    /// `{"args": "append"}`: each root appended as a positional argument.
    Args(RootsAsArgs),
    /// `{"flag": "--root"}`: `FLAG ROOT` per root (or only the first, `"only": "first"`).
    Flag(RootsAsFlag),
    /// `{"env": "NAME", "separator": ":"}`: all roots joined in one variable.
    Env(RootsAsEnv),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootsAsArgs {
    pub args: ArgsMode,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootsAsFlag {
    pub flag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Only>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootsAsEnv {
    pub env: String,
    pub separator: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgsMode {
    Append,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Only {
    First,
}

/// Relaxations of the default sandbox. Each value is the reason, shown to the user.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Relax {
    /// Keep the host PID namespace (Chromium's sandbox and zygote need to see their pids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_pid: Option<String>,
}

impl Relax {
    pub fn is_empty(&self) -> bool {
        self.share_pid.is_none()
    }
}
