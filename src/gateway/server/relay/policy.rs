//! Which of a server's sampling and elicitation requests may reach the agent: the per-server
//! policy (its `relay` over its profile's), the request kinds, the refusals and their
//! messages, and the checks against the policy and the agent's declared capabilities.
//!
//! Pure, except `RelayPolicy::for_server`, which reads the profiles directory once at start.
//! Never: let anything through that the server's `relay` does not turn on.

use rmcp::model::ClientCapabilities;

use crate::audit::RecordKind;
use crate::config::{RelayConfig, ServerConfig, Settings};

/// Relayed requests of one server in flight at once, unless its config says otherwise.
pub const DEFAULT_MAX_CONCURRENT: u32 = 2;
/// Relayed requests of one server per minute, unless its config says otherwise.
pub const DEFAULT_PER_MINUTE: u32 = 20;

/// What a server may have relayed, resolved from its config over its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayPolicy {
    pub sampling: bool,
    pub elicitation: bool,
    pub max_concurrent: u32,
    pub per_minute: u32,
}

impl Default for RelayPolicy {
    /// Nothing relayed.
    fn default() -> Self {
        RelayPolicy {
            sampling: false,
            elicitation: false,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            per_minute: DEFAULT_PER_MINUTE,
        }
    }
}

impl RelayPolicy {
    /// The server's `relay` fields where set, else its profile's, else off / the defaults.
    pub fn resolve(server: Option<&RelayConfig>, profile: Option<&RelayConfig>) -> RelayPolicy {
        let none = RelayConfig::default();
        let merged = server.unwrap_or(&none).over(profile.unwrap_or(&none));
        RelayPolicy {
            sampling: merged.sampling.unwrap_or(false),
            elicitation: merged.elicitation.unwrap_or(false),
            max_concurrent: merged
                .max_concurrent
                .unwrap_or(DEFAULT_MAX_CONCURRENT)
                .max(1),
            per_minute: merged.per_minute.unwrap_or(DEFAULT_PER_MINUTE).max(1),
        }
    }

    /// For server `name` of the config: its `relay` over the `relay` of the profile the
    /// launcher would pick for it. A profile that cannot be loaded or picked contributes
    /// nothing (the launcher then refuses the server anyway, with that reason).
    pub fn for_server(name: &str, server: &ServerConfig, settings: &Settings) -> RelayPolicy {
        let named = match &server.sandbox {
            crate::config::SandboxSetting::Enabled(sb) => sb.profile.as_deref(),
            crate::config::SandboxSetting::Disabled => None,
        };
        let profile = crate::profiles::Catalog::load(settings.profiles_dir.as_deref())
            .ok()
            .and_then(|catalog| {
                crate::profiles::select(&catalog, named, &server.command, &server.args)
                    .map_err(|e| tracing::debug!(server = %name, "relay: no profile: {e}"))
                    .ok()
                    .flatten()
            })
            .and_then(|s| s.profile.relay);
        RelayPolicy::resolve(server.relay.as_ref(), profile.as_ref())
    }

    pub(super) fn allows(&self, kind: Kind) -> bool {
        match kind {
            Kind::Sampling => self.sampling,
            Kind::Elicitation => self.elicitation,
        }
    }
}

/// The two relayed request kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sampling,
    Elicitation,
}

impl Kind {
    /// The MCP method, as the audit record's tool name.
    pub fn method(self) -> &'static str {
        match self {
            Kind::Sampling => "sampling/createMessage",
            Kind::Elicitation => "elicitation/create",
        }
    }

    /// The `relay` key that allows it.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Sampling => "sampling",
            Kind::Elicitation => "elicitation",
        }
    }

    pub(super) fn record_kind(self) -> RecordKind {
        match self {
            Kind::Sampling => RecordKind::Sampling,
            Kind::Elicitation => RecordKind::Elicitation,
        }
    }
}

/// Why a request was not relayed. Its text is the error the server gets (and the audit
/// record's reason): what was refused, why, and how to allow it where the user can.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "palisade does not relay {method} from server `{server}` to the agent: relaying is off \
         for this server (a compromised server could use the agent's {what}). To allow it, set \
         \"relay\": {{\"{key}\": true}} on mcpServers.{server} in the palisade config",
        method = kind.method(),
        key = kind.key(),
        what = match kind { Kind::Sampling => "model", Kind::Elicitation => "user to ask leading questions" },
    )]
    NotAllowed { server: String, kind: Kind },
    #[error("palisade cannot relay {}: no MCP client is connected to the gateway", kind.method())]
    NoAgent { kind: Kind },
    #[error(
        "palisade cannot relay {}: the agent's MCP client did not declare {} support",
        kind.method(),
        match kind { Kind::Sampling => "sampling", Kind::Elicitation => "form elicitation" }
    )]
    AgentLacks { kind: Kind },
    #[error("palisade does not relay {what} (it does not declare that capability downstream)")]
    Unsupported { what: &'static str },
    /// A 2026-07-28 agent is asked in a call's next round; this request has no call to go in.
    #[error("palisade cannot relay {} to a 2026-07-28 client: {why}", kind.method())]
    NoRound { kind: Kind, why: &'static str },
    /// No one request in flight is the one this request serves.
    #[error("palisade cannot relay {}: {why}", kind.method())]
    Untold { kind: Kind, why: &'static str },
    #[error(
        "palisade refused {method} from server `{server}`: more than {per_minute} relayed \
         requests per minute. Raise mcpServers.{server}.relay.perMinute if this is expected",
        method = kind.method()
    )]
    RateLimited {
        server: String,
        kind: Kind,
        per_minute: u32,
    },
    #[error(
        "palisade refused {method} from server `{server}`: {max} relayed requests are already \
         in flight. Raise mcpServers.{server}.relay.maxConcurrent if this is expected",
        method = kind.method()
    )]
    Busy {
        server: String,
        kind: Kind,
        max: u32,
    },
}

/// Whether the agent's client takes `kind`: sampling declared; elicitation declared with
/// form mode (an empty `elicitation` object means form, per the spec).
fn agent_takes(kind: Kind, caps: &ClientCapabilities) -> bool {
    match kind {
        Kind::Sampling => caps.sampling.is_some(),
        Kind::Elicitation => caps
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none()),
    }
}

/// The policy and agent checks of one request (pure). `agent` is `None` when no client is
/// connected.
pub fn admit(
    kind: Kind,
    policy: &RelayPolicy,
    server: &str,
    agent: Option<&ClientCapabilities>,
) -> Result<(), Refusal> {
    if !policy.allows(kind) {
        return Err(Refusal::NotAllowed {
            server: server.to_string(),
            kind,
        });
    }
    match agent {
        None => Err(Refusal::NoAgent { kind }),
        Some(caps) if !agent_takes(kind, caps) => Err(Refusal::AgentLacks { kind }),
        Some(_) => Ok(()),
    }
}

/// What the downstream client declares to this server: a kind is declared when the server
/// may have it relayed and the agent takes it, or the agent is not known yet (servers start
/// before the agent connects; a request the agent then cannot take is refused by `admit`).
pub fn declared(policy: &RelayPolicy, agent: Option<&ClientCapabilities>) -> (bool, bool) {
    let one = |kind| policy.allows(kind) && agent.is_none_or(|caps| agent_takes(kind, caps));
    (one(Kind::Sampling), one(Kind::Elicitation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitationCapability, FormElicitationCapability, UrlElicitationCapability};

    fn on() -> RelayPolicy {
        RelayPolicy {
            sampling: true,
            elicitation: true,
            ..RelayPolicy::default()
        }
    }

    fn caps(sampling: bool, elicitation: Option<ElicitationCapability>) -> ClientCapabilities {
        let mut c = ClientCapabilities::default();
        if sampling {
            c.sampling = Some(Default::default());
        }
        c.elicitation = elicitation;
        c
    }

    #[test]
    fn the_server_setting_wins_field_by_field_over_its_profile() {
        let profile = RelayConfig {
            sampling: Some(true),
            elicitation: Some(true),
            max_concurrent: Some(4),
            per_minute: None,
        };
        let server = RelayConfig {
            elicitation: Some(false),
            per_minute: Some(3),
            ..Default::default()
        };
        let p = RelayPolicy::resolve(Some(&server), Some(&profile));
        assert_eq!(
            p,
            RelayPolicy {
                sampling: true,
                elicitation: false,
                max_concurrent: 4,
                per_minute: 3
            }
        );
        assert_eq!(RelayPolicy::resolve(None, None), RelayPolicy::default());
        assert!(!RelayPolicy::default().sampling && !RelayPolicy::default().elicitation);
    }

    #[test]
    fn a_profile_may_turn_relaying_on_and_the_server_config_off_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("asker.json"),
            r#"{"description": "a server that asks", "match": {"executables": ["asker"]},
                "relay": {"sampling": true, "elicitation": true, "perMinute": 7}}"#,
        )
        .unwrap();
        let cfg = crate::config::parse_str(
            &format!(
                r#"{{"mcpServers": {{
                    "a": {{"command": "/opt/bin/asker"}},
                    "b": {{"command": "/opt/bin/asker", "relay": {{"elicitation": false}}}},
                    "c": {{"command": "/opt/bin/other"}}}},
                  "palisade": {{"profilesDir": "{}"}}}}"#,
                dir.path().display()
            ),
            "c.json",
        )
        .unwrap();
        let policy = |i: usize| {
            let (name, server) = &cfg.servers[i];
            RelayPolicy::for_server(name, server, &cfg.settings)
        };
        assert_eq!(
            (
                policy(0).sampling,
                policy(0).elicitation,
                policy(0).per_minute
            ),
            (true, true, 7)
        );
        assert_eq!((policy(1).sampling, policy(1).elicitation), (true, false));
        assert_eq!(policy(2), RelayPolicy::default());
        // No built-in profile turns relaying on.
        let builtin = crate::profiles::Catalog::builtin().unwrap();
        for (p, _) in builtin.iter() {
            assert_eq!(p.relay, None, "profile {}", p.name);
        }
    }

    #[test]
    fn refusals_say_why_and_how_to_allow() {
        let off = RelayPolicy::default();
        let agent = caps(true, Some(ElicitationCapability::default()));
        let e = admit(Kind::Sampling, &off, "everything", Some(&agent)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("sampling/createMessage"), "{text}");
        assert!(
            text.contains("\"relay\": {\"sampling\": true}")
                && text.contains("mcpServers.everything"),
            "{text}"
        );
        // Off wins over every other reason: nothing about the agent is revealed or needed.
        assert!(matches!(
            admit(Kind::Elicitation, &off, "x", None),
            Err(Refusal::NotAllowed { .. })
        ));
        assert_eq!(
            admit(Kind::Sampling, &on(), "x", None),
            Err(Refusal::NoAgent {
                kind: Kind::Sampling
            })
        );
        assert_eq!(
            admit(Kind::Sampling, &on(), "x", Some(&caps(false, None))),
            Err(Refusal::AgentLacks {
                kind: Kind::Sampling
            })
        );
        assert_eq!(admit(Kind::Sampling, &on(), "x", Some(&agent)), Ok(()));
        assert_eq!(admit(Kind::Elicitation, &on(), "x", Some(&agent)), Ok(()));
    }

    #[test]
    fn url_only_elicitation_clients_do_not_take_form_requests() {
        let url_only = caps(
            false,
            Some(ElicitationCapability::new().with_url(UrlElicitationCapability::default())),
        );
        assert!(admit(Kind::Elicitation, &on(), "x", Some(&url_only)).is_err());
        let both = caps(
            false,
            Some(
                ElicitationCapability::new()
                    .with_url(UrlElicitationCapability::default())
                    .with_form(FormElicitationCapability::default()),
            ),
        );
        assert!(admit(Kind::Elicitation, &on(), "x", Some(&both)).is_ok());
    }

    #[test]
    fn declared_follows_the_policy_and_a_known_agent() {
        assert_eq!(declared(&RelayPolicy::default(), None), (false, false));
        assert_eq!(declared(&on(), None), (true, true), "agent unknown yet");
        assert_eq!(
            declared(&on(), Some(&caps(true, None))),
            (true, false),
            "a known agent without elicitation"
        );
        let only_sampling = RelayPolicy {
            sampling: true,
            ..RelayPolicy::default()
        };
        assert_eq!(
            declared(&only_sampling, Some(&caps(true, Some(Default::default())))),
            (true, false)
        );
    }
}
