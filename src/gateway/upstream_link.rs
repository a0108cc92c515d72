//! The agent's side of the connection, shared with every downstream handler so that
//! notifications (progress, logging, list changes, resource updates) can flow upstream.
//! Set once the agent's `initialize` arrives; read on every notification. A std `RwLock`
//! around a cheap clone: never held across an await.

use std::sync::{Arc, RwLock};

use rmcp::service::Peer;
use rmcp::RoleServer;

#[derive(Clone, Default)]
pub struct UpstreamLink(Arc<RwLock<Option<Peer<RoleServer>>>>);

impl UpstreamLink {
    pub fn set(&self, peer: Peer<RoleServer>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    /// The agent's peer, when one is connected and its transport is open.
    pub fn get(&self) -> Option<Peer<RoleServer>> {
        let guard = self.0.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|p| !p.is_transport_closed()).cloned()
    }
}

impl std::fmt::Debug for UpstreamLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamLink")
    }
}
