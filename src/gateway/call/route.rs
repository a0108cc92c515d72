//! Stage 1 of a call: which server takes a tool name. A call to a server that is (re)starting
//! waits for it, bounded by the start timeout; a name no server offers, a pinned tool held
//! back or a tool the config hides is refused, and audited like every call.
//! Never: route by anything but the catalog and the configured prefixes.

use std::time::Instant;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::gateway::registry::Route;
use crate::gateway::stages::{request_id_string, CallOutcome, CallRecord, RecordServer};
use crate::gateway::state::{Shared, Slot, Status};

use super::stage::stage_refusal;

/// `policyDecision.rule` of a call no running server could take.
pub const UNROUTABLE_RULE: &str = "unroutable";
/// `policyDecision.rule` of a call to a tool the server's `tools` filter hides.
pub const TOOL_FILTER_RULE: &str = "tool-filter";

/// How often a call to a (re)starting server looks again whether it is up.
const ROUTE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Routes `name`; when its prefix names a configured server that is starting or restarting,
/// waits until it runs (or fails), at most the start timeout. A refusal comes with the rule
/// it is audited under.
pub(in crate::gateway) async fn route_waiting(
    shared: &Shared,
    name: &str,
) -> Result<Route, (ErrorData, &'static str)> {
    if let Some((slot, tool)) = owner(shared, name) {
        let server = slot.name.as_str();
        if let Some(pins) = shared.pins.as_ref().filter(|p| p.is_held(server, tool)) {
            // Approved since the last review? A rebuild reads the pins file again.
            shared.refresh_catalog().await;
            if pins.is_held(server, tool) {
                return Err((
                    ErrorData::invalid_params(pins.refusal(server, tool), None),
                    crate::gateway::stages::pinning::TOOL_PIN_RULE,
                ));
            }
        }
        if let Some(why) = slot.filters.hides_tool(tool) {
            return Err((
                ErrorData::invalid_params(
                    format!(
                        "tool `{name}` is hidden by the config (mcpServers.{server}.tools: {why}); \
                         it is not offered to the agent"
                    ),
                    None,
                ),
                TOOL_FILTER_RULE,
            ));
        }
    }
    let deadline = Instant::now() + shared.limits.startup_timeout;
    let mut running_misses = 0;
    loop {
        let error = match shared.catalog().tool(name) {
            Ok(route) => return Ok(route.clone()),
            Err(e) => e,
        };
        let snap = owner(shared, name).map(|(slot, _)| slot.snapshot());
        let waiting = match snap.as_ref().map(|s| &s.status) {
            // Stopping: its process ended and left the catalog; the supervisor says whether
            // it restarts once what is left is stopped, which a loaded machine can make take
            // a while.
            Some(Status::Starting | Status::Restarting { .. } | Status::Stopping) => true,
            // Running but not yet in the catalog: the catalog is rebuilt just after the
            // status.
            Some(Status::Running) => {
                running_misses += 1;
                running_misses < 3
            }
            _ => false,
        };
        if !waiting || Instant::now() >= deadline || shared.shutdown.is_cancelled() {
            return Err((unroutable(shared, name, error), UNROUTABLE_RULE));
        }
        tokio::time::sleep(ROUTE_POLL).await;
    }
}

/// The configured server a tool name belongs to, and the tool's own name: by its
/// `SERVER__` prefix, else the server that keeps its own names (`"prefix": false`).
pub(in crate::gateway) fn owner<'a>(
    shared: &'a Shared,
    name: &'a str,
) -> Option<(&'a Slot, &'a str)> {
    let prefixed = crate::gateway::registry::split_name(name).and_then(|(server, tool)| {
        shared
            .slots
            .iter()
            .find(|s| s.name == server && !s.filters.unprefixed)
            .map(|s| (&**s, tool))
    });
    prefixed.or_else(|| {
        shared
            .slots
            .iter()
            .find(|s| s.filters.unprefixed)
            .map(|s| (&**s, name))
    })
}

/// The audit record of a call that reached no server.
pub(in crate::gateway) fn unroutable_record(
    shared: &Shared,
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    error: &ErrorData,
    rule: &str,
    started: Instant,
) -> CallRecord {
    let owned = owner(shared, &params.name);
    let (server, tool) = owned
        .map(|(slot, tool)| (slot.name.as_str(), tool))
        .unwrap_or(("", params.name.as_ref()));
    // A server named (a held or hidden tool, a server down): what it runs under, as its
    // calls' records say.
    let enforcement = owned.and_then(|(slot, _)| slot.snapshot().enforcement);
    CallRecord {
        duration_ms: started.elapsed().as_millis() as u64,
        ..CallRecord::new(
            RecordServer::running(server, enforcement),
            tool,
            request_id_string(&ctx.id),
            params.arguments.clone().unwrap_or_default(),
            stage_refusal(rule, &error.message),
            CallOutcome::Denied {
                reason: error.message.to_string(),
            },
        )
    }
}

/// The error for a name the catalog does not know: when its prefix names a configured server
/// that is down, say why it is down rather than "unknown tool".
pub(in crate::gateway) fn unroutable(
    shared: &Shared,
    full: &str,
    e: crate::gateway::registry::RouteError,
) -> ErrorData {
    if let Some((slot, _)) = owner(shared, full) {
        let status = slot.snapshot().status;
        if status != Status::Running {
            return not_running(&slot.name, &status);
        }
    }
    ErrorData::invalid_params(e.to_string(), None)
}

/// The error for a call to a server that is not running, with the reason.
pub fn not_running(server: &str, status: &Status) -> ErrorData {
    let why = match status {
        Status::Starting => "it is starting".to_string(),
        Status::Running => "its connection just closed".to_string(),
        Status::Stopping => "its process just ended and it is being stopped; try again".to_string(),
        Status::Restarting { reason, attempt } => {
            format!("it is restarting after it went down ({reason}; attempt {attempt}) and was not back within the start timeout; try again")
        }
        Status::Failed { reason } => format!("it failed and was given up: {reason}"),
        Status::Refused { reason } => format!("it was not started: {reason}"),
        Status::Stopped => "the gateway is shutting down".to_string(),
    };
    ErrorData::internal_error(format!("server `{server}` is not running: {why}"), None)
}
