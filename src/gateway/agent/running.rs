//! Requests an agent's front answers on their own tasks, while they run: each under a key
//! that a `notifications/cancelled` can name, with the token that cancels it.
//!
//! Both fronts keep one: the stdio front keys a request by its id (its JSON text, as
//! `RequestId` writes it), the HTTP fast path by (session id, id as the agent wrote it).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// The running requests, by key.
pub struct Running<K> {
    map: Mutex<HashMap<K, CancellationToken>>,
}

impl<K> Default for Running<K> {
    fn default() -> Self {
        Running {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> Running<K> {
    fn map(&self) -> MutexGuard<'_, HashMap<K, CancellationToken>> {
        // Each change is one insert or remove: a panic elsewhere cannot leave it half-changed.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a request starting under `key`; the token that cancels it. A key already
    /// running (an agent reusing an id it has not seen answered) now names the new request.
    pub fn start(&self, key: K) -> CancellationToken {
        let ct = CancellationToken::new();
        self.map().insert(key, ct.clone());
        ct
    }

    /// The request under `key` has ended.
    pub fn finish(&self, key: &K) {
        self.map().remove(key);
    }

    /// The cancellation of the request running under `key`, if one is.
    pub fn get(&self, key: &K) -> Option<CancellationToken> {
        self.map().get(key).cloned()
    }

    /// Cancels every request still running (the agent has gone).
    pub fn cancel_all(&self) {
        for (_, ct) in self.map().drain() {
            ct.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_found_while_it_runs_and_forgotten_when_it_ends() {
        let running = Running::default();
        let ct = running.start("7".to_string());
        let found = running.get(&"7".to_string());
        found.iter().for_each(CancellationToken::cancel);
        assert!(
            found.is_some() && ct.is_cancelled(),
            "the token found is the request's"
        );
        running.finish(&"7".to_string());
        assert!(running.get(&"7".to_string()).is_none());
    }

    #[test]
    fn cancelling_all_reaches_every_request_and_empties_the_map() {
        let running = Running::default();
        let tokens: Vec<_> = (0..3).map(|i| running.start(i)).collect();
        running.cancel_all();
        assert!(tokens.iter().all(CancellationToken::is_cancelled));
        assert!((0..3).all(|i| running.get(&i).is_none()));
    }
}
