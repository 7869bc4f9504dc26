//! Whether the worker threads have been busy nearly all the time lately:
//! what tells a queue that stands (calls come faster than they are
//! served, so it never drains and the oldest calls leave their order)
//! from one a stall left behind (the host took the core for some
//! milliseconds; the calls read after it pile up, then drain while the
//! threads still have time to spare).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the time busy is measured over: longer than the stalls a
/// shared host makes (a 10 ms stall in a window of 25 ms at half load is
/// 70 % busy), short enough that a queue standing up is known before many
/// calls come out of order.
const WINDOW: Duration = Duration::from_millis(25);

/// No queue asked about for this long: the next is judged afresh.
const QUIET: Duration = Duration::from_millis(100);

/// The first window after [`QUIET`]: long enough that a queue a stall left
/// behind drains by a quarter (at half load, one of up to 700 calls in
/// 8 ms), short enough that one standing up at twice capacity is known
/// before it passes what tokio's run queue keeps in order.
const FIRST_WINDOW: Duration = Duration::from_millis(8);

/// The share of a window busy, in hundredths, from which the threads are
/// saturated.
const SATURATED_PERCENT: u128 = 90;

/// Calls waiting below which no queue stands: none waits behind others.
const GONE: usize = 8;

/// The worker threads' time busy.
pub(crate) trait BusyTime: Send + Sync + std::fmt::Debug {
    /// Every worker thread's time busy since the runtime began, summed.
    fn busy(&self) -> Duration;
    /// How many worker threads there are.
    fn workers(&self) -> u32;
}

/// tokio's own count of each worker's busy time (brought up to date every
/// 61 tasks and whenever a worker parks).
#[derive(Debug)]
pub(crate) struct Runtime(pub(crate) tokio::runtime::RuntimeMetrics);

impl BusyTime for Runtime {
    fn busy(&self) -> Duration {
        (0..self.0.num_workers())
            .map(|worker| self.0.worker_total_busy_duration(worker))
            .sum()
    }

    fn workers(&self) -> u32 {
        u32::try_from(self.0.num_workers()).unwrap_or(u32::MAX)
    }
}

/// Whether the worker threads were busy nearly all of the last window.
#[derive(Debug)]
pub(crate) struct Busy {
    source: Box<dyn BusyTime>,
    /// When the window began, the time busy then, the calls waiting, and
    /// how long it lasts.
    mark: Mutex<(Instant, Duration, usize, Duration)>,
    saturated: AtomicBool,
}

impl Busy {
    /// Measured from `source`, the first window beginning `now`.
    pub(crate) fn new(source: Box<dyn BusyTime>, now: Instant) -> Self {
        let busy = source.busy();
        Self {
            source,
            mark: Mutex::new((now, busy, 0, WINDOW)),
            saturated: AtomicBool::new(false),
        }
    }

    /// Whether a queue stands: the threads were busy at least 90 % of the
    /// last window that ended (`now`), and the calls `waiting` did not fall
    /// by a quarter or more over it (a queue that falls that fast drains: a
    /// stall of the host left it). One that stands stands until a window
    /// finds the threads with time to spare and the queue draining or gone:
    /// tokio's count of busy time leaves out its driver's, and at twice
    /// capacity a standing queue, shed down to its cap, read 87 to 89 %
    /// busy in some windows. Asked only of a queue that is full or would
    /// make a call late: after [`QUIET`] with no asking, what the threads
    /// did says nothing of this queue, and a first window of
    /// [`FIRST_WINDOW`] begins. A thread that finds another measuring
    /// takes the last answer.
    pub(crate) fn saturated(&self, now: Instant, waiting: usize) -> bool {
        if let Some(mut mark) = self.mark.try_lock() {
            let elapsed = now.saturating_duration_since(mark.0);
            if elapsed >= QUIET {
                self.saturated.store(false, Ordering::Relaxed);
                *mark = (now, self.source.busy(), waiting, FIRST_WINDOW);
            } else if elapsed >= mark.3 {
                let busy = self.source.busy();
                let spent = busy.saturating_sub(mark.1).as_nanos();
                let room = elapsed.as_nanos() * u128::from(self.source.workers().max(1));
                let stood = self.saturated.load(Ordering::Relaxed);
                let busy_enough = spent * 100 >= room * SATURATED_PERCENT;
                let drains = waiting.saturating_mul(4) <= mark.2.saturating_mul(3);
                let stands = if stood {
                    busy_enough || !(drains || waiting < GONE)
                } else {
                    busy_enough && !drains
                };
                self.saturated.store(stands, Ordering::Relaxed);
                *mark = (now, busy, waiting, WINDOW);
            }
        }
        self.saturated.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// Busy time set by the test.
    #[derive(Debug, Default)]
    struct Set(Arc<AtomicU64>);

    impl BusyTime for Set {
        fn busy(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::Relaxed))
        }
        fn workers(&self) -> u32 {
            2
        }
    }

    #[test]
    fn saturated_once_a_whole_window_was_nearly_all_busy() {
        let ms = Duration::from_millis;
        let spent = Arc::new(AtomicU64::new(1_000));
        let t0 = Instant::now();
        let busy = Busy::new(Box::new(Set(spent.clone())), t0);
        // Two threads, 30 ms: 60 ms of room. Not a whole window yet at
        // 20 ms, so the answer stays the first one.
        spent.store(1_060, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(20), 300));
        assert!(busy.saturated(t0 + ms(30), 300));
        // The next window runs from 30 ms: 54 of 60 ms is 90 %.
        spent.store(1_114, Ordering::Relaxed);
        assert!(
            busy.saturated(t0 + ms(50), 300),
            "within the window: as last"
        );
        assert!(busy.saturated(t0 + ms(60), 300));
        // 53 of 60 ms (tokio leaves its driver's time out), the queue
        // holding its size: it still stands.
        spent.store(1_167, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(90), 300), "53 of 60 ms");
        // Time to spare and the queue gone: no longer.
        spent.store(1_187, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(115), 5));
        // A stall's queue after a quiet second: judged afresh.
        spent.store(1_287, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(1_115), 300));
    }

    #[test]
    fn after_a_quiet_spell_a_queue_is_judged_over_a_short_first_window() {
        let ms = Duration::from_millis;
        let spent = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let busy = Busy::new(Box::new(Set(spent.clone())), t0);
        // The threads were busy all of the last second, but no queue was
        // asked about: that says nothing of this one.
        spent.store(2_000, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(1_000), 240));
        spent.store(2_010, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(1_005), 300), "within 8 ms");
        // 8 ms busy on both threads, the queue growing: it stands, known
        // before a whole 25 ms window would be.
        spent.store(2_016, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(1_008), 330));
        // From then on, whole windows.
        spent.store(2_026, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(1_020), 20), "within 25 ms");
    }

    #[test]
    fn a_queue_that_drains_does_not_stand_until_it_stops_draining() {
        let ms = Duration::from_millis;
        let spent = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let busy = Busy::new(Box::new(Set(spent.clone())), t0);
        // A stall left 900 calls; the threads work through them, busy
        // all the time, and 25 ms on 375 are left: it drains.
        assert!(!busy.saturated(t0 + ms(1_000), 900), "a quiet second");
        spent.store(50, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(1_025), 375));
        // A queue growing, or holding its size, with the threads busy
        // stands.
        spent.store(100, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(1_050), 960));
        // Shed down to its cap, it still stands while the threads are
        // busy, and while they read a little under 90 % and it does not
        // fall; no longer once they have time to spare and it drains.
        spent.store(150, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(1_075), 240));
        spent.store(194, Ordering::Relaxed);
        assert!(busy.saturated(t0 + ms(1_100), 240), "88 % busy");
        spent.store(214, Ordering::Relaxed);
        assert!(!busy.saturated(t0 + ms(1_125), 100));
    }
}
