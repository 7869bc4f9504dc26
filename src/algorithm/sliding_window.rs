//! Sliding window from per-bucket counters, several windows at once.
//!
//! Definition: time is cut into epoch-aligned buckets of `bucket_secs`
//! (1 s, or `ceil(longest window / 60)` s when the longest window spans more
//! than 60 seconds, so at most 60 buckets are ever read). A window of `W`
//! seconds covers the current bucket and the `ceil(W / bucket_secs) - 1`
//! before it. A request of `hits` is admitted when, for every window,
//! `sum(covered buckets) + hits <= limit`; admitted hits are added to the
//! current bucket. Denied hits are not counted, so the window truly slides:
//! a caller that keeps hammering is admitted again as soon as old buckets
//! leave the window (unless `count_rejected`, which counts them anyway).
//! Exact to one bucket: with 1 s buckets, admitted hits in any window of
//! whole seconds `(s - W, s]` never exceed the limit.
//!
//! `hits = 0` checks without counting: over limit only when a window's sum
//! already exceeds its limit.

use super::{Limits, Outcome};
use crate::clock::UnixMillis;
use std::time::Duration;

/// Most buckets read per decision.
pub const MAX_BUCKETS: u64 = 60;

/// Several sliding windows over one set of buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    bucket_secs: u64,
    /// `(limit, window_secs)` pairs.
    limits: Limits,
    count_rejected: bool,
}

impl SlidingWindow {
    /// Windows `(limit, window_secs)`; bucket length chosen so the longest
    /// window needs at most [`MAX_BUCKETS`] buckets.
    pub fn new(limits: Limits, count_rejected: bool) -> Self {
        let longest = limits.longest_window().max(1);
        Self {
            bucket_secs: longest.div_ceil(MAX_BUCKETS).max(1),
            limits,
            count_rejected,
        }
    }

    /// Bucket length in seconds.
    pub const fn bucket_secs(&self) -> u64 {
        self.bucket_secs
    }

    /// The `(limit, window_secs)` pairs.
    pub fn limits(&self) -> &[(u64, u64)] {
        self.limits.as_slice()
    }

    /// Whether denied hits are counted too.
    pub const fn count_rejected(&self) -> bool {
        self.count_rejected
    }

    /// Start (seconds since the epoch) of the bucket containing `now`.
    pub const fn bucket_start(&self, now: UnixMillis) -> u64 {
        let secs = now.as_secs();
        secs - secs % self.bucket_secs
    }

    /// Buckets covered by a window of `window_secs`.
    const fn buckets_of(&self, window_secs: u64) -> usize {
        // At most MAX_BUCKETS (60), so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let n = window_secs.div_ceil(self.bucket_secs) as usize;
        if n == 0 { 1 } else { n }
    }

    /// Buckets to read: those of the longest window, newest first.
    pub fn buckets(&self) -> usize {
        self.buckets_of(self.limits.longest_window())
    }

    /// Seconds a bucket must be kept: the longest window plus one bucket.
    pub fn ttl_secs(&self) -> u64 {
        self.limits
            .longest_window()
            .saturating_add(self.bucket_secs)
    }

    /// Whether `hits` are admitted given the bucket `counts` (newest first,
    /// [`SlidingWindow::buckets`] long; missing buckets count 0).
    pub fn admits(&self, counts: &[u64], hits: u64) -> bool {
        self.limits().iter().all(|&(limit, window)| {
            let sum = sum_first(counts, self.buckets_of(window));
            sum.saturating_add(hits) <= limit || (hits == 0 && sum <= limit)
        })
    }

    /// Whether the hits are to be added to the current bucket.
    pub fn counts_hits(&self, admitted: bool, hits: u64) -> bool {
        hits > 0 && (admitted || self.count_rejected)
    }

    /// The answer, from the bucket `counts` read *before* this operation and
    /// whether the hits were `counted`.
    pub fn outcome(&self, counts: &[u64], hits: u64, counted: bool, now: UnixMillis) -> Outcome {
        let start_ms = self.bucket_start(now).saturating_mul(1_000);
        let bucket_ms = self.bucket_secs.saturating_mul(1_000);
        // When bucket `j` (0 = current) leaves a window of `n` buckets.
        let leaves_in = |n: usize, j: usize| -> Duration {
            let steps = u64::try_from(n.saturating_sub(j)).unwrap_or(u64::MAX);
            let at = start_ms.saturating_add(steps.saturating_mul(bucket_ms));
            Duration::from_millis(at.saturating_sub(now.0))
        };
        let mut report: Option<(usize, Outcome)> = None;
        for (i, &(limit, window)) in self.limits().iter().enumerate() {
            let n = self.buckets_of(window);
            let sum = sum_first(counts, n);
            let after = sum.saturating_add(if counted { hits } else { 0 });
            let over = if hits == 0 {
                sum > limit
            } else {
                sum.saturating_add(hits) > limit
            };
            if over {
                // Admitted again once enough of the oldest buckets leave.
                let excess = sum.saturating_add(hits.max(1)).saturating_sub(limit);
                let mut freed = 0u64;
                let mut reset = leaves_in(n, 0);
                for j in (0..n).rev() {
                    freed = freed.saturating_add(counts.get(j).copied().unwrap_or(0));
                    if freed >= excess {
                        reset = leaves_in(n, j);
                        break;
                    }
                }
                return Outcome {
                    over_limit: true,
                    remaining: 0,
                    reset,
                    counted,
                    before: sum,
                    after,
                    limit_index: i,
                };
            }
            let remaining = limit.saturating_sub(after);
            // Within the limit: the window "resets" when its oldest
            // non-empty bucket leaves.
            let oldest = (0..n)
                .rev()
                .find(|&j| counts.get(j).copied().unwrap_or(0) > 0 || (j == 0 && counted));
            let reset = oldest.map_or(Duration::from_secs(window), |j| leaves_in(n, j));
            let outcome = Outcome {
                over_limit: false,
                remaining,
                reset,
                counted,
                before: sum,
                after,
                limit_index: i,
            };
            if report
                .as_ref()
                .is_none_or(|(_, best)| remaining < best.remaining)
            {
                report = Some((i, outcome));
            }
        }
        // No limits at all cannot come from validation; answer "nothing
        // left" rather than panic.
        report.map_or(
            Outcome {
                over_limit: false,
                remaining: 0,
                reset: Duration::ZERO,
                counted,
                before: 0,
                after: 0,
                limit_index: 0,
            },
            |(_, outcome)| outcome,
        )
    }
}

fn sum_first(counts: &[u64], n: usize) -> u64 {
    counts
        .iter()
        .take(n)
        .fold(0u64, |acc, c| acc.saturating_add(*c))
}

/// Bucket counters as the embedded store keeps them: `(bucket start, count)`
/// in ascending start order, pruned to the buckets still needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buckets {
    buckets: Vec<(u64, u64)>,
}

impl Buckets {
    /// Heap bytes the buckets hold (for the memory store's budget).
    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// The counts of the `sw.buckets()` buckets up to the one containing
    /// `now`, newest first.
    pub fn counts(&self, sw: &SlidingWindow, now: UnixMillis) -> Vec<u64> {
        let current = sw.bucket_start(now);
        (0..sw.buckets())
            .map(|j| {
                let offset = u64::try_from(j)
                    .unwrap_or(u64::MAX)
                    .saturating_mul(sw.bucket_secs());
                let start = current.saturating_sub(offset);
                if offset > current {
                    return 0;
                }
                self.buckets
                    .iter()
                    .find(|(s, _)| *s == start)
                    .map_or(0, |(_, c)| *c)
            })
            .collect()
    }

    /// Adds `hits` to the bucket containing `now` and forgets buckets no
    /// window can reach any more.
    pub fn add(&mut self, sw: &SlidingWindow, now: UnixMillis, hits: u64) {
        let current = sw.bucket_start(now);
        let keep_from = current.saturating_sub(
            u64::try_from(sw.buckets())
                .unwrap_or(u64::MAX)
                .saturating_mul(sw.bucket_secs()),
        );
        self.buckets.retain(|(start, _)| *start > keep_from);
        match self.buckets.iter_mut().find(|(s, _)| *s == current) {
            Some((_, count)) => *count = count.saturating_add(hits),
            None => {
                self.buckets.push((current, hits));
                self.buckets.sort_unstable_by_key(|(s, _)| *s);
            }
        }
    }

    /// Applies one operation: decide on the counts before, count if due.
    pub fn apply(&mut self, sw: &SlidingWindow, now: UnixMillis, hits: u64) -> Outcome {
        let counts = self.counts(sw, now);
        let counted = sw.counts_hits(sw.admits(&counts, hits), hits);
        if counted {
            self.add(sw, now, hits);
        }
        sw.outcome(&counts, hits, counted, now)
    }

    /// Takes back `hits` from the bucket containing `now` (a refused batch).
    pub fn take_back(&mut self, sw: &SlidingWindow, now: UnixMillis, hits: u64) {
        let current = sw.bucket_start(now);
        if let Some((_, count)) = self.buckets.iter_mut().find(|(s, _)| *s == current) {
            *count = count.saturating_sub(hits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sw(pairs: &[(u64, u64)]) -> SlidingWindow {
        SlidingWindow::new(Limits::new(pairs.iter().copied()), false)
    }

    #[test]
    fn buckets_stay_bounded_for_long_windows() {
        assert_eq!(sw(&[(10, 15)]).bucket_secs(), 1);
        assert_eq!(sw(&[(10, 60)]).bucket_secs(), 1);
        assert_eq!(sw(&[(10, 3_600)]).bucket_secs(), 60);
        assert_eq!(sw(&[(10, 3_600)]).buckets(), 60);
        assert_eq!(sw(&[(10, 86_400)]).buckets(), 60);
        assert_eq!(sw(&[(1, 1), (5, 10), (7, 15)]).buckets(), 15);
    }

    #[test]
    fn burst_plus_sustained_limits() {
        // 1000/1 s + 5000/10 s + 7000/15 s.
        let w = sw(&[(1_000, 1), (5_000, 10), (7_000, 15)]);
        let mut b = Buckets::default();
        let t0 = UnixMillis::from_secs(1_700_000_000);
        let first = b.apply(&w, t0, 1_000);
        assert!(!first.over_limit);
        let over = b.apply(&w, t0, 1);
        assert!(over.over_limit && !over.counted);
        assert_eq!(over.limit_index, 0);
        assert_eq!(over.reset, Duration::from_secs(1));
        // Sustained 600/s: the 10 s window (5000) cuts in before 10 s pass.
        let mut b = Buckets::default();
        let mut denied_at = None;
        for s in 0..10u64 {
            let now = UnixMillis::from_secs(1_700_000_000 + s);
            for _ in 0..600 {
                let o = b.apply(&w, now, 1);
                if o.over_limit && denied_at.is_none() {
                    denied_at = Some((s, o.limit_index));
                }
            }
        }
        assert_eq!(
            denied_at,
            Some((8, 1)),
            "5000/10 s reached in the 9th second"
        );
    }

    #[test]
    fn denied_hits_do_not_count_so_the_window_slides() {
        let w = sw(&[(3, 10)]);
        let mut b = Buckets::default();
        let t0 = 1_700_000_000u64;
        for s in 0..3 {
            assert!(!b.apply(&w, UnixMillis::from_secs(t0 + s), 1).over_limit);
        }
        for s in 3..10 {
            let o = b.apply(&w, UnixMillis::from_secs(t0 + s), 1);
            assert!(o.over_limit);
            // The oldest hit (second 0) leaves at t0 + 10.
            assert_eq!(o.reset, Duration::from_secs(t0 + 10 - (t0 + s)));
        }
        assert!(!b.apply(&w, UnixMillis::from_secs(t0 + 10), 1).over_limit);
    }

    #[test]
    fn count_rejected_keeps_counting() {
        let w = SlidingWindow::new(Limits::new([(2, 5)]), true);
        let mut b = Buckets::default();
        let now = UnixMillis::from_secs(100);
        b.apply(&w, now, 2);
        let o = b.apply(&w, now, 1);
        assert!(o.over_limit && o.counted);
        assert_eq!(b.counts(&w, now)[0], 3);
    }

    #[test]
    fn zero_hits_checks_without_counting() {
        let w = sw(&[(2, 5)]);
        let mut b = Buckets::default();
        let now = UnixMillis::from_secs(100);
        b.apply(&w, now, 2);
        let o = b.apply(&w, now, 0);
        assert!(!o.over_limit && !o.counted);
        assert_eq!(o.remaining, 0);
    }

    proptest! {
        /// For every second s and every window W: admitted hits in
        /// (s - W, s] never exceed the limit; and a request that fits every
        /// window is admitted.
        #[test]
        fn admitted_hits_in_every_window_stay_within_limits(
            limits in proptest::collection::vec((0u64..20, 1u64..30), 1..4),
            steps in proptest::collection::vec((0u64..2_500, 0u64..4), 1..150),
        ) {
            let w = SlidingWindow::new(Limits::new(limits.iter().copied()), false);
            let mut b = Buckets::default();
            let mut now = UnixMillis::from_secs(1_700_000_000);
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (advance_ms, hits) in steps {
                now = UnixMillis(now.0 + advance_ms);
                let s = now.as_secs();
                let fits = limits.iter().all(|&(limit, window)| {
                    let used: u64 = admitted.iter().filter(|(t, _)| *t + window > s).map(|(_, h)| h).sum();
                    used + hits <= limit
                });
                let o = b.apply(&w, now, hits);
                prop_assert_eq!(!o.over_limit || hits == 0, fits || hits == 0);
                if o.counted {
                    admitted.push((s, hits));
                }
                prop_assert!(o.remaining <= limits.iter().map(|l| l.0).max().unwrap_or(0));
            }
            for &(limit, window) in &limits {
                for &(s, _) in &admitted {
                    let in_window: u64 = admitted.iter().filter(|(t, _)| *t <= s && *t + window > s).map(|(_, h)| h).sum();
                    prop_assert!(in_window <= limit);
                }
            }
        }
    }
}
