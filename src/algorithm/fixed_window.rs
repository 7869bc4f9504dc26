//! Fixed window: one counter per epoch-aligned window of `window_secs`.
//!
//! Definition (the reference service's behaviour): the window containing `now`
//! starts at `now_secs - now_secs % window_secs`. A hit of `hits` adds to that
//! window's counter; the descriptor is over limit when the counter *after*
//! adding exceeds the limit. Over-limit hits still count, so a caller that
//! keeps hammering stays blocked for the rest of the window (reference parity).
//! `hits = 0` reads the counter without consuming. A window resets exactly at
//! its end; `reset_secs` is never 0 (on a boundary it is the whole window).

use super::Outcome;
use super::calendar::Calendar;
use crate::clock::UnixMillis;
use std::time::Duration;

/// Epoch-aligned fixed window of `window_secs` seconds, or a calendar's
/// day, week, month or year ([`FixedWindow::on_calendar`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    window_secs: u64,
    calendar: Option<&'static Calendar>,
}

/// A fixed-window counter as a store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counter {
    /// Start of the window the count belongs to, in seconds since the epoch.
    pub window_start_secs: u64,
    /// Hits counted in that window.
    pub count: u64,
}

/// The counter value before and after one application of hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Count in the current window before this call.
    pub before: u64,
    /// Count in the current window after this call.
    pub after: u64,
}

impl FixedWindow {
    /// A window of `window_secs` seconds; 0 is treated as 1 so the math never
    /// divides by zero (validation rejects 0 before it gets here).
    pub const fn new(window_secs: u64) -> Self {
        Self {
            window_secs: if window_secs == 0 { 1 } else { window_secs },
            calendar: None,
        }
    }

    /// The windows of `calendar`: each from one local boundary to the next.
    pub fn on_calendar(calendar: &'static Calendar) -> Self {
        Self {
            window_secs: calendar.longest_secs(),
            calendar: Some(calendar),
        }
    }

    /// The calendar the windows follow, if any.
    pub const fn calendar(self) -> Option<&'static Calendar> {
        self.calendar
    }

    /// Window length in seconds; for a calendar, the longest window of its
    /// unit (a bound for expiry times, and with the start the identity of
    /// a window in store keys).
    pub const fn window_secs(self) -> u64 {
        self.window_secs
    }

    /// Start and end (seconds since the epoch) of the window containing
    /// `now`.
    pub fn bounds(self, now: UnixMillis) -> (u64, u64) {
        let secs = now.as_secs();
        match self.calendar {
            Some(calendar) => calendar.bounds(secs),
            None => {
                let start = secs - secs % self.window_secs;
                (start, start.saturating_add(self.window_secs))
            }
        }
    }

    /// Start (seconds since the epoch) of the window containing `now`.
    pub fn window_start(self, now: UnixMillis) -> u64 {
        self.bounds(now).0
    }

    /// Seconds from `now` until the window containing it ends; at least 1
    /// and at most the window, computed on whole seconds like the
    /// reference.
    pub fn reset_secs(self, now: UnixMillis) -> u64 {
        self.bounds(now).1.saturating_sub(now.as_secs()).max(1)
    }

    /// When the counter of the window containing `now` may be forgotten.
    pub fn expires_at(self, now: UnixMillis) -> UnixMillis {
        UnixMillis::from_secs(self.bounds(now).1)
    }

    /// Adds `hits` to `counter` at `now`, first resetting it if it belongs to
    /// an earlier window.
    pub fn apply(self, counter: &mut Counter, now: UnixMillis, hits: u64) -> Tally {
        let start = self.window_start(now);
        if counter.window_start_secs != start {
            *counter = Counter {
                window_start_secs: start,
                count: 0,
            };
        }
        let before = counter.count;
        counter.count = before.saturating_add(hits);
        Tally {
            before,
            after: counter.count,
        }
    }
}

impl FixedWindow {
    /// The count of the window containing `now`, without changing anything.
    pub fn current(self, counter: &Counter, now: UnixMillis) -> u64 {
        if counter.window_start_secs == self.window_start(now) {
            counter.count
        } else {
            0
        }
    }

    /// What the caller is told after `tally` against `limit` at `now`.
    pub fn outcome(self, tally: Tally, limit: u64, now: UnixMillis, counted: bool) -> Outcome {
        let over_limit = is_over_limit(tally.after, limit);
        Outcome {
            over_limit,
            remaining: if over_limit { 0 } else { limit - tally.after },
            reset: Duration::from_secs(self.reset_secs(now)),
            counted,
            before: tally.before,
            after: tally.after,
            limit_index: 0,
            leased: 0,
            tat_us: 0,
        }
    }

    /// The answer when the hits are refused without counting (the count
    /// stays at `before`; the caller is told it would have reached
    /// `before + hits`).
    pub fn refused(self, before: u64, hits: u64, limit: u64, now: UnixMillis) -> Outcome {
        let after = before.saturating_add(hits);
        let over_limit = is_over_limit(after, limit);
        Outcome {
            over_limit,
            // Not counted, so what is left is measured from `before`.
            remaining: if over_limit || before >= limit {
                0
            } else {
                limit - before
            },
            reset: Duration::from_secs(self.reset_secs(now)),
            counted: false,
            before,
            after,
            limit_index: 0,
            leased: 0,
            tat_us: 0,
        }
    }
}

/// Whether a counter that reached `after` is over a limit of `limit` hits.
pub const fn is_over_limit(after: u64, limit: u64) -> bool {
    after > limit
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn windows_are_epoch_aligned() {
        let minute = FixedWindow::new(60);
        assert_eq!(minute.window_start(UnixMillis::from_secs(1_234)), 1_200);
        assert_eq!(minute.reset_secs(UnixMillis::from_secs(1_234)), 26);
        let hour = FixedWindow::new(3_600);
        assert_eq!(hour.window_start(UnixMillis::from_secs(1_000_000)), 997_200);
        let day = FixedWindow::new(86_400);
        assert_eq!(day.window_start(UnixMillis::from_secs(1_000_000)), 950_400);
    }

    #[test]
    fn reset_is_never_zero() {
        let minute = FixedWindow::new(60);
        assert_eq!(minute.reset_secs(UnixMillis::from_secs(1_200)), 60);
        assert_eq!(minute.reset_secs(UnixMillis(1_259_999)), 1);
        // Reference vector: now = 2222 with MINUTE gives a reset of 58.
        assert_eq!(minute.reset_secs(UnixMillis::from_secs(2_222)), 58);
    }

    #[test]
    fn counter_resets_at_the_boundary() {
        let minute = FixedWindow::new(60);
        let mut counter = Counter::default();
        let t = UnixMillis::from_secs(1_200);
        assert_eq!(minute.apply(&mut counter, t, 5).after, 5);
        let just_before = UnixMillis(1_259_999);
        assert_eq!(minute.apply(&mut counter, just_before, 1).after, 6);
        let next = UnixMillis::from_secs(1_260);
        let tally = minute.apply(&mut counter, next, 1);
        assert_eq!((tally.before, tally.after), (0, 1));
    }

    #[test]
    fn zero_hits_reads_without_consuming() {
        let w = FixedWindow::new(3_600);
        let mut counter = Counter::default();
        let now = UnixMillis::from_secs(10);
        w.apply(&mut counter, now, 11);
        let tally = w.apply(&mut counter, now, 0);
        assert_eq!((tally.before, tally.after), (11, 11));
        assert!(is_over_limit(tally.after, 10));
    }

    proptest! {
        /// Admitted hits per window never exceed the limit, and every window
        /// starts from zero at its epoch-aligned boundary.
        #[test]
        fn admitted_hits_per_window_stay_within_limit(
            window_secs in 1u64..120,
            limit in 0u64..20,
            steps in proptest::collection::vec((0u64..3_000, 0u64..4), 1..200),
        ) {
            let w = FixedWindow::new(window_secs);
            let mut counter = Counter::default();
            let mut now = UnixMillis::from_secs(1_700_000_000);
            let mut admitted: std::collections::HashMap<u64, u64> = Default::default();
            for (advance_ms, hits) in steps {
                now = UnixMillis(now.0 + advance_ms);
                let tally = w.apply(&mut counter, now, hits);
                prop_assert!(tally.after >= tally.before);
                if !is_over_limit(tally.after, limit) {
                    *admitted.entry(w.window_start(now)).or_default() += hits;
                }
                prop_assert!(w.reset_secs(now) >= 1 && w.reset_secs(now) <= window_secs);
            }
            for total in admitted.values() {
                prop_assert!(*total <= limit);
            }
        }
    }
}
