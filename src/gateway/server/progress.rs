//! Progress-token mapping for one downstream connection.
//!
//! rmcp gives every outgoing request its own progress token, so a downstream server reports
//! progress under a token the agent never sent. The forward stage registers
//! `downstream token -> (upstream token, upstream peer)` for the call's lifetime; the
//! downstream handler looks tokens up and re-sends the notification upstream under the
//! agent's token. A notification can overtake the registration (the request is already on
//! the wire when rmcp hands back its token), so unknown tokens are parked in a small bounded
//! buffer and delivered on registration. Never blocks: a std mutex guards plain map edits and
//! is never held across an await.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use rmcp::model::{ProgressNotificationParam, ProgressToken};

/// How many early notifications are kept while their call registers (oldest dropped).
const PARKED_LIMIT: usize = 64;

/// Where a downstream token's progress goes.
pub trait ProgressTarget: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> ProgressTarget for T {}

/// The mapping for one connection. `T` is the upstream destination (a peer and the agent's
/// token in production; anything cloneable in tests).
#[derive(Debug)]
pub struct ProgressMap<T> {
    inner: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    routes: HashMap<ProgressToken, T>,
    parked: VecDeque<ProgressNotificationParam>,
}

impl<T: ProgressTarget> Default for ProgressMap<T> {
    fn default() -> Self {
        ProgressMap {
            inner: Mutex::new(State {
                routes: HashMap::new(),
                parked: VecDeque::new(),
            }),
        }
    }
}

impl<T: ProgressTarget> ProgressMap<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // A poisoned map only means a panic elsewhere mid-edit of plain maps; the data is
        // still consistent enough to route progress.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes `token` to `target`; returns notifications that arrived before this call.
    pub fn register(&self, token: ProgressToken, target: T) -> Vec<ProgressNotificationParam> {
        let mut st = self.lock();
        st.routes.insert(token.clone(), target);
        let (early, rest): (Vec<_>, Vec<_>) =
            st.parked.drain(..).partition(|p| p.progress_token == token);
        st.parked = rest.into();
        early
    }

    /// Ends the route for `token` (the call finished).
    pub fn unregister(&self, token: &ProgressToken) {
        self.lock().routes.remove(token);
    }

    /// Where this notification goes; parks it when its call has not registered yet.
    pub fn route(&self, params: &ProgressNotificationParam) -> Option<T> {
        let mut st = self.lock();
        if let Some(t) = st.routes.get(&params.progress_token) {
            return Some(t.clone());
        }
        if st.parked.len() >= PARKED_LIMIT {
            st.parked.pop_front();
        }
        st.parked.push_back(params.clone());
        None
    }

    /// Number of live routes (for tests and leak checks).
    pub fn len(&self) -> usize {
        self.lock().routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn tok(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    #[test]
    fn routes_registered_tokens_and_forgets_them_after_the_call() {
        let map = ProgressMap::<&'static str>::default();
        assert!(map.register(tok(1), "agent-a").is_empty());
        assert_eq!(
            map.route(&ProgressNotificationParam::new(tok(1), 0.5)),
            Some("agent-a")
        );
        map.unregister(&tok(1));
        assert!(map.is_empty());
    }

    #[test]
    fn early_notifications_are_delivered_on_registration() {
        let map = ProgressMap::<&'static str>::default();
        assert_eq!(
            map.route(&ProgressNotificationParam::new(tok(7), 1.0)),
            None
        );
        assert_eq!(
            map.route(&ProgressNotificationParam::new(tok(8), 1.0)),
            None
        );
        let early = map.register(tok(7), "agent");
        assert_eq!(early.len(), 1);
        assert_eq!(early[0].progress_token, tok(7));
        // the other parked one stays parked for its own call
        assert_eq!(map.register(tok(8), "agent").len(), 1);
    }

    #[test]
    fn the_parking_lot_is_bounded() {
        let map = ProgressMap::<()>::default();
        for i in 0..(PARKED_LIMIT as i64 + 10) {
            map.route(&ProgressNotificationParam::new(tok(i), 1.0));
        }
        assert!(map.register(tok(0), ()).is_empty(), "oldest was dropped");
        assert_eq!(map.register(tok(PARKED_LIMIT as i64 + 9), ()).len(), 1);
    }
}
