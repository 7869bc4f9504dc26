//! The Lua scripts, each loaded once per process and run with EVALSHA (and
//! loaded into Redis again on NOSCRIPT, e.g. after a restart or failover).

use redis::Script;
use std::sync::LazyLock;

/// `scripts/fixed_window.lua`: check-and-count one fixed-window counter.
pub(crate) static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fixed_window.lua")));

/// `scripts/take_back.lua`: undo the hits of a refused request.
pub(crate) static TAKE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back.lua")));

/// Every script, for loading them all after a NOSCRIPT reply.
pub(crate) fn all() -> [&'static Script; 2] {
    [&FIXED_WINDOW, &TAKE_BACK]
}
