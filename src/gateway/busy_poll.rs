//! Busy polling for an agent on stdio: before the runtime's thread sleeps, it watches the
//! agent's stdin and the servers' stdouts for a short while, so that the next line is read
//! without a sleep and a wake-up.
//!
//! Why: a call through the gateway crosses two more pipes than a direct one, and each line
//! that arrives while the gateway sleeps costs a wake-up (an interrupt to an idle CPU, the
//! scheduler's switch back into the gateway). On these machines those wake-ups were most of
//! what a call added, about as much as a relay that reads nothing (`socat`) adds; no
//! saving in the gateway's own code could reach the 50 µs target past them
//! (docs/benchmarks.md, "Busy polling before the thread sleeps"). A thread that is still
//! running when the line arrives reads it at once.
//!
//! The cost is CPU: the thread spins while it waits (yielding the CPU between looks, so a
//! thread that shares it, such as a server just started on the gateway's CPU, is not held
//! back). It is bounded three ways:
//! - the spin lasts at most the current budget (at most `busyPollMicros`, default
//!   [`DEFAULT_MICROS`]), then the thread sleeps as before;
//! - it spins only while at most one relayed request is in flight: with more, the gateway
//!   has work waiting and the machine's CPUs are better left to the servers and the agent
//!   (on two cores a spinning gateway cost 16 callers a quarter of their throughput);
//! - the budget adapts, as KVM's halt polling does: a spin that expired although the wake-up
//!   came soon after grows it, one that expired long before the wake-up halves it, down to
//!   nothing. There are two budgets, one for each thing the thread can be waiting for: the
//!   agent's next request (nothing in flight) and a server's answer (one request in flight).
//!   Kept apart, an agent that thinks for seconds between calls costs no spinning at all,
//!   while the wait for a quick server keeps its budget; with one budget for both, each long
//!   wait for the agent halved the budget below the server's answer time, and every spin
//!   after it missed.
//!
//! The watch set is an epoll instance of its own, level-triggered, holding the same pipes the
//! runtime's reactor reads: a line waiting in any of them ends the spin, and the reactor's
//! own wait then returns at once (its edge-triggered event is still pending). A task woken
//! from another thread (the blocking pool) ends it too. What the spin does not watch (a due
//! timer, a signal, a pipe becoming writable, the main future woken from another thread) is
//! not lost: tokio's park after the hook finds it pending and returns at once. It is only
//! late: by about the current budget, or longer when a look yields the CPU to another
//! thread for its time slice (as the thread's sleep would have). A server's pipe leaves the set
//! when it closes; stdin stays in it until the process ends (fd 0 holds it open). Only the stdio
//! front's current-thread runtime is hooked: the HTTP front's pool has many agents and no single
//! line to wait for.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

/// The default longest spin, in microseconds: about a quick server's round trip here
/// (fs-server `stat` direct: 110-240 µs, most of it outside the server), so that the wait for
/// its answer is covered.
pub const DEFAULT_MICROS: u64 = 200;

/// The largest `busyPollMicros` accepted: a wake-up costs tens of microseconds, so a spin
/// past a millisecond saves nothing a sleep would cost, burns CPU, and makes the events the
/// spin does not watch (timers, signals) that much later.
pub const MAX_MICROS: u64 = 1_000;

/// The smallest budget a short wait grows an exhausted one back to.
const REGROW: Duration = Duration::from_micros(10);

/// Below this a halved budget is dropped to nothing (one look, no spin).
const FLOOR: Duration = Duration::from_micros(5);

/// Watches the gateway's input pipes while its thread would otherwise sleep.
pub struct BusyPoll {
    watched: Epoll,
    max: Duration,
    /// Requests the front relays that have not been answered yet.
    in_flight: AtomicUsize,
    window: Mutex<Window>,
}

/// The adaptive part, touched only by the runtime's one thread (the mutex is never
/// contended; it keeps `BusyPoll` `Sync` for the hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// The budget of each wait, by requests in flight: 0 (for the agent), 1 (for a server).
    budgets: [Duration; 2],
    /// Which budget the last spin used and when it began, if it expired without a line: the
    /// wake-up that ends the sleep after it says how long the wait really was.
    expired_spin: Option<(usize, Instant)>,
}

/// How a spin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spun {
    /// Not spun: more than one request in flight, or no budget.
    Skipped,
    /// A watched pipe has something to read, or a task was woken from another thread.
    Ready,
    /// The budget ran out first; the thread goes to sleep.
    Expired,
}

impl std::fmt::Debug for BusyPoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusyPoll").field("max", &self.max).finish()
    }
}

impl BusyPoll {
    /// A watcher spinning at most `max` before each sleep.
    pub fn new(max: Duration) -> std::io::Result<Arc<BusyPoll>> {
        let watched = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(std::io::Error::from)?;
        Ok(Arc::new(BusyPoll {
            watched,
            max,
            in_flight: AtomicUsize::new(0),
            window: Mutex::new(Window {
                budgets: [max; 2],
                expired_spin: None,
            }),
        }))
    }

    /// Adds a pipe or socket the gateway reads to the watch set. Best effort: a descriptor
    /// epoll refuses (a regular file) is read as before, only without the spin.
    pub fn watch(&self, fd: BorrowedFd<'_>) {
        if let Err(e) = self
            .watched
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
        {
            tracing::debug!(
                "busy polling: cannot watch a pipe ({e}); it wakes the gateway instead"
            );
        }
    }

    /// Counts a relayed request as in flight until the guard drops.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Makes `builder`'s runtime spin before each sleep. For a current-thread runtime: with a
    /// pool, each idle worker would spin on the same set.
    pub fn install(self: &Arc<Self>, builder: &mut tokio::runtime::Builder) {
        let before = self.clone();
        let after = self.clone();
        builder
            .on_thread_park(move || {
                before.before_sleep();
            })
            .on_thread_unpark(move || after.after_wake());
    }

    /// The park hook: spins while the budget lasts and nothing is ready.
    pub fn before_sleep(&self) -> Spun {
        let waiting_for = self.in_flight.load(Ordering::Relaxed);
        if waiting_for > 1 || self.max.is_zero() {
            return Spun::Skipped;
        }
        let budget = self.window().budgets[waiting_for];
        let runtime = tokio::runtime::Handle::try_current().ok();
        let woken_remotely = || {
            runtime
                .as_ref()
                .is_some_and(|r| r.metrics().global_queue_depth() > 0)
        };
        let start = Instant::now();
        let mut events = [EpollEvent::empty(); 1];
        loop {
            // A look costs one system call; even a zero budget takes one.
            if !matches!(self.watched.wait(&mut events, EpollTimeout::ZERO), Ok(0))
                || woken_remotely()
            {
                return Spun::Ready;
            }
            if start.elapsed() >= budget {
                break;
            }
            // Not a pure spin: a thread that shares this CPU (a server just started on the
            // gateway's CPU, before the scheduler spreads the load) would otherwise wait for
            // the spin to end before it could write the very line the spin waits for.
            let _ = nix::sched::sched_yield();
        }
        self.window().expired_spin = Some((waiting_for, start));
        Spun::Expired
    }

    /// The unpark hook: after a spin that expired, adapts its budget to how long the wait was.
    pub fn after_wake(&self) {
        let mut window = self.window();
        if let Some((which, start)) = window.expired_spin.take() {
            window.budgets[which] = next_budget(window.budgets[which], start.elapsed(), self.max);
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One relayed request in flight (see [`BusyPoll::request`]).
pub struct InFlight(Arc<BusyPoll>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The budget after a spin of `budget` expired and the thread's whole wait (spin and sleep)
/// lasted `waited`: a wait the longest spin would have covered grows the budget (doubling,
/// up to `max`); a longer one halves it, down to nothing.
pub fn next_budget(budget: Duration, waited: Duration, max: Duration) -> Duration {
    if waited <= max {
        (budget * 2).max(REGROW).min(max)
    } else {
        let half = budget / 2;
        if half < FLOOR {
            Duration::ZERO
        } else {
            half
        }
    }
}

/// The spin asked for, and whether the user chose it (the flag or the setting) rather than
/// taking the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spin {
    pub budget: Duration,
    pub chosen: bool,
}

/// The spin `--busy-poll-micros` or else `busyPollMicros` asks for, or why it is refused
/// (naming the one that was given).
pub fn from_setting(flag: Option<u64>, setting: Option<u64>) -> Result<Spin, String> {
    let (micros, named) = match (flag, setting) {
        (Some(m), _) => (m, Some("--busy-poll-micros")),
        (None, Some(m)) => (m, Some("busyPollMicros (palisade block)")),
        (None, None) => (DEFAULT_MICROS, None),
    };
    if micros > MAX_MICROS {
        return Err(format!(
            "{} is {micros}: at most {MAX_MICROS} microseconds (a longer spin only burns \
             CPU); 0 turns busy polling off",
            named.unwrap_or("the default")
        ));
    }
    Ok(Spin {
        budget: Duration::from_micros(micros),
        chosen: named.is_some(),
    })
}

/// Watches `fd` when there is a watcher.
pub fn watch_with(busy: Option<&BusyPoll>, fd: &impl AsFd) {
    if let Some(busy) = busy {
        busy.watch(fd.as_fd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_short_wait_grows_the_budget_and_a_long_one_halves_it_to_nothing() {
        let max = 200 * US;
        assert_eq!(next_budget(50 * US, 120 * US, max), 100 * US);
        assert_eq!(next_budget(150 * US, 190 * US, max), max, "capped at max");
        assert_eq!(next_budget(Duration::ZERO, 30 * US, max), REGROW);
        assert_eq!(next_budget(max, 2 * max, max), 100 * US);
        assert_eq!(
            next_budget(8 * US, Duration::from_secs(3), max),
            Duration::ZERO
        );
        // An agent thinking for seconds between calls: a few long waits and no spin is left.
        let mut b = max;
        for _ in 0..6 {
            b = next_budget(b, Duration::from_secs(2), max);
        }
        assert_eq!(b, Duration::ZERO);
    }

    #[test]
    fn the_setting_defaults_the_flag_wins_and_a_spin_past_the_cap_is_refused() {
        let default = Duration::from_micros(DEFAULT_MICROS);
        let spin = |budget, chosen| Ok(Spin { budget, chosen });
        assert_eq!(from_setting(None, None), spin(default, false));
        assert_eq!(from_setting(Some(0), Some(100)), spin(Duration::ZERO, true));
        assert_eq!(from_setting(None, Some(0)), spin(Duration::ZERO, true));
        assert_eq!(from_setting(None, Some(150)), spin(150 * US, true));
        let refused = from_setting(None, Some(MAX_MICROS + 1)).unwrap_err();
        assert!(refused.starts_with("busyPollMicros"), "{refused}");
        let refused = from_setting(Some(MAX_MICROS + 1), Some(0)).unwrap_err();
        assert!(refused.starts_with("--busy-poll-micros"), "{refused}");
    }

    #[test]
    fn long_waits_for_the_agent_leave_the_budget_for_a_quick_server_alone() {
        // Each call: a wait for the server (one request in flight) that a 1 ms spin misses by
        // a little, then a wait for the agent that lasts far longer than any spin. The
        // server's wait is dated in the future, so that it reads as no wait at all however
        // long this thread is preempted (`elapsed` saturates at zero).
        let busy = BusyPoll::new(Duration::from_millis(1)).unwrap();
        for _ in 0..10 {
            let call = busy.request();
            busy.window().expired_spin = Some((1, Instant::now() + Duration::from_secs(60)));
            busy.after_wake();
            drop(call);
            busy.window().expired_spin = Some((0, Instant::now() - Duration::from_secs(2)));
            busy.after_wake();
        }
        let budgets = busy.window().budgets;
        assert_eq!(
            budgets[1],
            Duration::from_millis(1),
            "the server's wait keeps its budget"
        );
        assert_eq!(budgets[0], Duration::ZERO, "the agent's wait spins no more");
    }

    #[test]
    fn a_runtime_with_the_hooks_still_runs_its_timers_blocking_work_and_pipes() {
        let busy = BusyPoll::new(Duration::from_micros(MAX_MICROS)).unwrap();
        let mut builder = tokio::runtime::Builder::new_current_thread();
        busy.install(&mut builder);
        let rt = builder.enable_all().build().unwrap();
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        busy.watch(r.as_fd());
        let got = rt.block_on(async move {
            use tokio::io::AsyncReadExt;
            tokio::time::sleep(Duration::from_millis(3)).await;
            let blocking = tokio::task::spawn_blocking(|| 7).await.unwrap();
            r.set_nonblocking(true).unwrap();
            let mut r = tokio::net::UnixStream::from_std(r).unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                (&w).write_all(b"x").unwrap();
            });
            let mut byte = [0u8; 1];
            r.read_exact(&mut byte).await.unwrap();
            (blocking, byte[0])
        });
        assert_eq!(got, (7, b'x'));
    }

    #[test]
    fn a_line_waiting_in_a_watched_pipe_ends_the_spin_and_silence_lets_it_expire() {
        let busy = BusyPoll::new(Duration::from_millis(1)).unwrap();
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        busy.watch(r.as_fd());
        assert_eq!(busy.before_sleep(), Spun::Expired);
        busy.after_wake();
        (&w).write_all(b"{}\n").unwrap();
        assert_eq!(busy.before_sleep(), Spun::Ready);
    }

    #[test]
    fn two_requests_in_flight_skip_the_spin_and_one_does_not() {
        let busy = BusyPoll::new(Duration::from_micros(50)).unwrap();
        let one = busy.request();
        assert_eq!(busy.before_sleep(), Spun::Expired);
        let two = busy.request();
        assert_eq!(busy.before_sleep(), Spun::Skipped);
        drop(two);
        drop(one);
        assert_eq!(busy.before_sleep(), Spun::Expired);
        let off = BusyPoll::new(Duration::ZERO).unwrap();
        assert_eq!(off.before_sleep(), Spun::Skipped);
    }

    #[test]
    fn an_expired_spin_followed_by_a_long_sleep_shrinks_the_budget() {
        let max = Duration::from_micros(40);
        let busy = BusyPoll::new(max).unwrap();
        assert_eq!(busy.before_sleep(), Spun::Expired);
        std::thread::sleep(Duration::from_millis(2));
        busy.after_wake();
        assert_eq!(busy.window().budgets, [Duration::from_micros(20), max]);
        // A wake-up with no spin before it leaves the budgets alone.
        busy.after_wake();
        assert_eq!(busy.window().budgets, [Duration::from_micros(20), max]);
    }
}
