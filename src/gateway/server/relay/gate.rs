//! A server's relay budget: requests in flight (a semaphore, never queued on), requests per
//! minute (a token bucket), and how many refusals are written down (another bucket, with a
//! count of the rest). Lives in the server's slot, so a restart does not refill it.
//!
//! Never: block or await (a refusal must stay cheap under a flood); hold a lock beyond one
//! bucket update.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::policy::{Kind, Refusal, RelayPolicy};

/// Refusals of one server written to the audit log (and the log) per minute; the rest are
/// counted and the count goes into the next refusal's record.
pub const REFUSALS_AUDITED_PER_MINUTE: u32 = 10;

/// A token bucket of `capacity` tokens refilled at `capacity` per minute. Pure: the caller
/// gives the time.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_sec: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn per_minute(n: u32, now: Instant) -> TokenBucket {
        let capacity = f64::from(n.max(1));
        TokenBucket {
            capacity,
            tokens: capacity,
            per_sec: capacity / 60.0,
            last: now,
        }
    }

    /// Takes a token if one is left at `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The refusal audit budget: a bucket, and the refusals not audited since the last one.
#[derive(Debug)]
struct RefusalBudget {
    bucket: TokenBucket,
    suppressed: u64,
}

/// One server's relay state: its policy, in-flight slots and rate bucket. Lives in the
/// server's slot, so a server that crashes and restarts keeps its budget.
#[derive(Debug)]
pub struct RelayGate {
    pub(super) server: String,
    policy: RelayPolicy,
    in_flight: Arc<Semaphore>,
    rate: Mutex<TokenBucket>,
    refusals: Mutex<RefusalBudget>,
}

impl RelayGate {
    pub fn new(server: &str, policy: RelayPolicy) -> RelayGate {
        let now = Instant::now();
        RelayGate {
            server: server.to_string(),
            policy,
            in_flight: Arc::new(Semaphore::new(policy.max_concurrent as usize)),
            rate: Mutex::new(TokenBucket::per_minute(policy.per_minute, now)),
            refusals: Mutex::new(RefusalBudget {
                bucket: TokenBucket::per_minute(REFUSALS_AUDITED_PER_MINUTE, now),
                suppressed: 0,
            }),
        }
    }

    pub fn policy(&self) -> &RelayPolicy {
        &self.policy
    }

    /// A slot and a token for one admitted request, or why not. A slot is checked first so
    /// that a request refused for being one too many does not also spend a token.
    pub(super) fn start(&self, kind: Kind) -> Result<OwnedSemaphorePermit, Refusal> {
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy {
                server: self.server.clone(),
                kind,
                max: self.policy.max_concurrent,
            })?;
        let token = self
            .rate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now());
        if !token {
            return Err(Refusal::RateLimited {
                server: self.server.clone(),
                kind,
                per_minute: self.policy.per_minute,
            });
        }
        Ok(permit)
    }

    /// Whether this refusal is audited: `Some(n)` with the refusals suppressed since the
    /// last audited one, `None` when over budget (it is counted).
    pub(super) fn refusal_audited(&self) -> Option<u64> {
        let mut b = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if b.bucket.take(Instant::now()) {
            Some(std::mem::take(&mut b.suppressed))
        } else {
            b.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn on() -> RelayPolicy {
        RelayPolicy {
            sampling: true,
            elicitation: true,
            ..RelayPolicy::default()
        }
    }

    #[test]
    fn the_bucket_allows_its_size_then_refills_over_a_minute() {
        let t0 = Instant::now();
        let mut b = TokenBucket::per_minute(3, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0), "a fourth in the same instant");
        assert!(!b.take(t0 + Duration::from_secs(10)), "a third of a token");
        assert!(b.take(t0 + Duration::from_secs(20)), "one token after 20 s");
        assert!(!b.take(t0 + Duration::from_secs(20)));
        // Never more than the capacity, however long it was idle.
        let later = t0 + Duration::from_secs(3600);
        assert!(b.take(later) && b.take(later) && b.take(later));
        assert!(!b.take(later));
    }

    #[test]
    fn the_gate_bounds_requests_in_flight_and_per_minute() {
        let gate = RelayGate::new(
            "s",
            RelayPolicy {
                max_concurrent: 2,
                per_minute: 3,
                ..on()
            },
        );
        let a = gate.start(Kind::Sampling).unwrap();
        let b = gate.start(Kind::Sampling).unwrap();
        let busy = gate.start(Kind::Elicitation).unwrap_err();
        assert!(matches!(busy, Refusal::Busy { max: 2, .. }), "{busy}");
        assert!(busy.to_string().contains("relay.maxConcurrent"));
        drop(a);
        let c = gate.start(Kind::Sampling).unwrap();
        drop((b, c));
        // Three tokens spent; the busy refusal did not spend one.
        let limited = gate.start(Kind::Sampling).unwrap_err();
        assert!(
            matches!(limited, Refusal::RateLimited { per_minute: 3, .. }),
            "{limited}"
        );
        assert!(limited.to_string().contains("relay.perMinute"));
    }

    #[test]
    fn refusals_beyond_the_budget_are_counted_not_audited() {
        let gate = RelayGate::new("s", RelayPolicy::default());
        for _ in 0..REFUSALS_AUDITED_PER_MINUTE {
            assert_eq!(gate.refusal_audited(), Some(0));
        }
        assert_eq!(gate.refusal_audited(), None);
        assert_eq!(gate.refusal_audited(), None);
        assert_eq!(gate.refusals.lock().unwrap().suppressed, 2);
    }
}
