//! The block a lease holds and what it knows of its descriptor: hits left,
//! when they may be used, the answer a hit admitted from them gets, and the
//! recent rate that sizes the next block.

use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use std::time::Duration;

/// A block holds about this much of its descriptor's recent traffic: long
/// enough that the next block lands before this one is spent even when
/// Redis calls queue behind a busy instance's requests (at 20 ms, one
/// hot-key request in eight found its block empty under load and went to
/// Redis itself).
pub(super) const SPAN_MS: u64 = 50;
/// A descriptor's rate is measured over periods this long at most.
const PERIOD_MS: u64 = 100;
/// ... or as soon as this many hits arrived.
pub(super) const QUICK_HITS: u64 = 64;
/// A descriptor not asked for this long gives its block back.
const QUIET_MS: u64 = 1_000;

/// A lease's block and its descriptor's recent rate.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Hits taken and not yet admitted.
    pub(super) left: u64,
    /// When the block was taken (names its window or bucket).
    pub(super) taken_at: UnixMillis,
    /// GCRA: the TAT the last block left in the store, µs.
    pub(super) tat_us: u64,
    /// The size of the last block taken: a GCRA give-back returns at most
    /// this many (the cells of earlier blocks may lie under another
    /// instance's block).
    pub(super) block: u64,
    /// When the limit resets, as the store said at the take.
    pub(super) reset_at: UnixMillis,
    pub(super) limit_index: usize,
    /// The store's count after the take (fixed and sliding windows).
    pub(super) count_after: u64,
    pub(super) period_start: UnixMillis,
    pub(super) period_hits: u64,
    /// Recent hits per second.
    pub(super) rate: u64,
    pub(super) last_used: UnixMillis,
    /// When the last fetch was answered, a block given or not: within
    /// that window a store far away is not asked on the request path
    /// ([`Held::warm`]).
    pub(super) fetched_at: Option<UnixMillis>,
    /// A fixed window's next block, fetched before its window began
    /// (counted there): the block with the instant it was taken at.
    pub(super) next: Option<(Outcome, UnixMillis)>,
    /// `partition_allowance`: the window the hits below were admitted in
    /// (the store unreachable, the blocks spent) ...
    pub(super) credit_at: UnixMillis,
    /// ... how many were admitted there on the instance's own, ...
    pub(super) credit_used: u64,
    /// ... and how many of them the store has yet to be charged.
    pub(super) uncharged: u64,
}

impl Held {
    /// Counts `hits` asked for at `now` into the rate: measured every
    /// [`PERIOD_MS`], or sooner once [`QUICK_HITS`] arrived (a burst on a
    /// cold descriptor is measured within milliseconds).
    pub(super) fn note(&mut self, hits: u64, now: UnixMillis) {
        let elapsed = now.0.saturating_sub(self.period_start.0);
        if elapsed >= PERIOD_MS || (self.period_hits >= QUICK_HITS && elapsed > 0) {
            let measured = self.period_hits.saturating_mul(1_000) / elapsed;
            // A quiet gap starts over; steady traffic averages.
            self.rate = if elapsed > 4 * PERIOD_MS {
                measured
            } else {
                self.rate.midpoint(measured)
            };
            self.period_start = now;
            self.period_hits = 0;
        }
        self.period_hits = self.period_hits.saturating_add(hits);
        self.last_used = now;
    }

    /// Whether the descriptor has not been asked for in [`QUIET_MS`].
    pub(super) fn quiet(&self, now: UnixMillis) -> bool {
        now.0.saturating_sub(self.last_used.0) >= QUIET_MS
    }

    /// The answer for `hits` admitted from the block at `now`, the block
    /// holding `left` before them (`left >= hits`).
    pub(super) fn admitted(&self, left: u64, hits: u64, now: UnixMillis) -> Outcome {
        let before = self.count_after.saturating_sub(left);
        Outcome {
            over_limit: false,
            // What is certainly left: the block. Other instances may have
            // spent what the store had left at the take.
            remaining: left.saturating_sub(hits),
            reset: Duration::from_millis(self.reset_at.0.saturating_sub(now.0)),
            counted: true,
            before,
            after: before.saturating_add(hits),
            limit_index: self.limit_index,
            leased: 0,
            tat_us: 0,
        }
    }

    /// The block to ask for: about [`SPAN_MS`] of recent traffic plus
    /// what arrives during two of the store's measured round trips
    /// (`round_trip_ms`): the next block is asked for while a whole block
    /// is left, so what is admitted while it travels fits in what is held.
    /// A far store's ([`super::FAR_RTT_US`]) block is at least one hit:
    /// its hits are not asked for on the request path, so even a slow
    /// descriptor needs a block ahead.
    pub(super) fn want(&self, cap: u64, round_trip_ms: u64, far: bool) -> u64 {
        let span = SPAN_MS.saturating_add(round_trip_ms.saturating_mul(2));
        let floor = u64::from(far);
        (self.rate.saturating_mul(span) / 1_000).max(floor).min(cap)
    }

    /// Takes the block `outcome` fetched at `taken_at` as the one held
    /// (the caller gave back what was left of the previous one, if it
    /// lapsed): its hits join what is left.
    pub(super) fn take_block(&mut self, spec: &Spec, outcome: &Outcome, taken_at: UnixMillis) {
        self.left = self.left.saturating_add(outcome.leased);
        self.taken_at = taken_at;
        self.reset_at = taken_at.saturating_add(outcome.reset);
        self.limit_index = outcome.limit_index;
        self.count_after = match spec {
            // No count: the burst used.
            Spec::Gcra(g) => g.burst().saturating_sub(outcome.remaining),
            _ => outcome.after,
        };
        self.block = outcome.leased;
        self.tat_us = outcome.tat_us;
    }

    /// Whether a fetch was answered in the window (or bucket) of `now`: the
    /// store's state is known there, so a hit the block cannot take is
    /// refused locally rather than sent across a long round trip. GCRA:
    /// answered within the last second.
    pub(super) fn warm(&self, spec: &Spec, now: UnixMillis) -> bool {
        let Some(at) = self.fetched_at else {
            return false;
        };
        match spec {
            Spec::Gcra(_) => now.0.saturating_sub(at.0) < 1_000 && at <= now,
            _ => one_period(spec, now, at),
        }
    }

    /// The answer for a hit refused locally at `now` (see [`Held::warm`]):
    /// over the limit, nothing counted, as the store would have answered
    /// with what it last said.
    pub(super) fn refused(&self, now: UnixMillis) -> Outcome {
        Outcome {
            over_limit: true,
            remaining: 0,
            reset: Duration::from_millis(self.reset_at.0.saturating_sub(now.0)),
            counted: false,
            before: self.count_after,
            after: self.count_after,
            limit_index: self.limit_index,
            leased: 0,
            tat_us: 0,
        }
    }

    /// Whether `at` falls in the window (fixed) or every series' bucket
    /// (sliding) of the block held: hits counted at `at` are counted where
    /// the block's are. Never for the other algorithms.
    pub(super) fn same_period(&self, spec: &Spec, at: UnixMillis) -> bool {
        one_period(spec, at, self.taken_at)
    }

    /// Whether hits of the block held may be admitted at `now`, with
    /// `margin_us` to spare (GCRA).
    pub(super) fn usable(&self, spec: &Spec, now: UnixMillis, margin_us: u64) -> bool {
        match spec {
            Spec::FixedWindow { .. } | Spec::SlidingWindow(_) => self.same_period(spec, now),
            Spec::Gcra(g) => {
                now.0
                    .saturating_mul(1_000)
                    .saturating_add(self.left.saturating_mul(g.interval_us()))
                    .saturating_add(margin_us)
                    <= self.tat_us
            }
            Spec::SlidingLog(_) | Spec::Concurrency(_) => false,
        }
    }
}

/// Whether `a` and `b` fall in one window (fixed) or in one bucket of every
/// series (sliding). Never for the other algorithms.
fn one_period(spec: &Spec, a: UnixMillis, b: UnixMillis) -> bool {
    match spec {
        Spec::FixedWindow { window, .. } => window.window_start(a) == window.window_start(b),
        Spec::SlidingWindow(sw) => sw
            .series()
            .as_slice()
            .iter()
            .all(|s| s.current_start(a) == s.current_start(b)),
        Spec::Gcra(_) | Spec::SlidingLog(_) | Spec::Concurrency(_) => false,
    }
}
