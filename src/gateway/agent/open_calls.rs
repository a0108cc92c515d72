//! The requests forwarded to each server on an agent's behalf and not yet answered, and how
//! each reaches the agent that made it: a 2026-07-28 call in its next round (`mrtr`), a
//! session's call on the HTTP fast path on its own stream (`asking`), any other in its
//! session. A server's sampling or elicitation request (`server/relay/`) comes with no mark
//! of the request it serves (only a task's requests name their task), so it goes to the one
//! request open to its server; with several from different agents, there is no telling.
//!
//! Never: guess between requests of different agents (a question could reach another
//! client's agent), or forget a request in flight because it cannot carry a question (it
//! is still a request the question may belong to).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::service::{Peer, RequestContext};
use rmcp::RoleServer;

use super::asking::Asker;
use super::mrtr::Round;

/// How an open request reaches its agent.
#[derive(Clone)]
pub enum Carrier {
    /// A 2026-07-28 call: the request goes in its next round.
    Round(Arc<Round>),
    /// A session's call answered on a stream of its own: the request goes on it.
    Stream(Arc<Asker>),
    /// A request with neither: the server's request goes to the session it came in (the
    /// stdio agent's, or an HTTP session's stream for requests outside a POST).
    Session(Peer<RoleServer>),
}

impl Carrier {
    /// The carrier of the request the current task serves with `ctx`: its 2026-07-28 round,
    /// its own stream, else its session.
    pub fn of(ctx: &RequestContext<RoleServer>) -> Carrier {
        super::mrtr::current()
            .map(Carrier::Round)
            .or_else(|| super::asking::current().map(Carrier::Stream))
            .unwrap_or_else(|| Carrier::Session(ctx.peer.clone()))
    }

    /// Whether two carriers reach the same agent the same way: both a session's, the same
    /// session (its `initialize`, kept once per session, is the one record they share).
    fn same_session(&self, other: &Carrier) -> bool {
        match (self, other) {
            (Carrier::Session(a), Carrier::Session(b)) => match (a.peer_info(), b.peer_info()) {
                (Some(a), Some(b)) => Arc::ptr_eq(&a, &b),
                _ => false,
            },
            _ => false,
        }
    }
}

/// Why a server's request cannot be told to one open request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Untold {
    #[error("{}", self.text())]
    NoCall,
    #[error("{}", self.text())]
    Several,
}

impl Untold {
    /// The reason, as text that lives as long as the program.
    pub fn text(self) -> &'static str {
        match self {
            Untold::NoCall => "no request to this server is in flight to carry it to the client",
            Untold::Several => {
                "several requests to this server from different clients are in flight, so \
                 palisade cannot tell which one it belongs to"
            }
        }
    }
}

/// One open request: its key, the server's id of the task it reads (`tasks/*`), its carrier.
struct OpenCall {
    id: u64,
    task: Option<String>,
    carrier: Carrier,
}

/// The open requests, by server.
#[derive(Default)]
pub struct OpenCalls {
    map: Mutex<HashMap<String, Vec<OpenCall>>>,
    next: AtomicU64,
}

/// Keeps a request registered as open; dropping it closes the request.
pub struct Open {
    calls: Arc<OpenCalls>,
    server: String,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut map = lock(&self.calls.map);
        if let Some(v) = map.get_mut(&self.server) {
            v.retain(|call| call.id != self.id);
            if v.is_empty() {
                map.remove(&self.server);
            }
        }
    }
}

impl OpenCalls {
    /// Registers a request to `server` (reading the server's task `task`, if any) reaching
    /// its agent by `carrier`, until the `Open` is dropped.
    pub fn open(self: &Arc<Self>, server: &str, task: Option<&str>, carrier: Carrier) -> Open {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.map)
            .entry(server.to_string())
            .or_default()
            .push(OpenCall {
                id,
                task: task.map(str::to_string),
                carrier,
            });
        Open {
            calls: self.clone(),
            server: server.to_string(),
            id,
        }
    }

    /// The carrier a request from `server` goes by: its one open request's (a request naming
    /// its task `task` considers only those reading that task), or the one session all of
    /// them came in. With none, or several of different agents, there is no telling.
    pub fn only(&self, server: &str, task: Option<&str>) -> Result<Carrier, Untold> {
        let map = lock(&self.map);
        let mut open = map
            .get(server)
            .into_iter()
            .flatten()
            .filter(|call| task.is_none() || call.task.as_deref() == task);
        let first = open.next().ok_or(Untold::NoCall)?;
        if open.all(|call| call.carrier.same_session(&first.carrier)) {
            Ok(first.carrier.clone())
        } else {
            Err(Untold::Several)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one push or retain: a panic elsewhere cannot leave it half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round() -> Carrier {
        Carrier::Round(Arc::new(Round::new(None, None)))
    }

    #[test]
    fn a_request_goes_to_the_one_open_request_of_its_server_and_never_guesses() {
        let calls = Arc::new(OpenCalls::default());
        assert_eq!(calls.only("fs", None).err(), Some(Untold::NoCall));
        let first = calls.open("fs", None, round());
        let _other_server = calls.open("git", None, round());
        assert!(calls.only("fs", None).is_ok());
        let second = calls.open("fs", None, round());
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
        drop(first);
        assert!(calls.only("fs", None).is_ok());
        drop(second);
        assert_eq!(calls.only("fs", None).err(), Some(Untold::NoCall));
    }

    #[test]
    fn a_request_naming_its_task_goes_only_to_a_request_reading_that_task() {
        let calls = Arc::new(OpenCalls::default());
        let _call = calls.open("fs", None, round());
        assert_eq!(calls.only("fs", Some("t1")).err(), Some(Untold::NoCall));
        let _result = calls.open("fs", Some("t1"), round());
        assert!(calls.only("fs", Some("t1")).is_ok());
        // One that names no task could be either's.
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
    }
}
