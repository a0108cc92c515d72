//! The agent's side of the connection, shared with every downstream handler so that
//! notifications (progress, logging, list changes, resource updates) can flow upstream.
//! Set once the agent's `initialize` arrives; read on every notification. A std `RwLock`
//! around a cheap clone: never held across an await.
//!
//! Relayed notifications that nobody waits for (logging, resource updates) take a share of a
//! fixed relay budget while they are being written: when the agent does not read and a server
//! keeps sending, they are dropped (and counted in the log) instead of queueing without bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rmcp::service::Peer;
use rmcp::RoleServer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of relayed notifications in flight to the agent at most (in units of `UNIT`).
const RELAY_BUDGET_UNITS: u32 = 1024;
const UNIT: usize = 16 * 1024;

#[derive(Clone)]
pub struct UpstreamLink {
    peer: Arc<RwLock<Option<Peer<RoleServer>>>>,
    relays: Arc<Semaphore>,
    dropped: Arc<AtomicU64>,
}

impl Default for UpstreamLink {
    fn default() -> Self {
        UpstreamLink {
            peer: Arc::default(),
            relays: Arc::new(Semaphore::new(RELAY_BUDGET_UNITS as usize)),
            dropped: Arc::default(),
        }
    }
}

impl UpstreamLink {
    pub fn set(&self, peer: Peer<RoleServer>) {
        *self.peer.write().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    /// The agent's peer, when one is connected and its transport is open.
    pub fn get(&self) -> Option<Peer<RoleServer>> {
        let guard = self.peer.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|p| !p.is_transport_closed()).cloned()
    }

    /// The agent's peer and a share of the relay budget for a notification of about
    /// `bytes`, held until it is written; `None` (the notification is dropped, counted and
    /// logged) when the budget is spent, i.e. the agent is not keeping up.
    pub fn for_relay(&self, bytes: usize) -> Option<(Peer<RoleServer>, OwnedSemaphorePermit)> {
        let peer = self.get()?;
        let units = (bytes / UNIT + 1).min(RELAY_BUDGET_UNITS as usize) as u32;
        match self.relays.clone().try_acquire_many_owned(units) {
            Ok(permit) => Some((peer, permit)),
            Err(_) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(10_000) {
                    tracing::warn!(
                        "the client is not reading fast enough: {n} notification(s) from servers dropped so far"
                    );
                }
                None
            }
        }
    }
}

impl std::fmt::Debug for UpstreamLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamLink")
    }
}
