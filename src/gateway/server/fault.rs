//! Faults of one running server process: its output-rate budget, the protocol faults its
//! pipe readers detect (a line over the length cap, output over the rate limit), and the
//! reason it ended, kept for the calls it left unanswered.
//!
//! Where it sits: created by the supervisor (`supervisor/start.rs`) for every start, charged
//! by the stdout tap (`tap.rs`) and the stderr reader (`spawn.rs`), watched by the supervisor
//! (which kills and restarts a faulting server like a crash), and read by the request helper
//! (`request.rs`) so that a call cut short says why.
//! Never: block (std locks around plain numbers only), or forget a fault once set (the first
//! one wins and stays).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The default sustained output rate of one server (stdout and stderr together).
pub const DEFAULT_OUTPUT_BYTES_PER_SECOND: u64 = 32 * 1024 * 1024;
/// The burst a server may write above the rate, in seconds of its rate (with the default
/// rate: 256 MiB, sixteen of the largest messages a server can send).
pub const BURST_SECONDS: u64 = 8;
/// How long a server may send requests while leaving its stdin full (the supervisor uses the
/// call timeout).
pub const DEFAULT_STALL_LIMIT: Duration = Duration::from_secs(60);

/// A token bucket over bytes: `rate` bytes per second, `burst` bytes at most saved up.
/// Pure apart from the clock it is given.
#[derive(Debug, Clone)]
pub struct OutputBudget {
    rate: u64,
    burst: u64,
    tokens: f64,
    last: Instant,
}

impl OutputBudget {
    /// A full bucket for `rate` bytes/s (burst `BURST_SECONDS` of it, at least one line cap).
    pub fn new(rate: u64, now: Instant) -> OutputBudget {
        let rate = rate.max(1);
        let burst = rate
            .saturating_mul(BURST_SECONDS)
            .max(crate::gateway::server::MAX_LINE as u64 + 1);
        OutputBudget {
            rate,
            burst,
            tokens: burst as f64,
            last: now,
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Takes `bytes` from the bucket; false when the server has written more than its
    /// budget (the bucket stays empty).
    pub fn charge(&mut self, bytes: u64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate as f64).min(self.burst as f64);
        self.tokens -= bytes as f64;
        if self.tokens < 0.0 {
            self.tokens = 0.0;
            return false;
        }
        true
    }
}

/// Shared by everything that reads or supervises one server process.
#[derive(Debug)]
pub struct ProcessFaults {
    server: String,
    budget: Mutex<OutputBudget>,
    /// The first protocol or resource fault the readers saw; the supervisor kills on it.
    fault: OnceLock<String>,
    fault_set: Notify,
    /// Why the process ended, once the supervisor knows (fault, exit status, limits hit).
    ended: OnceLock<String>,
    ended_set: Notify,
    /// Whether the server is reading its stdin (see `stdin_watch.rs`).
    pub stdin: Arc<crate::gateway::server::stdin_watch::StdinState>,
    /// How long the server may leave its stdin full while it sends requests.
    pub stall_limit: Duration,
    /// The last lines the server wrote on stderr, for the reason a start failed (a missing
    /// module, a bad flag: the server says why, and the user should see it).
    stderr_tail: Mutex<std::collections::VecDeque<String>>,
    /// Set when the stderr reader has finished (the process closed its stderr).
    stderr_closed: std::sync::atomic::AtomicBool,
    stderr_closed_set: Notify,
}

/// Lines of stderr kept for a failed start's reason, and bytes kept of each.
const STDERR_TAIL_LINES: usize = 6;
const STDERR_TAIL_LINE: usize = 300;

impl ProcessFaults {
    pub fn new(server: &str, output_bytes_per_second: u64) -> ProcessFaults {
        ProcessFaults {
            server: server.to_string(),
            budget: Mutex::new(OutputBudget::new(output_bytes_per_second, Instant::now())),
            fault: OnceLock::new(),
            fault_set: Notify::new(),
            ended: OnceLock::new(),
            ended_set: Notify::new(),
            stdin: Arc::default(),
            stall_limit: DEFAULT_STALL_LIMIT,
            stderr_tail: Mutex::default(),
            stderr_closed: Default::default(),
            stderr_closed_set: Notify::new(),
        }
    }

    /// Keeps one stderr line among the last few (blank lines are skipped).
    pub fn note_stderr(&self, line: &str) {
        let line = line.trim_end();
        if line.trim().is_empty() {
            return;
        }
        let mut cut = line.len().min(STDERR_TAIL_LINE);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line[..cut].to_string());
    }

    /// The stderr reader is done.
    pub fn stderr_closed(&self) {
        self.stderr_closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.stderr_closed_set.notify_waiters();
    }

    /// The last stderr lines, joined, once the reader has read to the end (waiting at most
    /// `wait`: a process that failed has closed its stderr, but the reader may lag).
    pub async fn stderr_tail(&self, wait: Duration) -> Option<String> {
        let closed = || {
            self.stderr_closed
                .load(std::sync::atomic::Ordering::Acquire)
        };
        if !closed() {
            let notified = self.stderr_closed_set.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !closed() {
                let _ = tokio::time::timeout(wait, notified).await;
            }
        }
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (!tail.is_empty()).then(|| tail.iter().cloned().collect::<Vec<_>>().join(" | "))
    }

    /// Sets how long the server may leave its stdin full while it sends requests.
    pub fn with_stall_limit(mut self, limit: Duration) -> ProcessFaults {
        self.stall_limit = limit;
        self
    }

    /// Counts `bytes` the server wrote (stdout or stderr). Over the budget it is a fault:
    /// recorded (first one wins), logged, and false is returned so the reader can stop.
    pub fn charge(&self, bytes: usize) -> bool {
        let (ok, rate, burst) = {
            let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
            (b.charge(bytes as u64, Instant::now()), b.rate(), b.burst())
        };
        if !ok {
            self.protocol_fault(format!(
                "it exceeded its output-rate limit ({rate} bytes/s, bursts up to {burst} bytes, \
                 stdout and stderr together; sandbox.limits.outputBytesPerSecond)"
            ));
        }
        ok
    }

    /// Records a fault of this process (the first one is kept) and wakes the supervisor.
    pub fn protocol_fault(&self, why: String) {
        if self.fault.set(why.clone()).is_ok() {
            tracing::error!(server = %self.server, "fault: {why}; the server will be killed and restarted");
            self.fault_set.notify_one();
        }
    }

    /// The recorded fault, if any.
    pub fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    /// Resolves once a fault is recorded, with its text.
    pub async fn tripped(&self) -> String {
        loop {
            let notified = self.fault_set.notified();
            if let Some(f) = self.fault.get() {
                return f.clone();
            }
            notified.await;
        }
    }

    /// The supervisor's account of how the process ended (the first one is kept).
    pub fn set_ended(&self, why: String) {
        if self.ended.set(why).is_ok() {
            self.ended_set.notify_waiters();
        }
    }

    /// Why the process ended: a recorded fault at once, else the supervisor's account,
    /// waiting at most `wait` for it (a call cut short by a crash learns the exit status or
    /// the limit that killed it; the supervisor sees the exit a moment after the pipe closes).
    pub async fn ended(&self, wait: Duration) -> Option<String> {
        if let Some(f) = self.fault.get() {
            return Some(f.clone());
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.ended_set.notified();
            if let Some(e) = self.ended.get() {
                return Some(e.clone());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.ended.get().cloned();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = OutputBudget::new(1000, t0);
        // The burst is at least one maximal line, so a rate this low still lets one through.
        assert_eq!(b.burst(), crate::gateway::server::MAX_LINE as u64 + 1);
        assert!(b.charge(b.burst(), t0));
        assert!(!b.charge(1, t0), "the bucket is empty");
        // One second refills `rate` bytes.
        assert!(b.charge(1000, t0 + Duration::from_secs(1)));
        assert!(!b.charge(1, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_sustained_rate_under_the_limit_never_trips() {
        let t0 = Instant::now();
        let rate = 32 * 1024 * 1024;
        let mut b = OutputBudget::new(rate, t0);
        for i in 1..=1000u64 {
            // 90% of the rate, in 10 ms steps, for 10 s.
            assert!(b.charge(rate * 9 / 1000, t0 + Duration::from_millis(10 * i)));
        }
    }

    #[tokio::test]
    async fn the_first_fault_wins_and_calls_learn_why_it_ended() {
        let f = ProcessFaults::new("s", 1000);
        f.protocol_fault("first".into());
        f.protocol_fault("second".into());
        assert_eq!(f.tripped().await, "first");
        assert_eq!(
            f.ended(Duration::from_millis(1)).await.as_deref(),
            Some("first")
        );
        let g = ProcessFaults::new("s", 1000);
        assert_eq!(g.ended(Duration::from_millis(10)).await, None);
        g.set_ended("exit status: 3".into());
        assert_eq!(
            g.ended(Duration::from_millis(10)).await.as_deref(),
            Some("exit status: 3")
        );
    }
}
