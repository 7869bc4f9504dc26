//! Pure, clock-injected counting math. No I/O, no descriptors: each algorithm
//! takes its state, `now` and the hits, and says what the counter becomes and
//! what the caller is told. Stores (memory here, Lua in Redis) run exactly
//! these rules; the Redis scripts return the raw state they read and the Rust
//! side computes the answer with these same functions, so both stores answer
//! identically.

pub mod calendar;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod quota_split;
pub mod sliding_log;
pub mod sliding_window;

pub use concurrency::Concurrency;
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;

use std::time::Duration;

/// Most limits one descriptor may carry in one operation (`rate_limits`).
pub const MAX_LIMITS: usize = 8;

/// Up to [`MAX_LIMITS`] `(limit, window)` pairs, inline so operations stay
/// `Copy` and allocation-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    len: u8,
    items: [(u64, u64); MAX_LIMITS],
}

impl Limits {
    /// The pairs `(limit, window)`; extra pairs past [`MAX_LIMITS`] are
    /// dropped (validation rejects them first).
    pub fn new(pairs: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut items = [(0, 0); MAX_LIMITS];
        let mut len = 0u8;
        for (slot, pair) in items.iter_mut().zip(pairs) {
            *slot = pair;
            len += 1;
        }
        Self { len, items }
    }

    /// The pairs, in rule order.
    pub fn as_slice(&self) -> &[(u64, u64)] {
        // `len` never exceeds the capacity (`new` stops there).
        self.items.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// Longest window (0 when empty).
    pub fn longest_window(&self) -> u64 {
        self.as_slice().iter().map(|&(_, w)| w).max().unwrap_or(0)
    }
}

/// What one counter operation asks for: the algorithm and its limit(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spec {
    /// Epoch-aligned fixed window of `window` allowing `limit` hits.
    FixedWindow {
        /// The window.
        window: FixedWindow,
        /// Hits allowed per window.
        limit: u64,
    },
    /// Sliding windows summed from per-bucket counters.
    SlidingWindow(SlidingWindow),
    /// Exact sliding log.
    SlidingLog(SlidingLog),
    /// Generic cell rate algorithm.
    Gcra(Gcra),
    /// Requests in flight.
    Concurrency(Concurrency),
}

/// The answer for one counter operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the descriptor is over its limit after this operation.
    pub over_limit: bool,
    /// Hits still allowed before the limit is reached (0 when over).
    pub remaining: u64,
    /// Time until the limit admits again (over) or resets (within).
    pub reset: Duration,
    /// Whether the hits were added to the counter.
    pub counted: bool,
    /// Count before this operation (fixed window; 0 where not meaningful).
    pub before: u64,
    /// Count after this operation (as if counted, when it was refused).
    pub after: u64,
    /// Which of the operation's limits this outcome reports: the first one
    /// violated, else the one with the least remaining.
    pub limit_index: usize,
    /// Hits taken beyond the operation's own for a lease (the store
    /// operation's `lease`): counted in the store, not yet admitted.
    pub leased: u64,
    /// GCRA: the theoretical arrival time this operation left, µs (0 for
    /// the other algorithms and when nothing was counted). On Redis it
    /// names the operation's place in the bucket: a lease's block is given
    /// back, and a leased operation's hits taken back, only while the
    /// stored TAT is still this one.
    pub tat_us: u64,
}

impl Outcome {
    /// Nothing known: not over, nothing left, nothing counted (the answer
    /// for states that cannot occur, rather than a panic).
    pub const NOTHING: Self = Self {
        over_limit: false,
        remaining: 0,
        reset: Duration::ZERO,
        counted: false,
        before: 0,
        after: 0,
        limit_index: 0,
        leased: 0,
        tat_us: 0,
    };
}

/// Milliseconds, rounded up, as a `Duration`: a reset is never reported
/// earlier than the instant the limit really admits again.
pub(crate) fn ceil_ms(micros: u64) -> Duration {
    Duration::from_millis(micros.div_ceil(1_000))
}
