//! What a call produced, and the stages that read or mark it before the audit: the
//! egress proxy's refusals and `[SANDBOX BLOCKED]` added to an error, the outcome the record
//! names, and the JSON the agent gets (the server's own, unless a stage changed the result).
//! Never: change a result no stage marked; mark an unsandboxed server's errors.

use serde_json::Value;

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;

use crate::gateway::call::blocked::{self, BlockContext};
use crate::gateway::raw_json::RawJson;
use crate::gateway::stages::CallOutcome;
use crate::gateway::state::Slot;
use crate::policy::PathArg;
use crate::sandbox::launch::Enforcement;

/// What one call produced, before audit.
pub(in crate::gateway) enum Answer {
    /// A successful result no stage needs to read, as the server sent it: it goes to the
    /// agent without being decoded or re-encoded (a 1 MiB result was parsed three times).
    Relayed(RawJson),
    Result(CallToolResult),
    Error(ErrorData),
    /// A task-augmented call's task handle (`{"task": {...}}`), as the server sent it.
    Task(Value),
}

/// What a server answered a forwarded call: the typed view the stages read, and the result
/// as the server sent it (what the agent gets unless a stage changed the view).
pub(in crate::gateway) struct Received {
    pub(in crate::gateway) view: CallToolResult,
    pub(in crate::gateway) raw: RawJson,
}

/// The result the agent is sent: the server's own JSON when no stage changed the view; else
/// that JSON with the fields the stages rewrite (`content`, `isError`) taken from the view.
pub(in crate::gateway) fn result_json(answer: CallToolResult, received: Option<Received>) -> Value {
    let typed = |r: &CallToolResult| serde_json::to_value(r).unwrap_or(Value::Null);
    let Some(received) = received else {
        return typed(&answer);
    };
    let Ok(Value::Object(mut out)) = serde_json::from_str::<Value>(received.raw.get()) else {
        return typed(&answer);
    };
    if received.view != answer {
        if let Value::Object(view) = typed(&answer) {
            for key in ["content", "isError"] {
                match view.get(key) {
                    Some(v) => {
                        out.insert(key.into(), v.clone());
                    }
                    None => {
                        out.remove(key);
                    }
                }
            }
        }
    }
    Value::Object(out)
}

impl Answer {
    /// An error the agent gets: a JSON-RPC error or a result with `isError: true`.
    pub(in crate::gateway) fn is_error(&self) -> bool {
        match self {
            Answer::Error(_) => true,
            Answer::Result(r) => r.is_error == Some(true),
            Answer::Relayed(_) | Answer::Task(_) => false,
        }
    }
}

/// What a server answered a call, decoded only as far as the stages need: a result that is
/// not an error goes on as `Relayed` (its typed view is built later only if a stage must
/// change it); an error result is decoded for `annotate` and the record.
/// `asks_task`: the call was task-augmented, so the answer may be a task handle
/// (`{"task": {...}}`) instead of a tool result.
pub(in crate::gateway) fn received(
    server: &str,
    raw: RawJson,
    asks_task: bool,
) -> Result<(Answer, Option<Received>), crate::gateway::server::request::ForwardError> {
    use crate::gateway::call::probe::{probe, serde_probe, ResultProbe};
    // Read with the envelope when the scanner read the line; else probed here.
    debug_assert!(
        raw.said().is_none() || raw.said() == probe(raw.get()),
        "the envelope's reading of a result is the probe's"
    );
    let said = raw
        .said()
        .or_else(|| probe(raw.get()))
        .or_else(|| serde_probe(raw.get()));
    match said {
        Some(ResultProbe { task: true, .. }) if asks_task => {
            let handle = serde_json::from_str::<Value>(raw.get()).map_err(|e| {
                crate::gateway::server::request::ForwardError::Other {
                    server: server.to_string(),
                    message: format!("its task handle is not valid JSON ({e})"),
                }
            })?;
            Ok((Answer::Task(handle), None))
        }
        Some(ResultProbe {
            is_error: None | Some(false),
            ..
        }) => Ok((Answer::Relayed(raw), None)),
        // An error result, or one the probe cannot read (the typed parse says why).
        _ => typed(server, raw),
    }
}

/// The typed view of a result the stages will read or change.
pub(in crate::gateway) fn typed(
    server: &str,
    raw: RawJson,
) -> Result<(Answer, Option<Received>), crate::gateway::server::request::ForwardError> {
    let view = crate::gateway::server::request::parse_text::<CallToolResult>(
        server,
        "tools/call",
        raw.get(),
    )?;
    Ok((Answer::Result(view.clone()), Some(Received { view, raw })))
}

/// The JSON text of a value Palisade built.
pub(in crate::gateway) fn raw_json(value: &Value) -> RawJson {
    RawJson::from_value(value)
}

/// A result's JSON text as a value, for the paths that change it further (a 2026-07-28
/// agent's stamp, rmcp's typed session).
pub(in crate::gateway) fn value_of(raw: &RawJson) -> Result<Value, ErrorData> {
    serde_json::from_str(raw.get()).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// A field of a task handle's `task`, for the audit record.
pub(in crate::gateway) fn task_field(answer: &Answer, key: &str) -> Option<String> {
    match answer {
        Answer::Task(handle) => handle
            .get("task")
            .and_then(|t| t.get(key))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

/// Tells the agent which connections the egress proxy refused during the call: an error's
/// text starts with the `[SANDBOX BLOCKED] network access to HOST:PORT denied ...` lines
/// (the original error follows); a successful result gets them as an extra text block (it is
/// decoded for that, so `received` may change too).
pub(in crate::gateway) fn mark_refusals(
    refusals: &[crate::egress::RefusalEvent],
    server: &str,
    (answer, received): (Answer, Option<Received>),
) -> (Answer, Option<Received>) {
    if refusals.is_empty() {
        return (answer, received);
    }
    let (answer, received) = match answer {
        Answer::Relayed(raw) => match typed(server, raw) {
            Ok(got) => got,
            Err(e) => (
                Answer::Error(ErrorData::internal_error(e.to_string(), None)),
                None,
            ),
        },
        other => (other, received),
    };
    let text = crate::gateway::network::refusal_text(refusals);
    let answer = match answer {
        Answer::Error(mut e) => {
            e.message = format!("{text}\nOriginal error: {}", e.message).into();
            Answer::Error(e)
        }
        Answer::Result(mut r) if r.is_error == Some(true) => {
            match r.content.iter_mut().find_map(|b| match b {
                ContentBlock::Text(t) => Some(t),
                _ => None,
            }) {
                Some(t) => t.text = format!("{text}\nOriginal error: {}", t.text),
                None => r.content.insert(0, ContentBlock::text(text)),
            }
            Answer::Result(r)
        }
        Answer::Result(mut r) => {
            r.content.push(ContentBlock::text(text));
            Answer::Result(r)
        }
        // A task has not run yet: its refusals are reported with its result. (`Relayed` was
        // decoded above.)
        other @ (Answer::Task(_) | Answer::Relayed(_)) => other,
    };
    (answer, received)
}

/// The call's path arguments, canonical as the roots check saw them (the only paths the
/// annotation may name besides the server's grants).
pub(in crate::gateway) fn call_paths(
    path_args: Option<&[PathArg<'_>]>,
    cwd: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) -> Vec<std::path::PathBuf> {
    let base = crate::roots::canon::Base { cwd, home };
    path_args
        .unwrap_or(&[])
        .iter()
        .filter_map(|a| crate::roots::guard::canonicalize_input(a.value, &base).ok())
        .collect()
}

/// Runs `f` with what the sandbox-refusal classifier needs to know of `slot`'s sandbox (a
/// sandboxed server's: callers check that first).
fn with_block_context<R>(
    slot: &Slot,
    call_paths: &[std::path::PathBuf],
    f: impl FnOnce(&BlockContext<'_>) -> R,
) -> R {
    let deny_read = slot
        .req
        .as_ref()
        .map(|r| r.deny_read.as_slice())
        .unwrap_or(&[]);
    let deny_write = slot
        .req
        .as_ref()
        .map(|r| r.deny_write.as_slice())
        .unwrap_or(&[]);
    let set = slot.roots.current();
    let ctx = BlockContext {
        server: &slot.name,
        sandboxed: true,
        egress_allowed: slot.egress_allowed(),
        deny_read,
        deny_write,
        shown: &set.paths,
        write_protect: slot.req.as_ref().is_none_or(|r| r.write_protect),
        call_paths,
    };
    f(&ctx)
}

/// A task's fetched result (`tasks/result`), marked as a direct call's result is: the first
/// text block of an error result that reads as a sandbox refusal.
pub(in crate::gateway) fn annotate_task_result(
    slot: &Slot,
    call_paths: &[std::path::PathBuf],
    result: &mut Value,
) {
    let sandboxed = slot
        .snapshot()
        .enforcement
        .is_some_and(|e| e.is_sandboxed());
    if !sandboxed || result.get("isError").and_then(Value::as_bool) != Some(true) {
        return;
    }
    with_block_context(slot, call_paths, |ctx| {
        let blocks = result.get_mut("content").and_then(Value::as_array_mut);
        for block in blocks.into_iter().flatten() {
            let Some(text) = block.get("text").and_then(Value::as_str) else {
                continue;
            };
            if let Some(marked) = blocked::annotate(ctx, text) {
                block["text"] = Value::String(marked);
                break;
            }
        }
    });
}

pub(in crate::gateway) fn annotate(
    slot: &Slot,
    enforcement: Option<&Enforcement>,
    call_paths: &[std::path::PathBuf],
    answer: Answer,
) -> Answer {
    if !enforcement.is_some_and(Enforcement::is_sandboxed) {
        return answer;
    }
    with_block_context(slot, call_paths, |ctx| match answer {
        Answer::Error(mut e) => {
            if let Some(text) = blocked::annotate(ctx, &e.message) {
                e.message = text.into();
            }
            Answer::Error(e)
        }
        Answer::Result(mut r) if r.is_error == Some(true) => {
            // Mark the first text block that reads as a sandbox refusal.
            for block in r.content.iter_mut() {
                if let ContentBlock::Text(t) = block {
                    if let Some(text) = blocked::annotate(ctx, &t.text) {
                        t.text = text;
                        break;
                    }
                }
            }
            Answer::Result(r)
        }
        other => other,
    })
}

/// `refused`: palisade itself refused the call (policy, approval, roots); nothing was
/// forwarded.
pub(in crate::gateway) fn outcome_of(answer: &Answer, refused: bool) -> CallOutcome {
    match answer {
        Answer::Result(r) if r.is_error == Some(true) => {
            let text = first_text(&r.content);
            if refused {
                CallOutcome::Denied { reason: text }
            } else {
                CallOutcome::Error { error: text }
            }
        }
        Answer::Result(_) | Answer::Relayed(_) => CallOutcome::Success,
        Answer::Task(_) => CallOutcome::Success,
        Answer::Error(e) => CallOutcome::Error {
            error: e.message.to_string(),
        },
    }
}

pub(in crate::gateway) fn first_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::state::Status;
    use serde_json::json;

    // Review of stop 43: a task's fetched result reached the agent without the mark a direct
    // call's sandbox refusal gets. Control: the same result from an unsandboxed server is
    // left as it is.
    #[test]
    fn a_task_results_sandbox_refusal_is_marked_as_a_calls_is() {
        let result = json!({"isError": true, "content": [
            {"type": "text", "text": "EACCES: permission denied, open '/w/secret'"}]});
        let paths = [std::path::PathBuf::from("/w/secret")];
        let slot = Slot::new("fs".into(), None, Status::Running);
        let mut plain = result.clone();
        annotate_task_result(&slot, &paths, &mut plain);
        assert_eq!(plain, result, "not sandboxed: nothing is the sandbox's");
        slot.update(|s| {
            s.enforcement = Some(Enforcement::Sandboxed {
                backend: crate::config::Backend::Bwrap,
            })
        });
        let mut marked = result.clone();
        annotate_task_result(&slot, &paths, &mut marked);
        let text = marked["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("[SANDBOX BLOCKED]"), "{marked}");
        assert!(text.contains("/w/secret"), "{marked}");
    }
}
