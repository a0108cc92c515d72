//! The agent's own roots: when the agent's MCP client declares `roots`, palisade asks it for
//! them (after `initialized`, and again on each `notifications/roots/list_changed`) and a
//! call whose path argument lies outside them is refused before the policy is asked. They
//! only narrow: a server's own root set never grows from them. The session sandbox dir is
//! palisade's own scratch space and stays usable whatever the client declares.
//!
//! Never: widen anything from the agent's roots, or treat an unreadable answer as "no limit"
//! once the client has declared roots (an unusable answer refuses every path outside the
//! session sandbox dir).
#![allow(deprecated)] // roots are deprecated in rmcp (SEP-2577) but still used.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::service::Peer;
use rmcp::RoleServer;
use tokio::sync::watch;

use crate::gateway::server::roots::RootSet;
use crate::policy::PathArg;
use crate::roots::canon::{self, Base};
use crate::roots::derive::RootSource;
use crate::roots::guard::{GuardOptions, RootGuard};
use crate::roots::resolved::CallPaths;
use crate::roots::uri;
use crate::sandbox::Access;

/// How long the agent's client gets to answer `roots/list`.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The agent's roots, once known (`None`: the client declared none, so no narrowing).
pub struct UpstreamRoots {
    guard: RwLock<Option<Arc<RootGuard>>>,
    /// Set once the first answer (or failure) is in: calls wait for it.
    known: watch::Sender<bool>,
}

impl Default for UpstreamRoots {
    fn default() -> Self {
        UpstreamRoots {
            guard: RwLock::new(None),
            known: watch::channel(false).0,
        }
    }
}

fn declared(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|i| i.capabilities.roots.is_some())
}

impl UpstreamRoots {
    /// When the agent's client declared roots, waits (bounded) until they are known, so a
    /// call sent right after `initialized` is not judged without them; on timeout every path
    /// outside the session sandbox dir is refused until they arrive.
    pub async fn wait_known(&self, peer: &Peer<RoleServer>) {
        if !declared(peer) || *self.known.borrow() {
            return;
        }
        let mut rx = self.known.subscribe();
        if tokio::time::timeout(ASK_TIMEOUT, rx.wait_for(|k| *k))
            .await
            .is_err()
        {
            let mut g = self.guard.write().unwrap_or_else(|e| e.into_inner());
            if g.is_none() {
                tracing::warn!("the agent's roots are still unknown; refusing paths outside the session sandbox dir");
                *g = Some(Arc::new(RootGuard::empty()));
            }
        }
    }

    pub fn get(&self) -> Option<Arc<RootGuard>> {
        self.guard.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, g: Option<Arc<RootGuard>>) {
        *self.guard.write().unwrap_or_else(|e| e.into_inner()) = g;
    }

    /// Asks the agent's client for its roots when it declared the capability.
    pub async fn refresh(&self, peer: &Peer<RoleServer>) {
        if !declared(peer) {
            return;
        }
        let answer = tokio::time::timeout(ASK_TIMEOUT, peer.list_roots()).await;
        let guard = match answer {
            Ok(Ok(r)) => {
                let mut dirs = Vec::new();
                for root in &r.roots {
                    match uri::uri_to_path(&root.uri) {
                        Ok(p) => dirs.push((p, Access::Rw)),
                        Err(e) => tracing::warn!("agent root {:?} ignored: {e}", root.uri),
                    }
                }
                RootGuard::new(dirs, GuardOptions::default()).unwrap_or_else(|e| {
                    tracing::warn!(
                        "agent roots unusable ({e}); refusing paths outside the sandbox dir"
                    );
                    RootGuard::empty()
                })
            }
            other => {
                tracing::warn!(
                    "the agent's client declared roots but roots/list failed ({other:?}); \
                     refusing paths outside the session sandbox dir until it answers"
                );
                RootGuard::empty()
            }
        };
        tracing::info!("agent roots: {}", guard.describe_roots());
        self.set(Some(Arc::new(guard)));
        self.known.send_replace(true);
    }

    /// The refusal for a call with a path argument outside the agent's roots, if any.
    /// `cwd` and `home` resolve relative and `~` paths as the server's root check does.
    pub fn refuse(
        &self,
        args: &[PathArg<'_>],
        set: &RootSet,
        cwd: Option<&Path>,
        home: Option<&Path>,
        paths: &CallPaths,
    ) -> Option<String> {
        let agent = self.get()?;
        let sandbox_dir = set
            .roots
            .iter()
            .find(|r| r.source == RootSource::SandboxDir)
            .map(|r| r.path.as_path());
        let base = Base { cwd, home };
        for a in args {
            // A path that cannot be canonicalised is refused later by the roots check.
            let Ok(p) = paths.input(a.value, &base) else {
                continue;
            };
            if sandbox_dir.is_some_and(|s| canon::is_within(&p, s)) {
                continue;
            }
            if agent.deepest_root(&p).is_none() {
                return Some(format!(
                    "FORBIDDEN: {} is outside the roots your MCP client declared ({})",
                    p.display(),
                    agent.describe_roots()
                ));
            }
        }
        None
    }
}
