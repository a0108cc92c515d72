//! Stages 4 and 5 of a call: widen the server's roots and sandbox for an approved
//! escalation, check every path argument against the server's current roots, and forward the
//! call to the server process the gate admitted it to, collecting the egress refusals
//! attributed to that server meanwhile.
//!
//! Never: forward a call whose paths were checked against a different root set than the one
//! the server runs with (the gate is held from the check to the answer), or reuse the disk
//! resolutions made before an await that gave the disk time to change.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::gateway::call::widen;
use crate::gateway::server::handler::UpTarget;
use crate::gateway::server::request::{Connection, ForwardError, OnBehalf};
use crate::gateway::server::roots::RootSet;
use crate::gateway::stages::PolicyVerdict;
use crate::gateway::state::Shared;
use crate::policy::PathArg;
use crate::roots::guard::Need;
use crate::roots::resolved::CallPaths;
use crate::sandbox::launch::Enforcement;

use super::answer::{Answer, Received};
use super::as_sent::{self, AsSent};
use super::route::not_running;
use super::stage::{stage_refusal, InFlight, ROOTS_CHECK_RULE};

/// What stages 4 and 5 did with one call.
pub(super) struct Forwarded {
    pub answer: Answer,
    /// The server's own result, when it answered.
    pub received: Option<Received>,
    /// Refused by a stage (audited as denied).
    pub refused: bool,
    /// The verdict the record names (a roots-check refusal replaces the policy's).
    pub decided: PolicyVerdict,
    pub enforcement: Option<Enforcement>,
    pub approved_roots: Vec<(std::path::PathBuf, crate::sandbox::spec::Access)>,
    pub network_refusals: Vec<crate::egress::RefusalEvent>,
    /// The server's session version, when the call reached it.
    pub server_protocol: Option<String>,
}

impl Forwarded {
    pub(super) fn refused(
        text: String,
        decided: PolicyVerdict,
        enforcement: Option<Enforcement>,
    ) -> Forwarded {
        Forwarded {
            answer: Answer::Result(CallToolResult::error(vec![ContentBlock::text(text)])),
            received: None,
            refused: true,
            decided,
            enforcement,
            approved_roots: Vec::new(),
            network_refusals: Vec::new(),
            server_protocol: None,
        }
    }
}

/// Stages 4 and 5: widen the roots and sandbox (approved escalations only), then hold the
/// server's gate for reading (a widening waits for this call, and this call waits for one in
/// progress, so the roots check and the forward see the same server); check every path
/// argument against the server's CURRENT roots (canonicalised on the host: symlinks, `..`,
/// `~`, `file://`); forward to the process the gate admitted us to, watching the egress proxy
/// for refusals attributed to this server meanwhile.
pub(super) async fn widen_and_forward(
    here: &InFlight<'_>,
    params: (CallToolRequestParams, &AsSent),
    path_args: Option<&[PathArg<'_>]>,
    approved: Option<&[crate::approval::RememberedDir]>,
    decided: PolicyVerdict,
    resolved: &CallPaths,
) -> Forwarded {
    let (shared, slot, tool, ctx) = (here.shared, here.slot, here.tool, here.ctx);
    let cwd = here.cwd();
    let mut out = Forwarded {
        answer: Answer::Error(ErrorData::internal_error("not forwarded", None)),
        received: None,
        refused: false,
        decided,
        enforcement: slot.snapshot().enforcement,
        approved_roots: Vec::new(),
        network_refusals: Vec::new(),
        server_protocol: None,
    };
    // The resolutions made before the policy are reused only when nothing was awaited since:
    // an approval or a widening in progress gives the disk time to change, so the roots
    // check then resolves every path again, after the wait, as it always did.
    let mut fresh = None;
    let gate = if let Some(granted) = approved {
        widen::for_approved(slot, path_args.unwrap_or(&[]), cwd, granted)
            .await
            .map(|(permit, added)| {
                out.approved_roots = added;
                permit
            })
    } else if let Ok(permit) = slot.gate.try_read() {
        fresh = Some(resolved);
        Ok(permit)
    } else {
        Ok(slot.gate.read().await)
    };
    let _permit = match gate {
        Ok(permit) => permit,
        Err(e) => {
            out.answer = Answer::Error(ErrorData::internal_error(e.to_string(), None));
            return out;
        }
    };
    let set = slot.roots.current();
    if let Err(refusal) = check_paths(&set, path_args, &slot.name, tool, fresh) {
        let text = refusal.to_string();
        out.refused = true;
        out.decided = stage_refusal(ROOTS_CHECK_RULE, &text);
        out.answer = Answer::Result(CallToolResult::error(vec![ContentBlock::text(text)]));
        return out;
    }
    let snapshot = slot.snapshot();
    out.enforcement = snapshot.enforcement.clone();
    let Some(conn) = snapshot.live.as_ref().map(|l| l.conn.clone()) else {
        out.answer = Answer::Error(not_running(&slot.name, &snapshot.status));
        return out;
    };
    let mut events = shared
        .egress
        .as_ref()
        .filter(|_| slot.egress_allowed())
        .map(|p| p.subscribe());
    out.server_protocol = Some(conn.info.protocol_version.as_str().to_string());
    let (answer, received) = forward(shared, &conn, tool, params, ctx).await;
    if let Some(rx) = events.as_mut() {
        out.network_refusals = crate::gateway::network::drain(rx, &slot.name);
    }
    out.answer = answer;
    out.received = received;
    out
}

async fn forward(
    shared: &Shared,
    conn: &Connection,
    tool: &str,
    (mut params, sent): (CallToolRequestParams, &AsSent),
    ctx: &RequestContext<RoleServer>,
) -> (Answer, Option<Received>) {
    // The agent's progress token is mapped, not forwarded (the server is given ours); any
    // other _meta the agent sent travels on.
    let mut meta = params.meta.take().unwrap_or_default();
    meta.0 .0.extend(ctx.meta.0 .0.clone());
    let up_token = meta.get_progress_token();
    let progress_to = up_token.map(|token| UpTarget::of(ctx, token));
    let asks_task = sent.extra.contains_key("task");
    let timeout = shared.limits.call_timeout;
    let forwarded = match sent.text.as_deref() {
        // The agent's own text, only the name and the progress token made the server's.
        Some(text) => {
            conn.request_as_sent(
                "tools/call",
                text.get(),
                as_sent::Rename::Top(tool),
                timeout,
                OnBehalf::of(ctx).progress_to(progress_to),
            )
            .await
        }
        None => {
            meta.0 .0.remove("progressToken");
            crate::gateway::agent::versions::strip_envelope(&mut meta.0 .0);
            params.name = Cow::Owned(tool.to_string());
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let with_meta = (!meta.0 .0.is_empty()).then_some(meta);
            conn.request_raw(
                request,
                timeout,
                OnBehalf::of(ctx).progress_to(progress_to),
                with_meta,
                &sent.extra,
            )
            .await
        }
    };
    match forwarded {
        Ok(raw) => match crate::gateway::call::answer::received(&conn.server, raw, asks_task) {
            Ok(got) => got,
            Err(e) => (
                Answer::Error(ErrorData::internal_error(e.to_string(), None)),
                None,
            ),
        },
        Err(ForwardError::Server(e)) => (Answer::Error(e), None),
        Err(e) => (
            Answer::Error(ErrorData::internal_error(e.to_string(), None)),
            None,
        ),
    }
}

/// Why the roots check refused a call (the text is the agent's error and the audit reason).
#[derive(Debug, thiserror::Error)]
pub enum RootsRefusal {
    #[error(
        "FORBIDDEN: the path arguments of {server}/{tool} are not known to the policy, so they \
         cannot be checked against the server's roots"
    )]
    Unannotated { server: String, tool: String },
    #[error("{cause} [server {server}]")]
    Guard {
        server: String,
        cause: crate::roots::guard::GuardError,
    },
}

/// Checks every path argument against the server's current roots (see `RootGuard`).
fn check_paths(
    set: &RootSet,
    path_args: Option<&[PathArg<'_>]>,
    server: &str,
    tool: &str,
    resolved: Option<&CallPaths>,
) -> Result<(), RootsRefusal> {
    let Some(args) = path_args else {
        return Err(RootsRefusal::Unannotated {
            server: server.to_string(),
            tool: tool.to_string(),
        });
    };
    for a in args {
        let need = if a.writes() { Need::Write } else { Need::Read };
        let checked = match resolved {
            Some(paths) => set.guard.check_shared(a.value, need, paths),
            None => set.guard.check(a.value, need),
        };
        if let Err(source) = checked {
            return Err(RootsRefusal::Guard {
                server: server.to_string(),
                cause: source,
            });
        }
    }
    Ok(())
}
