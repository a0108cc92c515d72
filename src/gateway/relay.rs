//! Relay of a downstream server's `sampling/createMessage` and form `elicitation/create`
//! requests to the agent. Sits in the downstream client (`downstream.rs`): what the server
//! asks comes in there, is admitted or refused here, goes up through the shared upstream
//! plumbing (`UpstreamLink::request`, with a timeout and cancellation) and comes back.
//!
//! Relaying is opt-in per server (`relay` in its config or profile): a compromised server
//! could otherwise spend the agent's model or put leading questions to the user. Each
//! request is checked in this order, every refusal answered at once with a JSON-RPC error
//! that says why and how to allow it: allowed for this server, agent connected and declared
//! the capability, nothing undeclared asked for (sampling tools, URL elicitation), a free
//! slot (`maxConcurrent`), a token (`perMinute`). Relayed requests are audited with their
//! outcome; refusals are audited within a per-server budget so that a flood stays cheap.
//!
//! Never: forward what was refused; let a server widen what the agent's model sees
//! (`includeContext` is always sent as absent); present an elicitation without the name of
//! the server that asks; hold a lock across an await.
#![allow(deprecated)] // sampling is deprecated in rmcp (SEP-2577) but servers still use it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientCapabilities, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ErrorCode, RequestMetaObject, ServerRequest,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleClient};
use serde_json::{json, Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::stages::{AuditSink, CallOutcome, CallRecord, Decision, PolicyVerdict};
use super::upstream_link::{UpstreamError, UpstreamLink};
use crate::audit::RecordKind;
use crate::config::{RelayConfig, ServerConfig, Settings};
use crate::sandbox::launch::Enforcement;

/// Relayed requests of one server in flight at once, unless its config says otherwise.
pub const DEFAULT_MAX_CONCURRENT: u32 = 2;
/// Relayed requests of one server per minute, unless its config says otherwise.
pub const DEFAULT_PER_MINUTE: u32 = 20;
/// Refusals of one server written to the audit log (and the log) per minute; the rest are
/// counted and the count goes into the next refusal's record.
pub const REFUSALS_AUDITED_PER_MINUTE: u32 = 10;
/// Characters of a prompt or question kept in the audit record.
const EXCERPT: usize = 500;
/// The `_meta` key naming the server a relayed request comes from.
pub const META_SERVER: &str = "palisade/server";

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

    fn allows(&self, kind: Kind) -> bool {
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

    fn record_kind(self) -> RecordKind {
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

/// A token bucket of `capacity` tokens refilled at `capacity` per minute. Pure: the caller
/// gives the time.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_sec: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn per_minute(n: u32, now: Instant) -> TokenBucket {
        let capacity = f64::from(n.max(1));
        TokenBucket {
            capacity,
            tokens: capacity,
            per_sec: capacity / 60.0,
            last: now,
        }
    }

    /// Takes a token if one is left at `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The refusal audit budget: a bucket, and the refusals not audited since the last one.
#[derive(Debug)]
struct RefusalBudget {
    bucket: TokenBucket,
    suppressed: u64,
}

/// One server's relay state: its policy, in-flight slots and rate bucket. Lives in the
/// server's slot, so a server that crashes and restarts keeps its budget.
#[derive(Debug)]
pub struct RelayGate {
    server: String,
    policy: RelayPolicy,
    in_flight: Arc<Semaphore>,
    rate: Mutex<TokenBucket>,
    refusals: Mutex<RefusalBudget>,
}

impl RelayGate {
    pub fn new(server: &str, policy: RelayPolicy) -> RelayGate {
        let now = Instant::now();
        RelayGate {
            server: server.to_string(),
            policy,
            in_flight: Arc::new(Semaphore::new(policy.max_concurrent as usize)),
            rate: Mutex::new(TokenBucket::per_minute(policy.per_minute, now)),
            refusals: Mutex::new(RefusalBudget {
                bucket: TokenBucket::per_minute(REFUSALS_AUDITED_PER_MINUTE, now),
                suppressed: 0,
            }),
        }
    }

    pub fn policy(&self) -> &RelayPolicy {
        &self.policy
    }

    /// A slot and a token for one admitted request, or why not. A slot is checked first so
    /// that a request refused for being one too many does not also spend a token.
    fn start(&self, kind: Kind) -> Result<OwnedSemaphorePermit, Refusal> {
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy {
                server: self.server.clone(),
                kind,
                max: self.policy.max_concurrent,
            })?;
        let token = self
            .rate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now());
        if !token {
            return Err(Refusal::RateLimited {
                server: self.server.clone(),
                kind,
                per_minute: self.policy.per_minute,
            });
        }
        Ok(permit)
    }

    /// Whether this refusal is audited: `Some(n)` with the refusals suppressed since the
    /// last audited one, `None` when over budget (it is counted).
    fn refusal_audited(&self) -> Option<u64> {
        let mut b = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if b.bucket.take(Instant::now()) {
            Some(std::mem::take(&mut b.suppressed))
        } else {
            b.suppressed += 1;
            None
        }
    }
}

/// What a downstream handler needs to relay: built at each start of the server.
#[derive(Clone)]
pub struct Relayer {
    pub gate: Arc<RelayGate>,
    pub upstream: UpstreamLink,
    pub audit: Arc<dyn AuditSink>,
    /// How long the agent has to answer. The gateway passes `callTimeout`: a relayed request
    /// serves a call the gateway itself bounds by `callTimeout`, so a longer wait would only
    /// keep the agent's model or user busy for an answer nobody waits for.
    pub timeout: Duration,
    /// The server's enforcement in this start, for the audit record.
    pub enforcement: Option<Enforcement>,
}

impl Relayer {
    /// `(sampling, elicitation)` to declare to the server at its initialize.
    pub fn declared(&self) -> (bool, bool) {
        declared(
            self.gate.policy(),
            self.upstream.client_capabilities().as_ref(),
        )
    }

    fn server(&self) -> &str {
        &self.gate.server
    }

    /// Relays a server's `sampling/createMessage`.
    pub async fn sampling(
        &self,
        mut params: CreateMessageRequestParams,
        ctx: &RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let started = Instant::now();
        let kind = Kind::Sampling;
        let undeclared = (params.tools.is_some() || params.tool_choice.is_some())
            .then_some("sampling with tools or toolChoice");
        let _permit = match self.check(kind, undeclared) {
            Ok(p) => p,
            Err(refusal) => {
                return Err(self.refuse(kind, ctx, || sampling_summary(&params), refusal))
            }
        };
        let args = sampling_summary(&params);
        // Undeclared downstream (no `sampling.context`): never let a server pull in what
        // the agent's model saw from other servers.
        params.include_context = None;
        params.meta = Some(self.meta());
        let answer = self
            .upstream
            .request(
                ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params)),
                self.timeout,
                Some(&ctx.ct),
            )
            .await;
        let result = match answer {
            Ok(ClientResult::CreateMessageResult(r)) => Ok(*r),
            Ok(other) => Err(unexpected(kind, &other)),
            Err(e) => Err(upstream_error(kind, e)),
        };
        let outcome = match &result {
            Ok(_) => CallOutcome::Success,
            Err(e) => CallOutcome::Error {
                error: e.message.to_string(),
            },
        };
        self.audit_relayed(kind, ctx, args, outcome, started)?;
        result
    }

    /// Relays a server's form `elicitation/create`, its message attributed to the server.
    pub async fn elicitation(
        &self,
        params: ElicitRequestParams,
        ctx: &RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let started = Instant::now();
        let kind = Kind::Elicitation;
        let (message, requested_schema) = match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (message, requested_schema),
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                let args = || elicitation_summary(&message, Some(&url), None);
                let what = "URL elicitation (a server could send the user to any page)";
                return Err(self.refuse_mode(ctx, args, what));
            }
            _ => {
                let what = "an elicitation mode palisade does not know";
                return Err(self.refuse_mode(ctx, Map::new, what));
            }
        };
        let args = || {
            elicitation_summary(
                &message,
                None,
                serde_json::to_value(&requested_schema).ok().as_ref(),
            )
        };
        let _permit = match self.check(kind, None) {
            Ok(p) => p,
            Err(refusal) => return Err(self.refuse(kind, ctx, args, refusal)),
        };
        let args = args();
        let params = ElicitRequestParams::FormElicitationParams {
            meta: Some(self.meta()),
            message: attribute(self.server(), &message),
            requested_schema,
        };
        let answer = self
            .upstream
            .request(
                ServerRequest::ElicitRequest(ElicitRequest::new(params)),
                self.timeout,
                Some(&ctx.ct),
            )
            .await;
        let result = match answer {
            Ok(ClientResult::ElicitResult(r)) => Ok(r),
            Ok(other) => Err(unexpected(kind, &other)),
            Err(e) => Err(upstream_error(kind, e)),
        };
        let outcome = match &result {
            Ok(r) => match r.action {
                ElicitationAction::Accept => CallOutcome::Success,
                ElicitationAction::Decline => CallOutcome::Error {
                    error: "the user declined".into(),
                },
                _ => CallOutcome::Error {
                    error: "the user cancelled".into(),
                },
            },
            Err(e) => CallOutcome::Error {
                error: e.message.to_string(),
            },
        };
        self.audit_relayed(kind, ctx, args, outcome, started)?;
        result
    }

    /// Every check, cheapest first; a slot held for the request's lifetime when admitted.
    /// `undeclared` names a feature of the request that palisade never declares downstream.
    fn check(
        &self,
        kind: Kind,
        undeclared: Option<&'static str>,
    ) -> Result<OwnedSemaphorePermit, Refusal> {
        admit(
            kind,
            self.gate.policy(),
            self.server(),
            self.upstream.client_capabilities().as_ref(),
        )?;
        if let Some(what) = undeclared {
            return Err(Refusal::Unsupported { what });
        }
        self.gate.start(kind)
    }

    /// Refuses an elicitation mode that is never relayed (saying that relaying is off
    /// first, when it is).
    fn refuse_mode(
        &self,
        ctx: &RequestContext<RoleClient>,
        args: impl FnOnce() -> Map<String, Value>,
        what: &'static str,
    ) -> ErrorData {
        let kind = Kind::Elicitation;
        let agent = self.upstream.client_capabilities();
        let refusal = match admit(kind, self.gate.policy(), self.server(), agent.as_ref()) {
            Err(r @ Refusal::NotAllowed { .. }) => r,
            _ => Refusal::Unsupported { what },
        };
        self.refuse(kind, ctx, args, refusal)
    }

    fn meta(&self) -> RequestMetaObject {
        let mut m = Map::new();
        m.insert(META_SERVER.into(), Value::String(self.server().to_string()));
        // A one-key object always converts; the default is an empty `_meta`.
        serde_json::from_value(Value::Object(m)).unwrap_or_default()
    }

    /// The error for a refused request; audited and logged within the refusal budget
    /// (`args` summarises the request for the record).
    fn refuse(
        &self,
        kind: Kind,
        ctx: &RequestContext<RoleClient>,
        args: impl FnOnce() -> Map<String, Value>,
        refusal: Refusal,
    ) -> ErrorData {
        let reason = refusal.to_string();
        if let Some(suppressed) = self.gate.refusal_audited() {
            tracing::warn!(server = %self.server(), "{reason}");
            // Summarised only here: a refusal over budget costs no serialisation.
            let mut args = args();
            if suppressed > 0 {
                args.insert("suppressedRefusals".into(), json!(suppressed));
            }
            let verdict = PolicyVerdict {
                decision: Decision::Deny,
                rule: Some(format!("relay.{}", kind.key())),
                reason: reason.clone(),
            };
            let outcome = CallOutcome::Denied {
                reason: reason.clone(),
            };
            let record = self.record(kind, ctx, args, verdict, outcome, 0);
            if let Err(e) = self.audit.record(&record) {
                // Nothing was relayed, so there is nothing to fail closed on beyond the
                // refusal itself.
                tracing::error!(server = %self.server(), "audit write failed: {e}");
            }
        }
        ErrorData::new(ErrorCode::INVALID_REQUEST, reason, None)
    }

    /// Audits a relayed request; a failed write fails it (the answer is not passed on).
    fn audit_relayed(
        &self,
        kind: Kind,
        ctx: &RequestContext<RoleClient>,
        args: Map<String, Value>,
        outcome: CallOutcome,
        started: Instant,
    ) -> Result<(), ErrorData> {
        let verdict = PolicyVerdict {
            decision: Decision::Allow,
            rule: Some(format!("relay.{}", kind.key())),
            reason: format!("relay.{} is on for server `{}`", kind.key(), self.server()),
        };
        let ms = started.elapsed().as_millis() as u64;
        let record = self.record(kind, ctx, args, verdict, outcome, ms);
        self.audit.record(&record).map_err(|e| {
            tracing::error!(server = %self.server(), "audit write failed: {e}");
            ErrorData::internal_error(
                format!(
                    "palisade could not audit the relayed {}: {e}",
                    kind.method()
                ),
                None,
            )
        })
    }

    fn record(
        &self,
        kind: Kind,
        ctx: &RequestContext<RoleClient>,
        arguments: Map<String, Value>,
        policy_decision: PolicyVerdict,
        result: CallOutcome,
        duration_ms: u64,
    ) -> CallRecord {
        CallRecord {
            timestamp: crate::audit::now_rfc3339(),
            request_id: serde_json::to_value(&ctx.id)
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .unwrap_or_default(),
            server_name: self.server().to_string(),
            tool_name: kind.method().to_string(),
            arguments,
            policy_decision,
            escalation_result: None,
            result,
            duration_ms,
            sandboxed: self
                .enforcement
                .as_ref()
                .is_some_and(Enforcement::is_sandboxed),
            enforcement: self.enforcement.clone(),
            approved_roots: Vec::new(),
            network_refusals: Vec::new(),
            kind: Some(kind.record_kind()),
        }
    }
}

/// The message the user sees, naming the server that asks.
pub fn attribute(server: &str, message: &str) -> String {
    format!("[MCP server \"{server}\" asks, relayed by palisade] {message}")
}

fn excerpt(text: &str) -> String {
    if text.chars().count() <= EXCERPT {
        return text.to_string();
    }
    let mut s: String = text.chars().take(EXCERPT).collect();
    s.push('…');
    s
}

/// What the audit record keeps of a sampling request: sizes and an excerpt of the text.
fn sampling_summary(p: &CreateMessageRequestParams) -> Map<String, Value> {
    let mut texts = Vec::new();
    if let Ok(v) = serde_json::to_value(&p.messages) {
        collect_texts(&v, &mut texts);
    }
    let mut m = Map::new();
    m.insert("messages".into(), json!(p.messages.len()));
    // Not `maxTokens`: the audit redactor hides every key that mentions tokens.
    m.insert("maxOutput".into(), json!(p.max_tokens));
    if let Some(s) = &p.system_prompt {
        m.insert("systemPrompt".into(), json!(excerpt(s)));
    }
    m.insert("text".into(), json!(excerpt(&texts.join("\n"))));
    if p.include_context.is_some() {
        m.insert("includeContext".into(), json!("dropped"));
    }
    m
}

fn collect_texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(t)) = o.get("text") {
                out.push(t.clone());
            }
            o.values().for_each(|x| collect_texts(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_texts(x, out)),
        _ => {}
    }
}

/// What the audit record keeps of an elicitation: the question and the fields asked for.
fn elicitation_summary(
    message: &str,
    url: Option<&str>,
    schema: Option<&Value>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("message".into(), json!(excerpt(message)));
    if let Some(u) = url {
        m.insert("url".into(), json!(excerpt(u)));
    }
    if let Some(Value::Object(props)) = schema.and_then(|s| s.get("properties")) {
        m.insert("fields".into(), json!(props.keys().collect::<Vec<_>>()));
    }
    m
}

fn unexpected(kind: Kind, got: &ClientResult) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "the agent answered the relayed {} with an unexpected result: {}",
            kind.method(),
            serde_json::to_string(got).unwrap_or_default()
        ),
        None,
    )
}

/// The agent's own JSON-RPC error passes through; the gateway's failures say what happened.
fn upstream_error(kind: Kind, e: UpstreamError) -> ErrorData {
    match e {
        UpstreamError::Client(err) => err,
        other => ErrorData::internal_error(
            format!("palisade relayed {} to the agent: {other}", kind.method()),
            None,
        ),
    }
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

    #[test]
    fn the_bucket_allows_its_size_then_refills_over_a_minute() {
        let t0 = Instant::now();
        let mut b = TokenBucket::per_minute(3, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0), "a fourth in the same instant");
        assert!(!b.take(t0 + Duration::from_secs(10)), "a third of a token");
        assert!(b.take(t0 + Duration::from_secs(20)), "one token after 20 s");
        assert!(!b.take(t0 + Duration::from_secs(20)));
        // Never more than the capacity, however long it was idle.
        let later = t0 + Duration::from_secs(3600);
        assert!(b.take(later) && b.take(later) && b.take(later));
        assert!(!b.take(later));
    }

    #[test]
    fn the_gate_bounds_requests_in_flight_and_per_minute() {
        let gate = RelayGate::new(
            "s",
            RelayPolicy {
                max_concurrent: 2,
                per_minute: 3,
                ..on()
            },
        );
        let a = gate.start(Kind::Sampling).unwrap();
        let b = gate.start(Kind::Sampling).unwrap();
        let busy = gate.start(Kind::Elicitation).unwrap_err();
        assert!(matches!(busy, Refusal::Busy { max: 2, .. }), "{busy}");
        assert!(busy.to_string().contains("relay.maxConcurrent"));
        drop(a);
        let c = gate.start(Kind::Sampling).unwrap();
        drop((b, c));
        // Three tokens spent; the busy refusal did not spend one.
        let limited = gate.start(Kind::Sampling).unwrap_err();
        assert!(
            matches!(limited, Refusal::RateLimited { per_minute: 3, .. }),
            "{limited}"
        );
        assert!(limited.to_string().contains("relay.perMinute"));
    }

    #[test]
    fn refusals_beyond_the_budget_are_counted_not_audited() {
        let gate = RelayGate::new("s", RelayPolicy::default());
        for _ in 0..REFUSALS_AUDITED_PER_MINUTE {
            assert_eq!(gate.refusal_audited(), Some(0));
        }
        assert_eq!(gate.refusal_audited(), None);
        assert_eq!(gate.refusal_audited(), None);
        assert_eq!(gate.refusals.lock().unwrap().suppressed, 2);
    }

    #[test]
    fn summaries_keep_sizes_and_excerpts_and_elicitations_name_the_server() {
        let p: CreateMessageRequestParams = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "x".repeat(600)}}],
            "maxTokens": 5,
            "includeContext": "allServers"
        }))
        .unwrap();
        let s = sampling_summary(&p);
        assert_eq!(s["messages"], json!(1));
        assert_eq!(s["maxOutput"], json!(5));
        assert_eq!(s["text"].as_str().unwrap().chars().count(), EXCERPT + 1);
        assert_eq!(s["includeContext"], json!("dropped"));
        let e = elicitation_summary(
            "name?",
            None,
            Some(&json!({"type": "object", "properties": {"name": {"type": "string"}}})),
        );
        assert_eq!(e["fields"], json!(["name"]));
        assert!(attribute("everything", "Your name?").contains("\"everything\""));
        assert!(attribute("everything", "Your name?").ends_with("Your name?"));
    }
}
