//! GCRA, the generic cell rate algorithm: a token bucket kept as one number,
//! the theoretical arrival time (TAT).
//!
//! Definition: with `limit` hits per `window`, the emission interval is
//! `T = window / limit` and the burst capacity is `burst * T`. A request of
//! `hits` at `now` computes `tat' = max(tat, now) + hits * T` and is admitted
//! when `tat' - now <= burst * T`; then `tat'` is stored. So at most `burst`
//! hits pass at once, and over any interval `t` at most
//! `burst + floor(t / T)` are admitted. Denied requests change nothing. After
//! a denial reporting reset `r`, the same request is admitted at `now + r`
//! and not a moment before (`r` is rounded up to whole milliseconds). A limit
//! of 0 denies everything. O(1) state per descriptor.
//!
//! Times are microseconds since the epoch.

use super::{Outcome, ceil_ms};
use crate::clock::UnixMillis;
use std::time::Duration;

/// A GCRA limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gcra {
    limit: u64,
    window_ms: u64,
    /// Emission interval, µs (0 when `limit` is 0).
    interval_us: u64,
    burst: u64,
}

impl Gcra {
    /// `limit` hits per `window_ms`, up to `burst` at once.
    pub fn new(limit: u64, window_ms: u64, burst: u64) -> Self {
        let interval_us = window_ms
            .saturating_mul(1_000)
            .checked_div(limit)
            .unwrap_or(0);
        Self {
            limit,
            window_ms,
            interval_us: interval_us.max(u64::from(limit > 0)),
            burst: burst.max(1),
        }
    }

    /// Hits per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Emission interval in microseconds.
    pub const fn interval_us(&self) -> u64 {
        self.interval_us
    }

    /// Burst size in hits.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// Whether the limit is 0 (everything denied).
    pub const fn denies_all(&self) -> bool {
        self.limit == 0
    }

    /// Burst capacity `burst * T` in microseconds.
    pub const fn capacity_us(&self) -> u64 {
        self.burst.saturating_mul(self.interval_us)
    }

    /// Decides on the stored TAT (µs, if any) at `now`: the TAT to store when
    /// admitted and counted, and the answer.
    pub fn decide(
        &self,
        stored_tat_us: Option<u64>,
        now: UnixMillis,
        hits: u64,
    ) -> (Option<u64>, Outcome) {
        let now_us = now.0.saturating_mul(1_000);
        let tat = stored_tat_us.unwrap_or(now_us).max(now_us);
        if self.denies_all() {
            return (
                None,
                Outcome {
                    over_limit: true,
                    remaining: 0,
                    reset: Duration::from_millis(self.window_ms),
                    counted: false,
                    before: 0,
                    after: 0,
                    limit_index: 0,
                    leased: 0,
                    tat_us: 0,
                },
            );
        }
        let new_tat = tat.saturating_add(hits.saturating_mul(self.interval_us));
        let capacity = self.capacity_us();
        let admitted = new_tat - now_us <= capacity;
        if admitted {
            let used = if hits > 0 { new_tat } else { tat };
            let remaining = (capacity - (used - now_us)) / self.interval_us;
            let outcome = Outcome {
                over_limit: false,
                remaining: remaining.min(self.limit.max(self.burst)),
                // Fully refilled once the TAT is reached.
                reset: ceil_ms(used - now_us),
                counted: hits > 0,
                before: 0,
                after: 0,
                limit_index: 0,
                leased: 0,
                tat_us: if hits > 0 { new_tat } else { 0 },
            };
            (Some(new_tat).filter(|_| hits > 0), outcome)
        } else {
            let outcome = Outcome {
                over_limit: true,
                remaining: 0,
                // Admitted once new_tat - t <= capacity.
                reset: ceil_ms(new_tat - capacity - now_us),
                counted: false,
                before: 0,
                after: 0,
                limit_index: 0,
                leased: 0,
                tat_us: 0,
            };
            (None, outcome)
        }
    }

    /// How long a stored TAT must be kept after `now` (µs → ms, at least 1).
    pub fn ttl_ms(tat_us: u64, now: UnixMillis) -> u64 {
        tat_us
            .saturating_sub(now.0.saturating_mul(1_000))
            .div_ceil(1_000)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn burst_then_steady_rate() {
        // 10 per second, burst 3: interval 100 ms.
        let g = Gcra::new(10, 1_000, 3);
        let mut tat = None;
        let t0 = 1_700_000_000_000u64;
        for i in 0..3 {
            let (new, o) = g.decide(tat, UnixMillis(t0), 1);
            assert!(!o.over_limit, "burst hit {i}");
            tat = new.or(tat);
        }
        let (_, denied) = g.decide(tat, UnixMillis(t0), 1);
        assert!(denied.over_limit);
        assert_eq!(denied.reset, Duration::from_millis(100));
        let (_, still) = g.decide(tat, UnixMillis(t0 + 99), 1);
        assert!(still.over_limit);
        let (_, ok) = g.decide(tat, UnixMillis(t0 + 100), 1);
        assert!(!ok.over_limit);
    }

    #[test]
    fn zero_limit_denies_everything() {
        let g = Gcra::new(0, 1_000, 1);
        assert!(g.decide(None, UnixMillis(5), 1).1.over_limit);
        assert!(g.decide(None, UnixMillis(5), 0).1.over_limit);
    }

    proptest! {
        /// Admitted hits in any interval t never exceed burst + floor(t / T);
        /// after a denial reporting reset r, the request is admitted at
        /// now + r and not at now + r - 1 ms.
        #[test]
        fn never_exceeds_burst_plus_rate(
            limit in 1u64..50,
            window_ms in 100u64..5_000,
            burst in 1u64..10,
            steps in proptest::collection::vec((0u64..400, 1u64..4), 1..150),
        ) {
            let g = Gcra::new(limit, window_ms, burst);
            let mut tat = None;
            let mut now = 1_700_000_000_000u64;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (advance, hits) in steps {
                now += advance;
                let (new, o) = g.decide(tat, UnixMillis(now), hits);
                if o.over_limit {
                    if hits <= burst {
                        let r = u64::try_from(o.reset.as_millis()).unwrap();
                        prop_assert!(!g.decide(tat, UnixMillis(now + r), hits).1.over_limit);
                        if r > 0 {
                            prop_assert!(g.decide(tat, UnixMillis(now + r - 1), hits).1.over_limit);
                        }
                    }
                } else {
                    tat = new.or(tat);
                    admitted.push((now, hits));
                }
            }
            let t_us = g.interval_us();
            for (i, &(start, _)) in admitted.iter().enumerate() {
                let mut total = 0;
                for &(at, hits) in &admitted[i..] {
                    total += hits;
                    let span_us = (at - start) * 1_000;
                    prop_assert!(total <= burst + span_us / t_us, "{} hits in {} us", total, span_us);
                }
            }
        }
    }
}
