//! Time for every decision: the one place that reads the system clock, and a
//! manual clock that tests move by hand so window edges are exact.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// Whole seconds since the epoch (rounded down).
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000
    }

    /// A time `secs` seconds after the epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000))
    }

    /// This time moved forward by `by`, saturating.
    pub fn saturating_add(self, by: Duration) -> Self {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(by_ms))
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A source of the current time.
///
/// Every decision reads the clock once and passes `now` down, so algorithms
/// and Lua scripts stay deterministic.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> UnixMillis;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one sanctioned read of the system clock
    fn now(&self) -> UnixMillis {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        UnixMillis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to; cloning shares the same time.
///
/// Reading it writes nothing (an atomic load, no lock), so threads of a
/// test or benchmark reading it on every decision do not contend on it.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    /// Milliseconds since the epoch.
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock stopped at `now`.
    pub fn new(now: UnixMillis) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(now.0)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(UnixMillis(now).saturating_add(by).0)
            });
    }

    /// Sets the clock to `to` (may move backwards, to model skew).
    pub fn set(&self, to: UnixMillis) {
        self.now.store(to.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        UnixMillis(self.now.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(UnixMillis::from_secs(100));
        let shared = clock.clone();
        assert_eq!(clock.now(), UnixMillis(100_000));
        shared.advance(Duration::from_millis(1_500));
        assert_eq!(clock.now(), UnixMillis(101_500));
        assert_eq!(clock.now().as_secs(), 101);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now().as_secs() > 1_577_836_800);
    }
}
