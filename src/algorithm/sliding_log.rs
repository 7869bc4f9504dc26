//! Sliding log: the exact timestamps of admitted hits, several windows at
//! once.
//!
//! Definition: a request of `hits` at `now` is admitted when, for every
//! window `W`, the hits logged in `(now - W, now]` plus `hits` stay within
//! the limit; admitted hits are logged at `now`, denied hits are not. Exact:
//! admitted hits in any interval of length `W` never exceed the limit. The log
//! holds at most the largest limit, which validation caps at 10 000.
//!
//! Timestamps are microseconds since the epoch.

use super::{Limits, Outcome, ceil_ms};
use crate::clock::UnixMillis;
use std::collections::VecDeque;
use std::time::Duration;

/// Several exact sliding windows over one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    /// `(limit, window_ms)` pairs.
    limits: Limits,
}

/// What a store reads from the log for one window: hits in the window, and
/// the timestamp whose leaving matters (see [`SlidingLog::probe_offset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowProbe {
    /// Hits logged inside the window.
    pub count: u64,
    /// Timestamp (µs) of the probed entry, if the window holds it.
    pub at_us: Option<u64>,
}

impl SlidingLog {
    /// Windows `(limit, window_ms)`.
    pub const fn new(limits: Limits) -> Self {
        Self { limits }
    }

    /// The `(limit, window_ms)` pairs.
    pub fn limits(&self) -> &[(u64, u64)] {
        self.limits.as_slice()
    }

    /// Longest window in milliseconds (how long the log must be kept).
    pub fn longest_ms(&self) -> u64 {
        self.limits.longest_window()
    }

    /// Which entry of a window (0 = oldest inside it) to probe: the one whose
    /// leaving admits `hits` when over, else the oldest.
    pub fn probe_offset(count: u64, hits: u64, limit: u64) -> u64 {
        count
            .saturating_add(hits.max(1))
            .saturating_sub(limit)
            .saturating_sub(1)
    }

    /// Whether `hits` are admitted given the window probes.
    pub fn admits(&self, probes: &[WindowProbe], hits: u64) -> bool {
        self.limits().iter().zip(probes).all(|(&(limit, _), p)| {
            p.count.saturating_add(hits) <= limit || (hits == 0 && p.count <= limit)
        })
    }

    /// The answer from the probes read before this operation.
    pub fn outcome(
        &self,
        probes: &[WindowProbe],
        hits: u64,
        counted: bool,
        now: UnixMillis,
    ) -> Outcome {
        let now_us = now.0.saturating_mul(1_000);
        let mut best: Option<Outcome> = None;
        for (i, (&(limit, window_ms), p)) in self.limits().iter().zip(probes).enumerate() {
            let window_us = window_ms.saturating_mul(1_000);
            let leaves = |at: Option<u64>| match at {
                Some(at) => ceil_ms(at.saturating_add(window_us).saturating_sub(now_us)),
                None => Duration::from_millis(window_ms),
            };
            let after = p.count.saturating_add(if counted { hits } else { 0 });
            let over = if hits == 0 {
                p.count > limit
            } else {
                p.count.saturating_add(hits) > limit
            };
            if over {
                return Outcome {
                    over_limit: true,
                    remaining: 0,
                    reset: leaves(p.at_us),
                    counted,
                    before: p.count,
                    after,
                    limit_index: i,
                    leased: 0,
                    tat_us: 0,
                };
            }
            let remaining = limit.saturating_sub(after);
            // Within: resets when the oldest entry leaves (this request's own
            // entry when the window was empty).
            let oldest = p.at_us.or(counted.then_some(now_us));
            let outcome = Outcome {
                over_limit: false,
                remaining,
                reset: leaves(oldest),
                counted,
                before: p.count,
                after,
                limit_index: i,
                leased: 0,
                tat_us: 0,
            };
            if best.is_none_or(|b| remaining < b.remaining) {
                best = Some(outcome);
            }
        }
        best.unwrap_or(Outcome {
            over_limit: false,
            remaining: 0,
            reset: Duration::ZERO,
            counted,
            before: 0,
            after: 0,
            limit_index: 0,
            leased: 0,
            tat_us: 0,
        })
    }
}

/// The log as the embedded store keeps it: admitted hit timestamps (µs),
/// ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    entries: VecDeque<u64>,
}

impl Log {
    /// The admitted hits' timestamps (µs, ascending), for a snapshot of the
    /// embedded store.
    pub fn timestamps(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.entries.iter().copied()
    }

    /// A log read back from a snapshot ([`Log::timestamps`]); sorted here,
    /// so a damaged file can never break the ascending order.
    pub fn from_timestamps(mut timestamps: Vec<u64>) -> Self {
        timestamps.sort_unstable();
        Self {
            entries: timestamps.into(),
        }
    }

    /// Drops entries older than the longest window and probes each window.
    pub fn probe(&mut self, sl: &SlidingLog, now: UnixMillis, hits: u64) -> Vec<WindowProbe> {
        let now_us = now.0.saturating_mul(1_000);
        let oldest_kept = now_us.saturating_sub(sl.longest_ms().saturating_mul(1_000));
        while self.entries.front().is_some_and(|&t| t <= oldest_kept) {
            self.entries.pop_front();
        }
        sl.limits()
            .iter()
            .map(|&(limit, window_ms)| {
                let from = now_us.saturating_sub(window_ms.saturating_mul(1_000));
                let first = self.entries.partition_point(|&t| t <= from);
                let count = u64::try_from(self.entries.len() - first).unwrap_or(u64::MAX);
                let offset = SlidingLog::probe_offset(count, hits, limit);
                let at_us = usize::try_from(offset)
                    .ok()
                    .and_then(|o| self.entries.get(first.saturating_add(o)))
                    .copied();
                WindowProbe { count, at_us }
            })
            .collect()
    }

    /// Applies one operation.
    pub fn apply(&mut self, sl: &SlidingLog, now: UnixMillis, hits: u64) -> Outcome {
        let probes = self.probe(sl, now, hits);
        let counted = hits > 0 && sl.admits(&probes, hits);
        if counted {
            // Sorted insert: after a clock step back, `now` is not the
            // newest entry. Admitted hits never exceed the largest limit, so
            // this is bounded whatever `hits` says.
            let now_us = now.0.saturating_mul(1_000);
            let at = self.entries.partition_point(|&t| t <= now_us);
            for _ in 0..hits {
                self.entries.insert(at, now_us);
            }
        }
        sl.outcome(&probes, hits, counted, now)
    }

    /// Removes `hits` entries logged at `now` (a refused batch); the work is
    /// bounded by what this request logged, never by `hits` itself.
    pub fn take_back(&mut self, now: UnixMillis, hits: u64) {
        let now_us = now.0.saturating_mul(1_000);
        let end = self.entries.partition_point(|&t| t <= now_us);
        let start = self.entries.partition_point(|&t| t < now_us);
        let n = usize::try_from(hits).unwrap_or(usize::MAX).min(end - start);
        self.entries.drain(end - n..end);
    }

    /// Whether the log holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes the log holds (for the memory store's budget).
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sl(pairs: &[(u64, u64)]) -> SlidingLog {
        SlidingLog::new(Limits::new(pairs.iter().copied()))
    }

    #[test]
    fn admits_again_exactly_when_the_oldest_hit_leaves() {
        let w = sl(&[(2, 1_000)]);
        let mut log = Log::default();
        let t0 = 1_700_000_000_000u64;
        assert!(!log.apply(&w, UnixMillis(t0), 1).over_limit);
        assert!(!log.apply(&w, UnixMillis(t0 + 300), 1).over_limit);
        let denied = log.apply(&w, UnixMillis(t0 + 500), 1);
        assert!(denied.over_limit && !denied.counted);
        assert_eq!(denied.reset, Duration::from_millis(500));
        assert!(log.apply(&w, UnixMillis(t0 + 999), 1).over_limit);
        assert!(!log.apply(&w, UnixMillis(t0 + 1_000), 1).over_limit);
    }

    proptest! {
        /// Admitted hits in any interval of length W never exceed the limit,
        /// exactly; and after a denial reporting reset r, a request at now + r
        /// is admitted.
        #[test]
        fn exact_in_every_interval(
            limit in 1u64..10,
            window_ms in 1u64..3_000,
            steps in proptest::collection::vec((0u64..700, 1u64..3), 1..120),
        ) {
            let w = sl(&[(limit, window_ms)]);
            let mut log = Log::default();
            let mut now = 1_700_000_000_000u64;
            let mut admitted: Vec<u64> = Vec::new();
            for (advance, hits) in steps {
                now += advance;
                let o = log.apply(&w, UnixMillis(now), hits);
                if o.counted {
                    admitted.extend(std::iter::repeat_n(now, usize::try_from(hits).unwrap()));
                } else if hits <= limit {
                    let r = u64::try_from(o.reset.as_millis()).unwrap();
                    let mut probe = log.clone();
                    prop_assert!(!probe.apply(&w, UnixMillis(now + r), hits).over_limit);
                    if r > 0 {
                        let mut probe = log.clone();
                        prop_assert!(probe.apply(&w, UnixMillis(now + r - 1), hits).over_limit);
                    }
                }
            }
            for &t in &admitted {
                let in_window = admitted.iter().filter(|&&u| u <= t && u + window_ms > t).count();
                prop_assert!(u64::try_from(in_window).unwrap() <= limit);
            }
        }
    }
}
