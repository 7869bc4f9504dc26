//! Pure, clock-injected counting math. No I/O, no descriptors: each algorithm
//! takes its state, `now` and the hits, and says what the counter becomes and
//! what the caller is told. Stores (memory here, Lua in Redis) run exactly
//! these rules, so both answer identically.

pub mod fixed_window;

pub use fixed_window::FixedWindow;

use std::time::Duration;

/// What one counter operation asks for: the algorithm and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spec {
    /// Epoch-aligned fixed window of `window` allowing `limit` hits.
    FixedWindow {
        /// The window.
        window: FixedWindow,
        /// Hits allowed per window.
        limit: u64,
    },
}

/// The answer for one counter operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the descriptor is over its limit after this operation.
    pub over_limit: bool,
    /// Hits still allowed before the limit is reached (0 when over).
    pub remaining: u64,
    /// Time until the limit admits again (the end of the current window).
    pub reset: Duration,
    /// Whether the hits were added to the counter.
    pub counted: bool,
    /// Count before this operation.
    pub before: u64,
    /// Count after this operation (as if counted, when it was refused).
    pub after: u64,
}
