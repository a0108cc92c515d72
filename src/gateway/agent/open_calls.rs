//! The calls forwarded to each server and not yet answered that can carry a request of that
//! server's to their own agent: a 2026-07-28 call (in its next round, `mrtr`) or a session's
//! call on the HTTP fast path (on its own stream, `asking`). A server's sampling or
//! elicitation request (`server/relay/`) comes with no mark of the call it serves, so it
//! goes to the one such call open to its server; with several, there is no telling.
//!
//! Never: guess between several open calls (a request could reach another client's agent).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::asking::Asker;
use super::mrtr::Round;

/// How an open call reaches its agent.
#[derive(Clone)]
pub enum Carrier {
    /// A 2026-07-28 call: the request goes in its next round.
    Round(Arc<Round>),
    /// A session's call answered on a stream of its own: the request goes on it.
    Stream(Arc<Asker>),
}

/// The open calls, by server.
#[derive(Default)]
pub struct OpenCalls {
    map: Mutex<HashMap<String, Vec<(u64, Carrier)>>>,
    next: AtomicU64,
}

/// Keeps a call registered as open; dropping it closes the call.
pub struct Open {
    calls: Arc<OpenCalls>,
    server: String,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut map = lock(&self.calls.map);
        if let Some(v) = map.get_mut(&self.server) {
            v.retain(|(id, _)| *id != self.id);
            if v.is_empty() {
                map.remove(&self.server);
            }
        }
    }
}

impl OpenCalls {
    pub fn open(self: &Arc<Self>, server: &str, carrier: Carrier) -> Open {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.map)
            .entry(server.to_string())
            .or_default()
            .push((id, carrier));
        Open {
            calls: self.clone(),
            server: server.to_string(),
            id,
        }
    }

    /// The call a request from `server` belongs to: its one open call. With none, or several
    /// (the request could be any one's), there is no telling: `Err` says so.
    pub fn only(&self, server: &str) -> Result<Carrier, &'static str> {
        match lock(&self.map).get(server).map(Vec::as_slice) {
            Some([(_, carrier)]) => Ok(carrier.clone()),
            Some([_, _, ..]) => Err("several calls to this server are in flight, so palisade cannot tell which one the request belongs to"),
            _ => Err("no call to this server is in flight to carry it to the client"),
        }
    }

    /// The carrier of the call the current task runs, if it has one: its 2026-07-28 round,
    /// or its own stream.
    pub fn current() -> Option<Carrier> {
        super::mrtr::current()
            .map(Carrier::Round)
            .or_else(|| super::asking::current().map(Carrier::Stream))
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
    fn a_request_goes_to_the_one_open_call_of_its_server_and_never_guesses() {
        let calls = Arc::new(OpenCalls::default());
        assert!(calls.only("fs").is_err());
        let first = calls.open("fs", round());
        let _other_server = calls.open("git", round());
        assert!(calls.only("fs").is_ok());
        let second = calls.open("fs", round());
        assert!(calls
            .only("fs")
            .err()
            .is_some_and(|e| e.contains("several")));
        drop(first);
        assert!(calls.only("fs").is_ok());
        drop(second);
        assert!(calls
            .only("fs")
            .err()
            .is_some_and(|e| e.contains("no call")));
    }
}
