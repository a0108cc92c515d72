//! After a (re)launch: wait until the server has not only fetched its roots but applied them.
//! server-filesystem applies a fetched root list asynchronously (NOTES: a call right after its
//! `roots/list` still saw the old set 29 times in 30), so "re-fetched" is not "applied".
//!
//! Steps: send `notifications/roots/list_changed` unless the server already fetched the
//! launched version; wait (bounded) until it has fetched it; then, when the server has an
//! introspection tool palisade knows (server-filesystem's `list_allowed_directories`,
//! palisade fs-server's `list_roots`), poll it until it reports every root; else wait a short
//! settle delay. Every step is bounded: a server that never reports its roots is still
//! confined by its mounts, and the gateway says so in the log. Never: block a call forever,
//! or treat a report as applied when a root is missing from it.
#![allow(deprecated)] // roots are deprecated in rmcp (SEP-2577) but still used.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, Tool};

use crate::gateway::server::request::{Connection, OnBehalf};
use crate::gateway::server::roots::RootsCell;

/// How long a roots consumer gets to ask `roots/list` after `list_changed`.
const FETCH_WAIT: Duration = Duration::from_secs(2);
/// Without introspection: how long to wait for a fetch, then to let it settle.
const QUIET_FETCH_WAIT: Duration = Duration::from_millis(50);
const SETTLE: Duration = Duration::from_millis(20);
/// Introspection polling: interval and bound.
const POLL_EVERY: Duration = Duration::from_millis(3);
const POLL_FOR: Duration = Duration::from_secs(3);
/// Each introspection call's own timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A tool that reports the directories a server currently allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Introspection {
    /// server-filesystem: text `Allowed directories:\n/a\n/b`.
    AllowedDirectories,
    /// palisade fs-server: JSON `{"version", "roots": [{"path", ...}]}`.
    ListRoots,
}

impl Introspection {
    pub fn tool(self) -> &'static str {
        match self {
            Introspection::AllowedDirectories => "list_allowed_directories",
            Introspection::ListRoots => crate::fsserver::tools::LIST_ROOTS,
        }
    }

    /// The known introspection tool among a server's tools, if any.
    pub fn find(tools: &[Tool]) -> Option<Introspection> {
        [Introspection::AllowedDirectories, Introspection::ListRoots]
            .into_iter()
            .find(|i| tools.iter().any(|t| t.name == i.tool()))
    }

    /// The directories a report names (pure).
    pub fn parse(self, text: &str) -> Vec<PathBuf> {
        match self {
            Introspection::AllowedDirectories => text
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with('/'))
                .map(PathBuf::from)
                .collect(),
            Introspection::ListRoots => serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v.get("roots").and_then(|r| r.as_array()).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r.get("path").and_then(|p| p.as_str()).map(PathBuf::from))
                .collect(),
        }
    }
}

/// How the wait ended (logged; the benchmark reads it too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The server's own report lists every root.
    Reported { polls: u32 },
    /// No introspection: fetched (or not) and the settle delay passed.
    Settled { fetched: bool },
    /// A 2026-07-28 server: roots go with each request that asks for them.
    PerRequest,
    /// The report never listed every root within the bound.
    NotReported { missing: Vec<PathBuf> },
}

/// Announces `version` to the server and waits until it is applied (see the module header).
pub async fn announce_and_wait(
    conn: &Connection,
    tools: &[Tool],
    roots: &RootsCell,
    version: u64,
    want: &[PathBuf],
) -> Applied {
    // A 2026-07-28 server asks for its roots inside each request that needs them (answered
    // from the same root set): there is nothing to announce and no fetch to wait for.
    if conn.era.is_sessionless() {
        return Applied::PerRequest;
    }
    let introspection = Introspection::find(tools);
    // A server that already fetched this version (server-filesystem asks as soon as it is
    // initialized) would only fetch the same set again: one more round trip on every start
    // and relaunch, about 10 ms of server-filesystem's. Whether it applied them is still
    // checked below.
    if !roots.has_fetched(version) {
        conn.peer
            .notify("notifications/roots/list_changed", None)
            .await;
    }
    let Some(intro) = introspection else {
        let fetched = roots.wait_fetched(version, QUIET_FETCH_WAIT).await;
        if fetched {
            tokio::time::sleep(SETTLE).await;
        }
        return Applied::Settled { fetched };
    };
    if !roots.wait_fetched(version, FETCH_WAIT).await {
        tracing::debug!(server = %conn.server, "did not fetch roots v{version}; checking its report anyway");
    }
    let started = Instant::now();
    let mut polls = 0u32;
    let mut missing;
    loop {
        polls += 1;
        let reported = report(conn, intro).await;
        missing = want
            .iter()
            .filter(|w| !reported.contains(w))
            .cloned()
            .collect::<Vec<_>>();
        if missing.is_empty() {
            return Applied::Reported { polls };
        }
        if started.elapsed() >= POLL_FOR {
            return Applied::NotReported { missing };
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

async fn report(conn: &Connection, intro: Introspection) -> Vec<PathBuf> {
    let req = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
        intro.tool(),
    )));
    let result = conn
        .request(req, PROBE_TIMEOUT, OnBehalf::palisade())
        .await
        .and_then(|raw| {
            crate::gateway::server::request::parse::<CallToolResult>(
                &conn.server,
                "tools/call",
                &raw,
            )
        });
    match result {
        Ok(r) if r.is_error != Some(true) => {
            let text: String = r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n");
            intro.parse(&text)
        }
        other => {
            tracing::debug!(server = %conn.server, "{} failed: {other:?}", intro.tool());
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_parsed_into_paths() {
        let fs = "Allowed directories:\n/tmp/a\n/tmp/b c\n";
        assert_eq!(
            Introspection::AllowedDirectories.parse(fs),
            [PathBuf::from("/tmp/a"), PathBuf::from("/tmp/b c")]
        );
        let lr = r#"{"version": 3, "source": "client", "roots": [{"path": "/x", "access": "rw"}]}"#;
        assert_eq!(Introspection::ListRoots.parse(lr), [PathBuf::from("/x")]);
        assert!(Introspection::ListRoots.parse("not json").is_empty());
    }
}
