//! The calls admitted and not started yet, and the time each adds to the
//! wait of the calls behind it: their product is how long a call admitted
//! now waits for its thread (Little's law), known the moment the call is
//! read rather than once calls come out late.
//!
//! A call joins the queue when admission reads its header block, and
//! leaves it when its handler starts (tonic's service stack runs only on
//! the task's first poll, so nothing between the two can stamp it). Each
//! connection is a [`Lane`]: what it admitted and what of that left, so
//! that calls h2 refuses after admission (a client over its stream limit,
//! a block h2 finds malformed) leave the queue when their connection ends,
//! or, when the queue is full, once they have waited a second.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Calls in the queue from which it is a queue: below, a call's wait is
/// the time its thread took to come round, not what the calls ahead took.
const QUEUE_MIN: usize = 8;
/// How long a time per call measured stays true with nothing newer: a
/// queue that has not formed since says nothing about one forming now.
const FRESH_MS: u64 = 200;
/// Calls a worker thread's run queue holds in the order they came, kept
/// waiting at most while the threads are busy all the time: tokio keeps
/// 256 tasks per worker and moves the oldest half of a full queue to a
/// shared queue that a busy worker looks at once in about 200 µs, so
/// under a queue that stands the oldest calls wait longest and come out
/// late. The calls waiting include those not yet a task, so at 240 the
/// run queue stays below 256 (measured against 128 and 192:
/// bench/history/2026-11-28-overload-admission.md). A queue a stall left
/// behind drains, and a worker with time to spare reaches its shared
/// queue soon: then only the calls' wait, or [`BACKSTOP`], sheds.
pub(crate) const CALLS_PER_WORKER: usize = 240;
/// How many times its cap the queue holds at most, however it drains: a
/// stall long enough to pile up that many calls made most of them late
/// already (480 calls take a thread about 10 ms, and their bytes waited
/// as long), and the queue's memory stays bounded before any time per
/// call is measured. Four times let a queue standing up at twice
/// capacity reach 960 before its first window ended, and the calls past
/// tokio's run queue came out late (bench/history/2026-11-28-overload-admission.md).
const BACKSTOP: usize = 2;
/// How long a call may wait in the queue before it is given up on: h2
/// refuses some calls after admission has counted them (a client over its
/// stream limit, a header block h2 finds malformed), and those never start.
/// Calls with a deadline never wait this long: they are shed first.
const GIVE_UP: Duration = Duration::from_secs(1);
/// How fast the time per call may grow: doubling every 50 ms (by a
/// fiftieth a millisecond in between), from when it last fell or a queue
/// formed after none. Real costs grow with the work, not within a
/// millisecond; the calls a stall of the host caught each measure the
/// stall again (a call read before it, with 10 ahead, waited 40 ms: 4 ms
/// a call, where a call takes 20 µs).
const GROWTH_MS: u64 = 50;
/// How often a full queue looks for calls to give up on, at most.
const SWEEP_MS: u64 = 100;
/// Reads remembered per connection for the handlers' waits (the oldest are
/// forgotten: their calls' waits are then measured from a later read).
const MAX_READS: usize = 1_024;

/// The queue of calls (see the module).
#[derive(Debug)]
pub(crate) struct Queue {
    epoch: Instant,
    /// Calls admitted and not left: every lane's `admitted - left`, each
    /// changed under its lane's lock, so never below zero.
    waiting: CachePadded<AtomicUsize>,
    /// The time a call ahead adds to a wait (ns, low 32 bits), smoothed,
    /// and when it was last measured (ms since `epoch`, high 32 bits).
    per_call: CachePadded<AtomicU64>,
    /// The time per call that growth is measured from (ns, low 32 bits)
    /// and since when (ms since `epoch`, high 32 bits): see [`GROWTH_MS`].
    grown_from: AtomicU64,
    /// The most calls waiting ([`CALLS_PER_WORKER`] per worker thread).
    cap: usize,
    /// Every connection's lane, for [`Queue::sweep`], and how many lived
    /// at the last count.
    lanes: Mutex<(Vec<Weak<LaneState>>, usize)>,
    /// When (ms since `epoch`) the lanes were last swept.
    swept_at: AtomicU64,
}

impl Queue {
    /// An empty queue for calls run on `workers` threads.
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            epoch: Instant::now(),
            waiting: CachePadded::new(AtomicUsize::new(0)),
            per_call: CachePadded::new(AtomicU64::new(0)),
            grown_from: AtomicU64::new(0),
            cap: CALLS_PER_WORKER.saturating_mul(workers.max(1)),
            lanes: Mutex::new((Vec::new(), 0)),
            swept_at: AtomicU64::new(0),
        }
    }

    fn register(&self, lane: &Arc<LaneState>) {
        let mut lanes = self.lanes.lock();
        let (all, live) = &mut *lanes;
        // Ended connections' lanes are dropped as the list doubles: a
        // lane's cost stays constant however connections come and go.
        if all.len() >= (*live * 2).max(64) {
            all.retain(|lane| lane.strong_count() > 0);
            *live = all.len();
        }
        all.push(Arc::downgrade(lane));
    }

    /// Once in [`SWEEP_MS`] at most (`now`), gives up on calls read more
    /// than [`GIVE_UP`] ago that have not started (see `LaneState::expire`):
    /// a full queue may hold calls that never will.
    pub(crate) fn sweep(&self, now: Instant) {
        let ms = self.millis(now);
        let last = self.swept_at.load(Ordering::Relaxed);
        if ms.wrapping_sub(last) & u64::from(u32::MAX) < SWEEP_MS
            || self
                .swept_at
                .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let Some(before) = now.checked_sub(GIVE_UP) else {
            return;
        };
        let lanes: Vec<_> = {
            let lanes = self.lanes.lock();
            lanes.0.iter().filter_map(Weak::upgrade).collect()
        };
        for lane in lanes {
            lane.expire(before);
        }
    }

    /// Calls admitted and not started.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// What a call waits behind the queue and `more` calls admitted
    /// before it, as last measured: zero below [`QUEUE_MIN`]. The time per
    /// call may be stale: see [`Queue::fresh`].
    pub(crate) fn wait(&self, more: usize) -> Duration {
        let calls = self.waiting().saturating_add(more);
        if calls < QUEUE_MIN {
            return Duration::ZERO;
        }
        Duration::from_nanos(
            self.per_call_ns()
                .saturating_mul(u64::try_from(calls).unwrap_or(u64::MAX)),
        )
    }

    /// The time per call last measured, in ns (0: never).
    fn per_call_ns(&self) -> u64 {
        self.per_call.load(Ordering::Relaxed) & u64::from(u32::MAX)
    }

    /// Whether `more` calls admitted before a call take the queue to its
    /// cap.
    pub(crate) fn full(&self, more: usize) -> bool {
        self.waiting().saturating_add(more) >= self.cap
    }

    /// Whether `more` calls admitted before a call take the queue to
    /// [`BACKSTOP`] times its cap.
    pub(crate) fn overfull(&self, more: usize) -> bool {
        self.waiting().saturating_add(more) >= self.cap.saturating_mul(BACKSTOP)
    }

    /// Whether the time per call was measured lately (`now`).
    pub(crate) fn fresh(&self, now: Instant) -> bool {
        let at = self.per_call.load(Ordering::Relaxed) >> 32;
        self.millis(now).wrapping_sub(at) & u64::from(u32::MAX) <= FRESH_MS
    }

    fn millis(&self, now: Instant) -> u64 {
        // Kept in 32 bits (49 days, wrapping): only differences are read.
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms & u128::from(u32::MAX)).unwrap_or(0)
    }

    /// A call that had `ahead` calls before it when it was read waited
    /// `waited` for its handler (`now`): each call ahead took the quotient,
    /// all it cost the process (the answers written, the calls read and
    /// shed meanwhile) included.
    fn observe(&self, ahead: u64, waited: Duration, now: Instant) {
        if ahead < QUEUE_MIN as u64 {
            return;
        }
        let sample = u64::try_from(waited.as_nanos() / u128::from(ahead))
            .unwrap_or(u64::MAX)
            .min(u64::from(u32::MAX));
        let mask = u64::from(u32::MAX);
        // Read once (the clock's arithmetic is most of this path's cost).
        let ms = self.millis(now);
        let per_call = self.per_call.load(Ordering::Relaxed);
        let old_ns = per_call & mask;
        let fresh = old_ns > 0 && ms.wrapping_sub(per_call >> 32) & mask <= FRESH_MS;
        // An eighth of each new measure; after a while with no queue, the
        // first taken whole. Either way it grows no faster than
        // GROWTH_MS allows, measured from the time known when the queue
        // formed: a call that waited out a stall of its thread (another
        // process ran, the host took the core) says nothing of what each
        // call ahead took, and such measures taken as they are shed calls
        // that would have been in time. Threads racing here lose a
        // sample, never the value.
        let ns = if fresh {
            (old_ns * 7 + sample) / 8
        } else {
            sample
        };
        let from = self.grown_from.load(Ordering::Relaxed);
        let (from_ms, from_ns) = if fresh {
            (from >> 32, from & mask)
        } else {
            (ms, old_ns)
        };
        let ns = if from_ns > 0 {
            let elapsed = ms.wrapping_sub(from_ms) & mask;
            let doubled = from_ns << (elapsed / GROWTH_MS).min(32);
            ns.min(doubled.saturating_add(doubled * (elapsed % GROWTH_MS) / GROWTH_MS))
        } else {
            ns
        };
        if !fresh || ns <= from_ns {
            self.grown_from.store(ms << 32 | ns, Ordering::Relaxed);
        }
        self.per_call.store(ms << 32 | ns, Ordering::Relaxed);
    }
}

/// A connection's calls in the [`Queue`].
#[derive(Debug, Clone)]
pub(crate) struct Lane(Arc<LaneState>);

/// What tonic hands each request of a connection (its `ConnectInfo`): the
/// connection's [`Lane`] and, once the call has left the queue, how long
/// it waited. The wait lives here rather than in an extension of its own:
/// inserting one costs an allocation on every call.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    lane: Lane,
    waited: Option<Duration>,
}

impl Arrival {
    /// A request of the connection whose calls are `lane`'s.
    pub(crate) fn new(lane: Lane) -> Self {
        Self { lane, waited: None }
    }

    /// The call's handler starts: it leaves the queue (once) and its wait
    /// is stamped.
    pub(crate) fn start(&mut self) {
        if self.waited.is_none() {
            self.waited = Some(self.lane.start());
        }
    }

    /// How long the call waited from its header block being read to its
    /// start; `None` before [`Arrival::start`].
    pub(crate) fn waited(&self) -> Option<Duration> {
        self.waited
    }
}

#[derive(Debug)]
struct LaneState {
    queue: Arc<Queue>,
    calls: Mutex<LaneCalls>,
}

/// A connection's calls: numbered as admitted; `left` of them have left
/// the queue (started, or given up on), so it holds `admitted - left`.
#[derive(Debug, Default)]
struct LaneCalls {
    admitted: u64,
    left: u64,
    /// The reads that admitted calls not left yet, oldest first.
    reads: VecDeque<Read>,
}

/// A read that admitted calls: `first..=last` of its connection's.
#[derive(Debug, Clone, Copy)]
struct Read {
    first: u64,
    last: u64,
    at: Instant,
    /// Calls waiting (every connection's) before the first.
    ahead: u64,
}

impl LaneCalls {
    /// Takes `n` calls out of the queue (never more than it holds).
    fn leave(&mut self, queue: &Queue, n: u64) -> u64 {
        let n = n.min(self.admitted - self.left);
        self.left += n;
        queue
            .waiting
            .fetch_sub(usize::try_from(n).unwrap_or(usize::MAX), Ordering::Relaxed);
        n
    }
}

impl Lane {
    /// A new connection's lane in `queue`.
    pub(crate) fn new(queue: Arc<Queue>) -> Self {
        let lane = Self(Arc::new(LaneState {
            queue,
            calls: Mutex::new(LaneCalls::default()),
        }));
        lane.0.queue.register(&lane.0);
        lane
    }

    fn calls(&self) -> parking_lot::MutexGuard<'_, LaneCalls> {
        self.0.calls.lock()
    }

    /// `calls` admitted by a read just made.
    pub(crate) fn admit(&self, calls: usize) {
        if calls > 0 {
            self.admit_at(calls as u64, Instant::now());
        }
    }

    pub(super) fn admit_at(&self, n: u64, now: Instant) {
        let mut calls = self.calls();
        let first = calls.admitted + 1;
        calls.admitted += n;
        let ahead = self
            .0
            .queue
            .waiting
            .fetch_add(usize::try_from(n).unwrap_or(usize::MAX), Ordering::Relaxed);
        if calls.reads.len() == MAX_READS {
            calls.reads.pop_front();
        }
        let last = calls.admitted;
        calls.reads.push_back(Read {
            first,
            last,
            at: now,
            ahead: u64::try_from(ahead).unwrap_or(0),
        });
    }

    /// A call's handler starts: it leaves the queue. Returns how long it
    /// waited since its header block was read (its connection's calls
    /// start in the order they were read).
    pub(crate) fn start(&self) -> Duration {
        self.start_at(Instant::now())
    }

    pub(super) fn start_at(&self, now: Instant) -> Duration {
        let queue = &self.0.queue;
        let mut calls = self.calls();
        // A call given up on (see `expire`) left already.
        if calls.leave(queue, 1) == 0 {
            return Duration::ZERO;
        }
        let call = calls.left;
        while calls.reads.front().is_some_and(|r| r.last < call) {
            calls.reads.pop_front();
        }
        let Some(read) = calls.reads.front().copied() else {
            return Duration::ZERO;
        };
        drop(calls);
        let waited = now.saturating_duration_since(read.at);
        let ahead = read.ahead + call.saturating_sub(read.first);
        queue.observe(ahead, waited, now);
        waited
    }
}

impl LaneState {
    /// Gives up on calls read before `before` and not started: h2 refused
    /// them (a client over its stream limit, a header block h2 finds
    /// malformed) and they never will, or, far past capacity, they have
    /// waited so long that counting them no longer matters.
    fn expire(&self, before: Instant) {
        let mut calls = self.calls.lock();
        while let Some(read) = calls.reads.front().copied().filter(|r| r.at < before) {
            let n = read.last.saturating_sub(calls.left);
            calls.leave(&self.queue, n);
            calls.reads.pop_front();
        }
    }
}

impl Drop for LaneState {
    fn drop(&mut self) {
        // The connection is gone and no request of it is left to start:
        // its calls still in the queue leave it.
        let calls = self.calls.get_mut();
        let n = calls.admitted - calls.left;
        calls.leave(&self.queue, n);
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
