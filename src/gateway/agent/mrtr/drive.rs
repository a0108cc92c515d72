//! Runs one 2026-07-28 `tools/call` through its rounds (see the parent module): the call on
//! its own task with its round, suspended and resumed by `requestState`.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ErrorData, RequestMetaObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::gateway::state::Shared;

use super::*;
use crate::gateway::call::as_sent::AsSent;

/// Runs one 2026-07-28 `tools/call` through its rounds: a first call starts it on its own
/// task; a retry resumes what its `requestState` names (an approver's question asked anew
/// with the answer, or a suspended call given the answer to its server's request). Either way
/// the answer is the call's result, or `input_required` for the next question.
pub async fn call(
    shared: Arc<Shared>,
    mut typed: CallToolRequestParams,
    sent: AsSent,
    mut ctx: RequestContext<RoleServer>,
) -> Result<Value, ErrorData> {
    let caps = client_caps(&ctx.meta);
    // This round's request may end (answered `input_required`) while the call goes on; the
    // agent cancelling this request still cancels the call (see `drive`).
    let request_ct = ctx.ct.clone();
    let responses = typed.input_responses.take();
    let state = typed.request_state.take();
    // A retry's text carries its answers and state, which are Palisade's to read, not the
    // server's: only a first round's params may go on as the agent wrote them.
    let sent = if responses.is_none() && state.is_none() {
        sent
    } else {
        AsSent::fields(sent.extra)
    };
    let fp = fingerprint(&typed.name, typed.arguments.as_ref().unwrap_or(&Map::new()));
    let answer_under = |key: &str| {
        responses
            .as_ref()
            .and_then(|r| r.get(key))
            .cloned()
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("inputResponses has no answer under `{key}`, the question asked"),
                    None,
                )
            })
    };
    let invalid = |e: StateError| ErrorData::invalid_params(e.to_string(), None);
    let (answer, resumed, shown) = match state {
        None => (None, None, None),
        Some(handle) => match shared
            .mrtr
            .take(&handle, &fp, Instant::now())
            .map_err(invalid)?
        {
            Resumed::Asked(shown) => (Some(answer_under(APPROVAL_KEY)?), None, Some(shown)),
            Resumed::Suspended(driver) => (None, Some((driver, answer_under(RELAY_KEY)?)), None),
        },
    };
    let (call, suspensions, cancel) = match resumed {
        Some((driver, answer)) => {
            // The server's call goes on with the agent's answer.
            let _ = driver.answer.send(answer);
            (driver.call, driver.suspensions, driver.cancel)
        }
        None => {
            let cancel = CancellationToken::new();
            ctx.ct = cancel.clone();
            let (tx, rx) = mpsc::channel(1);
            let mut round = Round::new(caps, answer).with_suspend(tx);
            if let Some(shown) = shown {
                round = round.answering(shown);
            }
            let round = Arc::new(round);
            let shared = shared.clone();
            let call = tokio::spawn(async move {
                // Counted for as long as the call runs, across every round it is suspended in
                // (the request that started it may have ended long before): shutdown waits
                // for it so that its audit record is written.
                let _in_flight = shared.calls.token();
                let pipeline =
                    crate::gateway::call::pipeline::call_tool(&shared, typed, &sent, ctx);
                scope(round, pipeline)
                    .await
                    .and_then(|raw| crate::gateway::call::answer::value_of(&raw))
            });
            (call, rx, cancel)
        }
    };
    drive(
        &shared,
        fp,
        Driving {
            call,
            suspensions,
            cancel,
        },
        &request_ct,
    )
    .await
}

/// A call being driven: its task, its server's requests, its own cancellation.
struct Driving {
    call: JoinHandle<Result<Value, ErrorData>>,
    suspensions: mpsc::Receiver<Suspension>,
    cancel: CancellationToken,
}

/// Waits for the call's end or its server's next request, whichever comes first.
async fn drive(
    shared: &Shared,
    fp: String,
    d: Driving,
    request_ct: &CancellationToken,
) -> Result<Value, ErrorData> {
    let Driving {
        mut call,
        mut suspensions,
        cancel,
    } = d;
    let finished = |r: Result<Result<Value, ErrorData>, tokio::task::JoinError>| {
        r.unwrap_or_else(|e| {
            Err(ErrorData::internal_error(
                format!("the call failed: {e}"),
                None,
            ))
        })
    };
    tokio::select! {
        biased;
        r = &mut call => finished(r),
        _ = request_ct.cancelled() => {
            // The agent cancelled: the call ends (and is audited) as any cancelled call.
            cancel.cancel();
            finished(call.await)
        }
        s = suspensions.recv() => match s {
            Some(Suspension { request, answer }) => {
                let driver = Driver { call, cancel, suspensions, answer };
                let handle = shared
                    .mrtr
                    .insert_with(fp, Instant::now(), Some(driver), Vec::new());
                Ok(input_request(RELAY_KEY, request, &handle))
            }
            // The round is gone: the call has ended.
            None => finished(call.await),
        },
    }
}

/// The agent's capabilities from a 2026-07-28 request's envelope.
fn client_caps(meta: &RequestMetaObject) -> Option<ClientCapabilities> {
    meta.get("io.modelcontextprotocol/clientCapabilities")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
}
