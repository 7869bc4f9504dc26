//! A time calls take (the wait for a thread, or from read to answer), as
//! last measured, for admission to read on every new call.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Microseconds of a wait, in the low bits of the published word.
const WAIT_BITS: u32 = 24;
const WAIT_MASK: u64 = (1 << WAIT_BITS) - 1;
/// A new wait is published only when it differs by this much from the one
/// published, or that one is [`REFRESH_MS`] old: the word is written a few
/// times a second, not by every call on every thread.
const CHANGE_US: u64 = 250;
const REFRESH_MS: u64 = 10;

/// The last time a call took, and when it was measured.
#[derive(Debug)]
pub(crate) struct Backlog {
    epoch: Instant,
    /// When (ms since `epoch`, high bits) and the wait (µs, low bits).
    last: CachePadded<AtomicU64>,
}

impl Backlog {
    /// No wait measured yet; `epoch` is the origin of its times.
    pub(crate) fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            last: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// A call that started at `arrival` took `waited` (to its thread, or
    /// to its answer).
    pub(crate) fn observe(&self, arrival: Instant, waited: Duration) {
        let at_ms = u64::try_from(
            (arrival + waited)
                .saturating_duration_since(self.epoch)
                .as_millis(),
        )
        .unwrap_or(u64::MAX >> WAIT_BITS);
        let wait_us = u64::try_from(waited.as_micros())
            .unwrap_or(WAIT_MASK)
            .min(WAIT_MASK);
        let old = self.last.load(Ordering::Relaxed);
        let (old_ms, old_us) = (old >> WAIT_BITS, old & WAIT_MASK);
        // The longest time measured lately holds: it decays from when it
        // was measured, and a shorter one replaces it only once it has
        // decayed below, or after REFRESH_MS. One call answered fast among
        // thousands kept waiting says little.
        let since_ms = at_ms.saturating_sub(old_ms);
        let held_us = old_us.saturating_sub(since_ms * 1_000);
        let publish = if wait_us >= held_us {
            wait_us - held_us >= CHANGE_US || since_ms >= REFRESH_MS
        } else {
            since_ms >= REFRESH_MS
        };
        if publish {
            self.last
                .store(at_ms << WAIT_BITS | wait_us, Ordering::Relaxed);
        }
    }

    /// The last wait published, as it was measured.
    pub(crate) fn last_wait(&self) -> Duration {
        Duration::from_micros(self.last.load(Ordering::Relaxed) & WAIT_MASK)
    }

    /// The wait a call arriving `now` can expect: the last wait measured,
    /// less the time since. The queue that made that wait drains in as
    /// long if nothing more is admitted, and while calls are admitted
    /// they publish new waits.
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        let last = self.last.load(Ordering::Relaxed);
        let at = self.epoch + Duration::from_millis(last >> WAIT_BITS);
        Duration::from_micros(last & WAIT_MASK).saturating_sub(now.saturating_duration_since(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_expected_is_the_last_measured_less_the_time_since() {
        let t0 = Instant::now();
        let backlog = Backlog::new(t0);
        let ms = Duration::from_millis;
        assert_eq!(backlog.wait(t0 + ms(5)), Duration::ZERO);
        // Arrived at 100 ms, waited 30: measured at 130 ms.
        backlog.observe(t0 + ms(100), ms(30));
        assert_eq!(backlog.last_wait(), ms(30));
        assert_eq!(backlog.wait(t0 + ms(130)), ms(30));
        assert_eq!(backlog.wait(t0 + ms(150)), ms(10));
        assert_eq!(backlog.wait(t0 + ms(200)), Duration::ZERO);
        // A wait within 250 µs of the last, within 10 ms: not published.
        backlog.observe(t0 + ms(100), ms(30) + Duration::from_micros(100));
        assert_eq!(backlog.last_wait(), ms(30));
        // A short wait among long ones does not replace the longest while
        // it holds (10 ms)...
        backlog.observe(t0 + ms(131), Duration::from_micros(20));
        assert_eq!(backlog.last_wait(), ms(30));
        // ...and does once it is 10 ms old.
        backlog.observe(t0 + ms(140), Duration::from_micros(20));
        assert_eq!(backlog.last_wait(), Duration::from_micros(20));
        // Small waits are refreshed every 10 ms, so the time stays current.
        backlog.observe(t0 + ms(150), Duration::from_micros(30));
        assert_eq!(backlog.wait(t0 + ms(150)), Duration::from_micros(30));
    }
}
