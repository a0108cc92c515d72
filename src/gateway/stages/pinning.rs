//! Why: a server can change what its tools say after a person trusted them. This stage holds
//! each server's listed tools against the pins file (`crate::pins`) at every catalog
//! rebuild: first contact pins them (or, with `pinNew: ask`, holds them), a changed or added
//! tool is held back under `enforce` (hidden, a call refused) or let through with a warning
//! under `warn`. Every pin written and every change seen is audited once.
//!
//! Never: trust a pins file it cannot read (start fails, naming the file); hold the catalog
//! lock while it reads or writes the file.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use crate::gateway::registry::ServerLists;
use crate::gateway::stages::{CallOutcome, CallRecord, Decision, PolicyVerdict, RecordServer};
use crate::pins::{self, ChangeKind, Mode, NewServers};

/// `policyDecision.rule` of pin records and of calls refused because a tool is held.
pub const TOOL_PIN_RULE: &str = "tool-pin";

/// The pins file and what is held back now.
#[derive(Debug)]
pub struct PinGate {
    pub path: PathBuf,
    pub mode: Mode,
    pub new_servers: NewServers,
    /// Per server, the names of its tools held back by the last review.
    held: Mutex<HashMap<String, BTreeSet<String>>>,
}

impl PinGate {
    /// Opens the gate; the file must be readable and safe now (a missing file is empty).
    pub fn open(
        path: PathBuf,
        mode: Mode,
        new_servers: NewServers,
    ) -> Result<PinGate, pins::PinsError> {
        pins::file::load(&path)?;
        Ok(PinGate {
            path,
            mode,
            new_servers,
            held: Mutex::default(),
        })
    }

    /// Whether `server`'s `tool` was held back by the last review.
    pub fn is_held(&self, server: &str, tool: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .is_some_and(|h| h.contains(tool))
    }

    /// `lists` less the tools held back, plus the audit records of what this review newly
    /// pinned or found changed. Reads and may write the pins file (small; under its lock).
    pub fn review(&self, server: &str, lists: &ServerLists) -> (ServerLists, Vec<CallRecord>) {
        // The definition as the server sent it: a field the typed model does not know is
        // pinned too, so changing it is a change.
        let defs: Vec<Value> = lists
            .tools
            .iter()
            .map(|t| match lists.raw.tools.get(t.name.as_ref()) {
                Some(raw) => Value::Object(raw.clone()),
                None => serde_json::to_value(t).unwrap_or(Value::Null),
            })
            .collect();
        let at = crate::audit::now_rfc3339();
        let (mode, new_servers) = (self.mode, self.new_servers);
        let outcome = pins::file::update(&self.path, |file| {
            let r = pins::review(file.server(server), &defs, mode, new_servers);
            let pinned = !r.first_use.is_empty();
            if pinned {
                file.pin_first_use(server, &r.first_use, &at);
            }
            let news = file.hold(server, &r.changes, &at);
            let fresh: Vec<pins::Change> = if news { r.changes.clone() } else { Vec::new() };
            (pinned || news, (r, fresh))
        });
        let (r, fresh) = match outcome {
            Ok(x) => x,
            Err(e) => {
                // Fail closed: a file that cannot be read now holds back every tool.
                tracing::error!(server, "pins: {e}; holding back all of its tools");
                self.set_held(
                    server,
                    lists.tools.iter().map(|t| t.name.to_string()).collect(),
                );
                let mut out = lists.clone();
                out.tools.clear();
                return (out, Vec::new());
            }
        };
        let mut records = Vec::new();
        for (name, _, digest) in &r.first_use {
            records.push(pin_record(
                server,
                name,
                PolicyVerdict {
                    decision: Decision::Allow,
                    rule: Some(TOOL_PIN_RULE.into()),
                    reason: format!("pinned on first use ({digest})"),
                },
                CallOutcome::Success,
            ));
        }
        for c in &fresh {
            let what = match c.kind {
                ChangeKind::Changed => "changed since it was approved",
                ChangeKind::Added => "appeared after the server was pinned",
                ChangeKind::New => "is on a server not yet approved (pinNew: ask)",
            };
            let held = r.held.contains(&c.tool);
            let reason = format!(
                "tool {what} ({}); review with `palisade pins diff {}`",
                c.digest,
                self.path.display()
            );
            if held {
                tracing::warn!(server, tool = %c.tool, "held back: {reason}");
            } else {
                tracing::warn!(server, tool = %c.tool, "offered under pinning: warn although it {what}");
            }
            let verdict = PolicyVerdict {
                decision: if held {
                    Decision::Deny
                } else {
                    Decision::Allow
                },
                rule: Some(TOOL_PIN_RULE.into()),
                reason: reason.clone(),
            };
            let outcome = if held {
                CallOutcome::Denied { reason }
            } else {
                CallOutcome::Success
            };
            records.push(pin_record(server, &c.tool, verdict, outcome));
        }
        self.set_held(server, r.held.iter().cloned().collect());
        let offered: BTreeSet<&str> = r.offered.iter().map(String::as_str).collect();
        let mut out = lists.clone();
        out.tools.retain(|t| offered.contains(t.name.as_ref()));
        (out, records)
    }

    /// Forgets what was held for `server` (it stopped: nothing of it is listed).
    pub fn clear(&self, server: &str) {
        self.set_held(server, BTreeSet::new());
    }

    fn set_held(&self, server: &str, held: BTreeSet<String>) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(server.to_string(), held);
    }

    /// The refusal of a call to a held tool.
    pub fn refusal(&self, server: &str, tool: &str) -> String {
        format!(
            "tool `{server}__{tool}` is held back: its definition changed since it was approved \
             (or it was not approved yet). Review it with `palisade pins diff {p}` and accept it \
             with `palisade pins approve {p} {server} {tool}`",
            p = self.path.display()
        )
    }
}

fn pin_record(
    server: &str,
    tool: &str,
    verdict: PolicyVerdict,
    outcome: CallOutcome,
) -> CallRecord {
    CallRecord {
        kind: Some(crate::audit::RecordKind::ToolPin),
        ..CallRecord::new(
            RecordServer::unstamped(server),
            tool,
            String::new(),
            Default::default(),
            verdict,
            outcome,
        )
    }
}
