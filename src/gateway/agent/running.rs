//! Requests an agent's front answers on their own tasks, while they run: each under a key
//! that a `notifications/cancelled` can name, with the token that cancels it.
//!
//! Both fronts keep one: the stdio front keys a request by its id (its JSON text, as
//! `RequestId` writes it), the HTTP fast path by (session id, id as the agent wrote it).
//! A request is registered by `start`, whose guard takes it out when the request ends or is
//! dropped (an HTTP client that goes away drops its call): no entry outlives its request.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// The running requests, by key.
pub struct Running<K> {
    map: Mutex<Entries<K>>,
}

struct Entries<K> {
    by_key: HashMap<K, (u64, CancellationToken)>,
    /// Numbers the requests, so that an ended request never removes a newer one that an
    /// agent started under the same key (an id reused before its answer came).
    next: u64,
}

impl<K> Default for Running<K> {
    fn default() -> Self {
        Running {
            map: Mutex::new(Entries {
                by_key: HashMap::new(),
                next: 0,
            }),
        }
    }
}

/// One request registered in `Running`; taken out when this is dropped.
pub struct Started<K: Eq + Hash> {
    running: Arc<Running<K>>,
    key: K,
    serial: u64,
    token: CancellationToken,
}

impl<K: Eq + Hash> Started<K> {
    /// The token that cancels this request.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl<K: Eq + Hash> Drop for Started<K> {
    fn drop(&mut self) {
        let mut entries = self.running.entries();
        if entries
            .by_key
            .get(&self.key)
            .is_some_and(|(s, _)| *s == self.serial)
        {
            entries.by_key.remove(&self.key);
        }
    }
}

impl<K: Eq + Hash> Running<K> {
    fn entries(&self) -> MutexGuard<'_, Entries<K>> {
        // Each change is one insert or remove: a panic elsewhere cannot leave it half-changed.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a request starting under `key`. A key already running (an agent reusing an
    /// id it has not seen answered) names the new request from now on.
    pub fn start(self: &Arc<Self>, key: K) -> Started<K>
    where
        K: Clone,
    {
        let token = CancellationToken::new();
        let serial = {
            let mut entries = self.entries();
            let serial = entries.next;
            entries.next += 1;
            entries.by_key.insert(key.clone(), (serial, token.clone()));
            serial
        };
        Started {
            running: Arc::clone(self),
            key,
            serial,
            token,
        }
    }

    /// The cancellation of the request running under `key`, if one is.
    pub fn get(&self, key: &K) -> Option<CancellationToken> {
        self.entries().by_key.get(key).map(|(_, ct)| ct.clone())
    }

    /// Cancels every request still running (the agent has gone).
    pub fn cancel_all(&self) {
        for (_, (_, ct)) in self.entries().by_key.drain() {
            ct.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_found_while_it_runs_and_forgotten_when_it_ends() {
        let running = Arc::new(Running::default());
        let started = running.start("7".to_string());
        let found = running.get(&"7".to_string());
        found.iter().for_each(CancellationToken::cancel);
        assert!(
            found.is_some() && started.token().is_cancelled(),
            "the token found is the request's"
        );
        drop(started);
        assert!(running.get(&"7".to_string()).is_none());
    }

    #[test]
    fn an_ended_request_leaves_a_newer_one_under_its_key_in_place() {
        let running = Arc::new(Running::default());
        let older = running.start(1);
        let newer = running.start(1);
        drop(older);
        let found = running.get(&1);
        found.iter().for_each(CancellationToken::cancel);
        assert!(
            newer.token().is_cancelled(),
            "the newer request is still found"
        );
        drop(newer);
        assert!(running.get(&1).is_none());
    }

    #[test]
    fn cancelling_all_reaches_every_request_and_empties_the_map() {
        let running = Arc::new(Running::default());
        let started: Vec<_> = (0..3).map(|i| running.start(i)).collect();
        running.cancel_all();
        assert!(started.iter().all(|s| s.token().is_cancelled()));
        assert!((0..3).all(|i| running.get(&i).is_none()));
    }
}
