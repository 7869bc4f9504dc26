//! The Lua scripts, each loaded once per process and run with EVALSHA (and
//! loaded into Redis again on NOSCRIPT, e.g. after a restart or failover).

use redis::Script;
use std::sync::LazyLock;

/// `scripts/fixed_window.lua`: check-and-count one fixed-window counter.
pub(crate) static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fixed_window.lua")));

/// `scripts/sliding_window.lua`: sum bucket counters, count when admitted.
pub(crate) static SLIDING_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sliding_window.lua")));

/// `scripts/sliding_log.lua`: trim, count and log admitted hits.
pub(crate) static SLIDING_LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sliding_log.lua")));

/// `scripts/gcra.lua`: compare and advance the theoretical arrival time.
pub(crate) static GCRA: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/gcra.lua")));

/// `scripts/take_back.lua`: undo counted hits (counters and TATs).
pub(crate) static TAKE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back.lua")));

/// `scripts/take_back_log.lua`: undo logged hits.
pub(crate) static TAKE_BACK_LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back_log.lua")));

/// Every script, for loading them all after a NOSCRIPT reply.
pub(crate) fn all() -> [&'static Script; 6] {
    [
        &FIXED_WINDOW,
        &SLIDING_WINDOW,
        &SLIDING_LOG,
        &GCRA,
        &TAKE_BACK,
        &TAKE_BACK_LOG,
    ]
}
