//! Plain serde types for the configuration file. Every struct rejects unknown keys; keys
//! starting with `_comment` are stripped before deserialisation (see `load`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A whole configuration file, in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayConfig {
    /// Servers in the order the file lists them (order decides tool listing order).
    pub servers: Vec<(String, ServerConfig)>,
    pub settings: Settings,
}

impl GatewayConfig {
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    /// Whether any server would run under `backend`: its own choice, or else the global one.
    /// Start-up probes only what the config can use (srt's probe runs Node: 100-300 ms).
    pub fn uses_backend(&self, backend: Backend) -> bool {
        self.servers.iter().any(|(_, s)| {
            let own = match &s.sandbox {
                SandboxSetting::Enabled(c) => c.backend,
                SandboxSetting::Disabled => return false,
            };
            own.or(self.settings.backend) == Some(backend)
        })
    }
}

/// One downstream server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the server (inside the sandbox: the same absolute path).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Free text, as IronCurtain's files carry it.
    #[serde(default)]
    pub description: Option<String>,
    /// `false` opts out of the sandbox; absent means the restrictive default.
    #[serde(default)]
    pub sandbox: SandboxSetting,
    /// Claude Desktop's `type` (only "stdio" is supported).
    #[serde(default, rename = "type")]
    pub transport: Option<String>,
    /// Whether the server's sampling and elicitation requests are relayed to the agent
    /// (off unless set here or by the server's profile). Independent of `sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelayConfig>,
    /// Which of the server's tools the agent sees and may call (globs; deny wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<super::NameFilter>,
    /// Which of the server's prompts the agent sees and may get (globs; deny wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<super::NameFilter>,
    /// `false`: its tools and prompts keep their own names (no `SERVER__` prefix), so Palisade
    /// can stand in for this one server unseen. At most one server may say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<bool>,
    /// The protocol era Palisade speaks to this server: the newest it supports (`auto`, the
    /// default), or pinned (`"2025-11-25"`: the `initialize` handshake; `"2026-07-28"`: no
    /// handshake, refused at start if the server does not speak it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ServerProtocol>,
}

/// The per-server `protocol` key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerProtocol {
    /// `server/discover` first; 2026-07-28 if the server names it, else `initialize`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// The `initialize` handshake (2025-11-25 or older, as the server answers). For servers
    /// that ask for roots, sampling or elicitation outside a request, which 2026-07-28 has no
    /// channel for.
    #[serde(rename = "2025-11-25")]
    Handshake,
    /// 2026-07-28 only.
    #[serde(rename = "2026-07-28")]
    Sessionless,
}

/// The per-server `relay` key: which server-to-client requests reach the agent, and how many.
/// Every field is optional so that a server's setting can override its profile's field by
/// field; `gateway::server::relay::RelayPolicy::resolve` applies the defaults (off; 2 in flight; 20
/// per minute).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RelayConfig {
    /// Relay `sampling/createMessage` (the agent's LLM answers the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<bool>,
    /// Relay form `elicitation/create` (the person behind the agent answers the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<bool>,
    /// Relayed requests of this server in flight at once; more are refused at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// Relayed requests of this server per minute (a token bucket of this size); more are
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
}

impl RelayConfig {
    /// `self`'s fields where set, else `base`'s (a server's setting over its profile's).
    pub fn over(&self, base: &RelayConfig) -> RelayConfig {
        RelayConfig {
            sampling: self.sampling.or(base.sampling),
            elicitation: self.elicitation.or(base.elicitation),
            max_concurrent: self.max_concurrent.or(base.max_concurrent),
            per_minute: self.per_minute.or(base.per_minute),
        }
    }
}

/// The per-server `sandbox` key: `false`, absent/`true`, or an object.
// A config is parsed once per start; the size difference between variants is irrelevant.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum SandboxSetting {
    /// `"sandbox": false`: the user explicitly runs this server unsandboxed.
    Disabled,
    Enabled(SandboxConfig),
}

impl Default for SandboxSetting {
    fn default() -> Self {
        SandboxSetting::Enabled(SandboxConfig::default())
    }
}

impl<'de> Deserialize<'de> for SandboxSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Not an untagged enum: those swallow the inner error, and a typo inside `sandbox`
        // must be reported with its field name.
        let value = serde_json::Value::deserialize(d)?;
        match value {
            serde_json::Value::Bool(true) => Ok(SandboxSetting::default()),
            serde_json::Value::Bool(false) => Ok(SandboxSetting::Disabled),
            serde_json::Value::Object(_) => serde_json::from_value::<SandboxConfig>(value)
                .map(SandboxSetting::Enabled)
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "expected false, true or an object, found {other}"
            ))),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SandboxConfig {
    #[serde(default)]
    pub filesystem: FilesystemConfig,
    #[serde(default)]
    pub network: NetworkConfig,
    /// A profile from `sandbox-profiles/` by name; otherwise matched from the command.
    #[serde(default)]
    pub profile: Option<String>,
    /// Per-server override of the global sandbox policy.
    #[serde(default)]
    pub policy: Option<SandboxPolicy>,
    #[serde(default)]
    pub backend: Option<Backend>,
    #[serde(default)]
    pub limits: Option<Limits>,
}

/// Filesystem grants, in srt/IronCurtain vocabulary. Paths may start with `~`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilesystemConfig {
    #[serde(default)]
    pub allow_write: Vec<String>,
    #[serde(default)]
    pub allow_read: Vec<String>,
    #[serde(default)]
    pub deny_read: Vec<String>,
    #[serde(default)]
    pub deny_write: Vec<String>,
    /// Keep `.git/hooks`, `.git/config`, shell rc files and the like read-only inside
    /// writable grants, three levels deep (default `true`; see `sandbox::write_protect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect_dangerous_files: Option<bool>,
}

/// `false` (default): loopback only. An object: HTTP(S) to an allowlist through the proxy.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub enum NetworkConfig {
    #[default]
    None,
    Allowlist(DomainLists),
}

impl<'de> Deserialize<'de> for NetworkConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        match value {
            serde_json::Value::Bool(false) | serde_json::Value::Null => Ok(NetworkConfig::None),
            serde_json::Value::Object(_) => serde_json::from_value::<DomainLists>(value)
                .map(NetworkConfig::Allowlist)
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "expected false or {{\"allowedDomains\": [...]}}, found {other} \
                 (unrestricted network is not offered; list the domains the server needs)"
            ))),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DomainLists {
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    #[serde(default)]
    pub denied_domains: Vec<String>,
}

/// Resource limits per server. `None` fields take the defaults in `sandbox::spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub processes: Option<u64>,
    #[serde(default)]
    pub open_files: Option<u64>,
    #[serde(default)]
    pub cpu_seconds: Option<u64>,
    /// Bytes per second the server may write on stdout and stderr together, with bursts of
    /// eight seconds' worth; over it the gateway kills and restarts the server. Enforced by
    /// the gateway's pipe readers, so it applies under every backend.
    #[serde(default)]
    pub output_bytes_per_second: Option<u64>,
    /// `false`: never put the server in a cgroup (palisade leaves the cgroup tree alone);
    /// memory and tasks are then limited by the rlimit fallbacks only.
    #[serde(default)]
    pub cgroup: Option<bool>,
}

/// What to do when a server cannot be contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SandboxPolicy {
    /// Refuse to run what cannot be contained.
    #[default]
    Enforce,
    /// Run it anyway, loudly, and record that.
    Warn,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// bubblewrap where it can create its namespaces, else Landlock, else what
    /// `sandboxPolicy` says (enforce refuses, warn runs the server unsandboxed, loudly).
    #[default]
    Auto,
    /// Palisade's own bubblewrap sandbox.
    Bwrap,
    /// Landlock + seccomp + no_new_privs, no namespaces needed (containers, hosts without
    /// user namespaces); see docs/security.md for what it does not enforce.
    Landlock,
    /// Anthropic's sandbox-runtime (`srt`).
    Srt,
}

impl Backend {
    /// The name used in configs, flags, logs and the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Bwrap => "bwrap",
            Backend::Landlock => "landlock",
            Backend::Srt => "srt",
        }
    }
}

/// The optional `"palisade"` block. Command-line flags override each field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    #[serde(default)]
    pub sandbox_policy: Option<SandboxPolicy>,
    #[serde(default)]
    pub backend: Option<Backend>,
    #[serde(default)]
    pub audit_log: Option<PathBuf>,
    #[serde(default)]
    pub escalation: Option<String>,
    #[serde(default)]
    pub escalation_timeout: Option<u64>,
    #[serde(default)]
    pub sandbox_dir: Option<PathBuf>,
    #[serde(default)]
    pub policy: Option<PathBuf>,
    #[serde(default)]
    pub annotations: Option<PathBuf>,
    #[serde(default)]
    pub lists: Option<PathBuf>,
    /// Extra paths the policy always denies (palisade's own files are always protected).
    #[serde(default)]
    pub protected_paths: Vec<PathBuf>,
    /// Per-request timeout towards downstream servers, in seconds.
    #[serde(default)]
    pub call_timeout: Option<u64>,
    /// With an agent on stdio: the longest the gateway's thread spins watching its pipes
    /// before it sleeps, in microseconds (default 200, 0 off; `crate::gateway::busy_poll`).
    #[serde(default)]
    pub busy_poll_micros: Option<u64>,
    /// Timeout for a downstream server's initialize handshake, in seconds.
    #[serde(default)]
    pub startup_timeout: Option<u64>,
    /// How long the gateway waits for its servers before it answers the agent, in seconds
    /// (default: `startupTimeout`); servers still starting then join late, with
    /// `notifications/tools/list_changed`.
    #[serde(default)]
    pub ready_timeout: Option<u64>,
    /// Directory holding sandbox profiles that override the built-in ones.
    #[serde(default)]
    pub profiles_dir: Option<PathBuf>,
    /// The pins file: each server's tool definitions as approved (`crate::pins`).
    #[serde(default)]
    pub pins: Option<PathBuf>,
    /// What a tool whose definition changed gets (default `enforce` with a pins file).
    #[serde(default)]
    pub pinning: Option<crate::pins::Mode>,
    /// What a server seen for the first time gets: `trust` (pin on first use) or `ask`.
    #[serde(default)]
    pub pin_new: Option<crate::pins::NewServers>,
    /// The HTTP front (`serve --http`).
    #[serde(default)]
    pub http: Option<HttpSettings>,
    /// Test and operations knob (undocumented in the configuration reference; see
    /// docs/network.md): an `/etc/hosts`-style file whose names the egress proxy resolves to
    /// the given addresses instead of asking the system resolver.
    #[serde(default)]
    pub egress_hosts_file: Option<PathBuf>,
    /// Where servers whose profile keeps state get their private directories
    /// (`STATE_DIR/<server>`; default `$HOME/.local/state/palisade/servers`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

/// `"http"` in the `palisade` block: MCP Streamable HTTP for remote agents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpSettings {
    /// `HOST:PORT` to listen on (`--http`).
    #[serde(default)]
    pub listen: Option<String>,
    /// `PRINCIPAL SHA256HEX` lines (`--tokens`).
    #[serde(default)]
    pub tokens: Option<PathBuf>,
    /// Browser origins allowed besides loopback ones on a loopback listener.
    #[serde(default)]
    pub allow_origins: Vec<String>,
    /// Seconds without a request after which a principal's servers stop (default 900).
    #[serde(default)]
    pub idle_timeout: Option<u64>,
    /// Principals with servers running at once (default 200).
    #[serde(default)]
    pub max_principals: Option<usize>,
    /// Largest request body in bytes (default 4 MiB).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// One principal's requests in flight at once (default 16); more get 429.
    #[serde(default)]
    pub max_requests_per_principal: Option<usize>,
    /// One principal's requests per minute (default: no rate limit; the cap above applies).
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// How many requests a principal may send at once under `requestsPerMinute` (default:
    /// one minute's worth).
    #[serde(default)]
    pub request_burst: Option<u32>,
    /// Seconds the requests in flight get to finish on SIGTERM (default 10).
    #[serde(default)]
    pub shutdown_grace: Option<u64>,
    /// JWKS file whose keys sign accepted JWT access tokens (`--jwks`).
    #[serde(default)]
    pub jwks: Option<PathBuf>,
    /// An `https://` URL (or a loopback `http://` one) serving that JWKS instead of a file
    /// (`--jwks-url`).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// PEM CA certificates trusted for an `https://` `jwksUrl` besides the system's
    /// (`--jwks-ca`).
    #[serde(default)]
    pub jwks_ca: Option<PathBuf>,
    /// Seconds between two fetches of `jwksUrl` at least (default 30).
    #[serde(default)]
    pub jwks_refetch: Option<u64>,
    /// The `iss` of accepted JWT access tokens.
    #[serde(default)]
    pub jwt_issuer: Option<String>,
    /// The `aud` of accepted JWT access tokens: this resource.
    #[serde(default)]
    pub jwt_audience: Option<String>,
    /// Scopes every accepted JWT access token must grant.
    #[serde(default)]
    pub jwt_scopes: Vec<String>,
}
