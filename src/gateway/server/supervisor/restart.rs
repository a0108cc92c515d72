//! The restart policy, pure: each failure (a failed start or a server's end) counts against
//! the budget `maxRestarts`; past it the supervisor gives up; before it, it waits an
//! exponential backoff. A server that ran long enough without failing gets its budget back.
//! No I/O and no clock: the supervisor says how long a process ran.

use std::time::Duration;

use crate::gateway::state::Limits;

/// A server that ran this long without failing gets its restart budget back.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// What the supervisor does after a failure.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Start again after `delay`; this is restart number `attempt`.
    Retry { attempt: u32, delay: Duration },
    /// Over the budget: `failures` failures in a row.
    GiveUp { failures: u32 },
}

/// The failures counted against one server's restart budget.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    failures: u32,
}

impl Restarts {
    /// A process ran for `ran` before it exited: a stable run gives the budget back.
    pub(super) fn ran_for(&mut self, ran: Duration) {
        if ran >= STABLE_AFTER {
            self.failures = 0;
        }
    }

    /// One more failure: retry after the backoff, or give up once past `max_restarts`.
    pub(super) fn failed(&mut self, limits: &Limits) -> Next {
        self.failures += 1;
        if self.failures > limits.max_restarts {
            return Next::GiveUp {
                failures: self.failures,
            };
        }
        Next::Retry {
            attempt: self.failures,
            delay: backoff(limits, self.failures),
        }
    }
}

/// Exponential backoff: base * 2^(n-1), capped.
pub fn backoff(limits: &Limits, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    limits
        .backoff_base
        .saturating_mul(factor)
        .min(limits.backoff_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let l = Limits {
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(4),
            ..Limits::default()
        };
        let got: Vec<_> = (1..=6).map(|n| backoff(&l, n).as_millis()).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 4000, 4000]);
    }

    #[test]
    fn failures_past_max_restarts_give_up_and_a_stable_run_resets_the_count() {
        let l = Limits {
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(4),
            max_restarts: 2,
            ..Limits::default()
        };
        let mut r = Restarts::default();
        let retry = |attempt, ms| Next::Retry {
            attempt,
            delay: Duration::from_millis(ms),
        };
        assert_eq!(r.failed(&l), retry(1, 500));
        // A short run keeps the count.
        r.ran_for(STABLE_AFTER - Duration::from_secs(1));
        assert_eq!(r.failed(&l), retry(2, 1000));
        assert_eq!(r.failed(&l), Next::GiveUp { failures: 3 });
        // A stable run gives the budget back.
        let mut r = Restarts::default();
        r.failed(&l);
        r.failed(&l);
        r.ran_for(STABLE_AFTER);
        assert_eq!(r.failed(&l), retry(1, 500));
    }
}
