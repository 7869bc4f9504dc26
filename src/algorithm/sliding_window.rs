//! Sliding window from per-bucket counters, several windows at once.
//!
//! Definition: each window of `W` seconds has its own bucket length,
//! `ceil(W / 60)` seconds (1 s for every window up to 60 s), so a window
//! reads at most 60 buckets and is exact to its own bucket whatever other
//! windows share the descriptor. Windows with the same bucket length share
//! one series of epoch-aligned bucket counters. A window covers the current
//! bucket of its series and the `ceil(W / bucket) - 1` before it, plus the
//! series' buckets *ahead* of the current one (see below). A request of
//! `hits` is admitted when, for every window, `sum(covered buckets) + hits
//! <= limit`; admitted hits are added to the current bucket of every series.
//! Denied hits are not counted, so the window truly slides: a caller that
//! keeps hammering is admitted again as soon as old buckets leave the window
//! (unless `count_rejected`, which counts them anyway). Exact to one bucket:
//! with 1 s buckets, admitted hits in any window of whole seconds
//! `(s - W, s]` never exceed the limit.
//!
//! Clock skew: hits are stamped with the clock of the instance that counts
//! them. Every window also reads the buckets up to [`AHEAD_SECS`] ahead of
//! the local clock, so an instance whose clock is behind still sees the
//! hits of instances up to that much ahead: in stamped time, no window ever
//! holds more than its limit while clocks differ by less than
//! [`AHEAD_SECS`]. In real time, instances whose clocks differ by `d` can
//! together admit up to the limit in each of two stamped windows `d` apart.
//!
//! `hits = 0` checks without counting: over limit only when a window's sum
//! already exceeds its limit.

use super::{Limits, MAX_LIMITS, Outcome};
use crate::clock::UnixMillis;
use std::time::Duration;

/// Most buckets a window reads behind the current one (its own length).
pub const MAX_BUCKETS: u64 = 60;

/// How far ahead of the local clock buckets are read, seconds.
pub const AHEAD_SECS: u64 = 2;

/// Several sliding windows over per-length bucket series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    /// `(limit, window_secs)` pairs.
    limits: Limits,
    count_rejected: bool,
}

/// One series of buckets of one length, shared by the windows of that
/// bucket length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Series {
    /// Bucket length, seconds.
    pub bucket_secs: u64,
    /// Buckets read behind and including the current one (the longest
    /// window of the series).
    pub behind: usize,
    /// Buckets read ahead of the current one.
    pub ahead: usize,
}

impl Series {
    /// Counts this series contributes to a read: ahead plus behind.
    pub const fn len(&self) -> usize {
        self.ahead + self.behind
    }

    /// Whether the series reads nothing (never, for a real window).
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start (seconds since the epoch) of the current bucket.
    pub const fn current_start(&self, now: UnixMillis) -> u64 {
        let secs = now.as_secs();
        secs - secs % self.bucket_secs
    }

    /// Start of the newest bucket read (the furthest ahead).
    pub fn newest_start(&self, now: UnixMillis) -> u64 {
        self.current_start(now)
            .saturating_add(usize_u64(self.ahead).saturating_mul(self.bucket_secs))
    }

    /// Seconds a bucket must be kept: the longest window plus one bucket
    /// plus the read-ahead.
    pub fn ttl_secs(&self) -> u64 {
        usize_u64(self.len())
            .saturating_add(1)
            .saturating_mul(self.bucket_secs)
    }
}

/// The distinct bucket series of a rule, in order of first appearance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesList {
    len: usize,
    items: [Series; MAX_LIMITS],
}

impl SeriesList {
    /// The series.
    pub fn as_slice(&self) -> &[Series] {
        self.items.get(..self.len).unwrap_or_default()
    }
}

const fn usize_u64(n: usize) -> u64 {
    n as u64
}

/// Bucket length of a window of `window_secs`.
const fn bucket_secs_of(window_secs: u64) -> u64 {
    let b = window_secs.div_ceil(MAX_BUCKETS);
    if b == 0 { 1 } else { b }
}

/// Buckets a window of `window_secs` covers behind and including the
/// current one.
const fn behind_of(window_secs: u64) -> usize {
    // At most MAX_BUCKETS (60), so the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let n = window_secs.div_ceil(bucket_secs_of(window_secs)) as usize;
    if n == 0 { 1 } else { n }
}

impl SlidingWindow {
    /// Windows `(limit, window_secs)`.
    pub const fn new(limits: Limits, count_rejected: bool) -> Self {
        Self {
            limits,
            count_rejected,
        }
    }

    /// The `(limit, window_secs)` pairs.
    pub fn limits(&self) -> &[(u64, u64)] {
        self.limits.as_slice()
    }

    /// Whether denied hits are counted too.
    pub const fn count_rejected(&self) -> bool {
        self.count_rejected
    }

    /// The bucket series to read and count in.
    pub fn series(&self) -> SeriesList {
        let mut list = SeriesList {
            len: 0,
            items: [Series::default(); MAX_LIMITS],
        };
        for &(_, window) in self.limits() {
            let bucket_secs = bucket_secs_of(window);
            let behind = behind_of(window);
            let len = list.len;
            match list
                .items
                .iter_mut()
                .take(len)
                .find(|s| s.bucket_secs == bucket_secs)
            {
                Some(series) => series.behind = series.behind.max(behind),
                None => {
                    if let Some(slot) = list.items.get_mut(len) {
                        // AHEAD_SECS is small, so the cast cannot truncate.
                        #[allow(clippy::cast_possible_truncation)]
                        let ahead = AHEAD_SECS.div_ceil(bucket_secs) as usize;
                        *slot = Series {
                            bucket_secs,
                            behind,
                            ahead,
                        };
                        list.len += 1;
                    }
                }
            }
        }
        list
    }

    /// Seconds a bucket must be kept (the longest of the series).
    pub fn ttl_secs(&self) -> u64 {
        self.series()
            .as_slice()
            .iter()
            .map(Series::ttl_secs)
            .max()
            .unwrap_or(1)
    }

    /// Counts read per decision: every series, ahead and behind.
    pub fn buckets(&self) -> usize {
        self.series().as_slice().iter().map(Series::len).sum()
    }

    /// For each window: its limit, the offset of its series in the counts
    /// and the buckets it covers from there (ahead included).
    pub fn windows(&self) -> impl Iterator<Item = (u64, usize, usize)> + '_ {
        let series = self.series();
        self.limits().iter().map(move |&(limit, window)| {
            let (s, offset, behind) = self.place(&series, window);
            (limit, offset, s.ahead + behind)
        })
    }

    /// For window `window_secs`: its series, the offset of the series in
    /// the counts, and the buckets it covers behind.
    fn place(&self, series: &SeriesList, window_secs: u64) -> (Series, usize, usize) {
        let bucket_secs = bucket_secs_of(window_secs);
        let mut offset = 0;
        for s in series.as_slice() {
            if s.bucket_secs == bucket_secs {
                return (*s, offset, behind_of(window_secs));
            }
            offset += s.len();
        }
        (Series::default(), offset, 0)
    }

    /// Whether `hits` are admitted given the bucket `counts` (per series,
    /// newest first, [`SlidingWindow::buckets`] long; missing count 0).
    pub fn admits(&self, counts: &[u64], hits: u64) -> bool {
        let series = self.series();
        self.limits().iter().all(|&(limit, window)| {
            let (s, offset, behind) = self.place(&series, window);
            let sum = sum_range(counts, offset, s.ahead + behind);
            sum.saturating_add(hits) <= limit || (hits == 0 && sum <= limit)
        })
    }

    /// Whether the hits are to be added to the current buckets.
    pub fn counts_hits(&self, admitted: bool, hits: u64) -> bool {
        hits > 0 && (admitted || self.count_rejected)
    }

    /// The answer, from the bucket `counts` read *before* this operation and
    /// whether the hits were `counted`.
    pub fn outcome(&self, counts: &[u64], hits: u64, counted: bool, now: UnixMillis) -> Outcome {
        let series = self.series();
        let mut report: Option<Outcome> = None;
        for (i, &(limit, window)) in self.limits().iter().enumerate() {
            let (s, offset, behind) = self.place(&series, window);
            let start_ms = s.current_start(now).saturating_mul(1_000);
            let bucket_ms = s.bucket_secs.saturating_mul(1_000);
            let covered = s.ahead + behind;
            let count = |k: usize| counts.get(offset + k).copied().unwrap_or(0);
            // When the `k`-th bucket read (0 = newest, furthest ahead) leaves
            // this window.
            let leaves_in = |k: usize| -> Duration {
                let steps = usize_u64(covered.saturating_sub(k));
                let at = start_ms.saturating_add(steps.saturating_mul(bucket_ms));
                Duration::from_millis(at.saturating_sub(now.0))
            };
            let sum = sum_range(counts, offset, covered);
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
                let mut reset = leaves_in(s.ahead);
                for k in (0..covered).rev() {
                    freed = freed.saturating_add(count(k));
                    if freed >= excess {
                        reset = leaves_in(k);
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
                    leased: 0,
                    tat_us: 0,
                };
            }
            let remaining = limit.saturating_sub(after);
            // Within the limit: the window "resets" when its oldest
            // non-empty bucket leaves.
            let oldest = (0..covered)
                .rev()
                .find(|&k| count(k) > 0 || (k == s.ahead && counted));
            let reset = oldest.map_or(Duration::from_secs(window), leaves_in);
            let outcome = Outcome {
                over_limit: false,
                remaining,
                reset,
                counted,
                before: sum,
                after,
                limit_index: i,
                leased: 0,
                tat_us: 0,
            };
            if report.is_none_or(|best| remaining < best.remaining) {
                report = Some(outcome);
            }
        }
        // No limits at all cannot come from validation; answer "nothing
        // left" rather than panic.
        report.unwrap_or(Outcome {
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

fn sum_range(counts: &[u64], offset: usize, n: usize) -> u64 {
    counts
        .iter()
        .skip(offset)
        .take(n)
        .fold(0u64, |acc, c| acc.saturating_add(*c))
}

/// Bucket counters as the embedded store keeps them: `(bucket length,
/// bucket start, count)`, pruned to the buckets still needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buckets {
    buckets: Vec<(u64, u64, u64)>,
}

impl Buckets {
    /// The buckets as `(bucket length s, bucket start s, count)`, for a
    /// snapshot of the embedded store.
    pub fn parts(&self) -> &[(u64, u64, u64)] {
        &self.buckets
    }

    /// Buckets read back from a snapshot ([`Buckets::parts`]).
    pub fn from_parts(buckets: Vec<(u64, u64, u64)>) -> Self {
        Self { buckets }
    }

    /// Heap bytes the buckets hold (for the memory store's budget).
    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<(u64, u64, u64)>()
    }

    fn count(&self, bucket_secs: u64, start: u64) -> u64 {
        self.buckets
            .iter()
            .find(|&&(b, s, _)| b == bucket_secs && s == start)
            .map_or(0, |&(_, _, c)| c)
    }

    /// The counts read for a decision at `now`: per series, newest first.
    pub fn counts(&self, sw: &SlidingWindow, now: UnixMillis) -> Vec<u64> {
        let mut counts = Vec::with_capacity(sw.buckets());
        for s in sw.series().as_slice() {
            let newest = s.newest_start(now);
            for k in 0..s.len() {
                let offset = usize_u64(k).saturating_mul(s.bucket_secs);
                counts.push(match newest.checked_sub(offset) {
                    Some(start) => self.count(s.bucket_secs, start),
                    None => 0,
                });
            }
        }
        counts
    }

    /// Adds `hits` to the current bucket of every series and forgets
    /// buckets no window can reach any more, even from a clock up to
    /// [`AHEAD_SECS`] behind (as Redis keeps them until they expire).
    pub fn add(&mut self, sw: &SlidingWindow, now: UnixMillis, hits: u64) {
        let series = sw.series();
        self.buckets.retain(|&(b, start, _)| {
            series.as_slice().iter().any(|s| {
                s.bucket_secs == b
                    && start.saturating_add(usize_u64(s.len()).saturating_mul(b))
                        > s.current_start(now)
            })
        });
        for s in series.as_slice() {
            let current = s.current_start(now);
            match self
                .buckets
                .iter_mut()
                .find(|(b, start, _)| *b == s.bucket_secs && *start == current)
            {
                Some((_, _, count)) => *count = count.saturating_add(hits),
                None => self.buckets.push((s.bucket_secs, current, hits)),
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

    /// Takes back `hits` from the current bucket of every series (a
    /// refused batch).
    pub fn take_back(&mut self, sw: &SlidingWindow, now: UnixMillis, hits: u64) {
        for s in sw.series().as_slice() {
            let current = s.current_start(now);
            if let Some((_, _, count)) = self
                .buckets
                .iter_mut()
                .find(|(b, start, _)| *b == s.bucket_secs && *start == current)
            {
                *count = count.saturating_sub(hits);
            }
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

    fn series(pairs: &[(u64, u64)]) -> Vec<(u64, usize, usize)> {
        sw(pairs)
            .series()
            .as_slice()
            .iter()
            .map(|s| (s.bucket_secs, s.behind, s.ahead))
            .collect()
    }

    #[test]
    fn each_window_has_its_own_bucket_length_and_reads_at_most_60() {
        assert_eq!(series(&[(10, 15)]), vec![(1, 15, 2)]);
        assert_eq!(series(&[(10, 60)]), vec![(1, 60, 2)]);
        assert_eq!(series(&[(10, 3_600)]), vec![(60, 60, 1)]);
        assert_eq!(series(&[(10, 86_400)]), vec![(1_440, 60, 1)]);
        assert_eq!(series(&[(1, 1), (5, 10), (7, 15)]), vec![(1, 15, 2)]);
        // A second window beside an hour keeps its one-second buckets.
        assert_eq!(
            series(&[(10, 1), (1_000, 3_600)]),
            vec![(1, 1, 2), (60, 60, 1)]
        );
        assert_eq!(sw(&[(10, 1), (1_000, 3_600)]).buckets(), 3 + 61);
    }

    #[test]
    fn a_second_window_beside_an_hour_is_exact_to_the_second() {
        // The case: 10/s and 1000/h; 10 calls, 1.5 s later 10 more.
        let w = sw(&[(10, 1), (1_000, 3_600)]);
        let mut b = Buckets::default();
        let t0 = UnixMillis(1_700_000_000_200);
        for _ in 0..10 {
            assert!(!b.apply(&w, t0, 1).over_limit);
        }
        assert!(b.apply(&w, t0, 1).over_limit);
        let later = UnixMillis(t0.0 + 1_500);
        for _ in 0..10 {
            assert!(!b.apply(&w, later, 1).over_limit);
        }
        let o = b.apply(&w, later, 1);
        assert!(o.over_limit);
        assert_eq!(o.limit_index, 0);
        // The hour still counts all 20.
        let o = b.apply(&w, UnixMillis(t0.0 + 3_000), 0);
        assert_eq!(o.remaining, 10);
    }

    #[test]
    fn hits_stamped_ahead_by_a_faster_clock_are_seen() {
        let w = sw(&[(5, 10)]);
        let mut b = Buckets::default();
        let t = 1_700_000_000u64;
        // An instance 2 s ahead counts 5 at its t + 2.
        b.apply(&w, UnixMillis::from_secs(t + 2), 5);
        // The instance at t sees them and refuses.
        assert!(b.apply(&w, UnixMillis::from_secs(t), 1).over_limit);
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
        assert_eq!(b.counts(&w, now)[2], 3, "current bucket, after two ahead");
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
