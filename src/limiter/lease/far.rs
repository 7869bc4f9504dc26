//! Blocks as they land, and leases on a store across a WAN: the round trip
//! measured and what makes a store far, a fixed window's next block
//! fetched ahead, and what an instance cut off from the store admits on its
//! partition allowance.

use super::held::Held;
use super::{Charge, FAR_RTT_US, Lease, Leases, MAX_CHARGES};
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::limiter::Limiter;
use crate::metrics::lease::{Fate, LeaseMetrics};
use crate::store::Store;
use std::sync::atomic::Ordering;

impl<S: Store> Limiter<S> {
    /// Whether a store that keeps leases is measured far now (its fetches
    /// take over 20 ms): its hits past a block are then refused here
    /// rather than asked of it. A host too busy to run a fetch's answer
    /// for 20 ms makes a nearby store look far until a faster answer
    /// comes; tests that state a nearby store's bounds ask this.
    pub fn lease_store_far(&self) -> bool {
        self.all_leases().any(|(_, leases, _)| leases.far())
    }
}

impl Leases {
    /// Takes a fetched block `outcome`, taken at `taken_at`, as the one
    /// held (or keeps only what the store said, when it gave none).
    pub(super) fn deposit_block(
        &self,
        lease: &Lease,
        outcome: &Outcome,
        taken_at: UnixMillis,
        metrics: &LeaseMetrics,
    ) {
        let mut held = lease.held.lock();
        held.fetched_at = held.fetched_at.max(Some(taken_at));
        if outcome.leased == 0 {
            // Nothing to hold, but what the store said is known: the
            // window's count and when it resets.
            held.reset_at = taken_at.saturating_add(outcome.reset);
            held.count_after = outcome.after;
            held.limit_index = outcome.limit_index;
            return;
        }
        metrics.record(Fate::Taken, 1, outcome.leased);
        // A block of a window (or bucket) older than the one held: its
        // answer came after the next window's block took over (a round
        // trip across a window's turn). Never merged into the newer one:
        // given back to its own window.
        let windowed = matches!(
            lease.spec,
            Spec::FixedWindow { .. } | Spec::SlidingWindow(_)
        );
        if windowed
            && held.left > 0
            && taken_at < held.taken_at
            && !held.same_period(&lease.spec, taken_at)
        {
            self.lapsed
                .lock()
                .push(lease.unused_block(outcome, taken_at));
            return;
        }
        if let Some(unused) = lease.drop_lapsed(&mut held, taken_at, metrics) {
            self.lapsed.lock().push(unused);
        }
        held.take_block(&lease.spec, outcome, taken_at);
    }

    /// A fixed window's next block, fetched before its window began, is
    /// the one held once it has (what is left of the last one lapses); one
    /// whose window passed unused is given back.
    pub(super) fn promote_next(
        &self,
        lease: &Lease,
        held: &mut Held,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) {
        let Spec::FixedWindow { window, .. } = lease.spec else {
            return;
        };
        let Some((outcome, at)) = held.next else {
            return;
        };
        let (starts, current) = (window.window_start(at), window.window_start(now));
        if starts > current {
            return;
        }
        held.next = None;
        if starts < current {
            self.lapsed.lock().push(lease.unused_block(&outcome, at));
            return;
        }
        if let Some(unused) = lease.drop_lapsed(held, now, metrics) {
            self.lapsed.lock().push(unused);
        }
        held.take_block(&lease.spec, &outcome, at);
        held.fetched_at = Some(now);
    }

    /// The store unreachable and the block spent: `hits` admitted on the
    /// partition allowance while it lasts in this window (to be charged to
    /// the window when the store is back), else refused.
    pub(super) fn on_credit(
        &self,
        lease: &Lease,
        held: &mut Held,
        hits: u64,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> Outcome {
        let Spec::FixedWindow { window, .. } = lease.spec else {
            return held.refused(now);
        };
        let start = UnixMillis(window.window_start(now).saturating_mul(1_000));
        if held.credit_at != start {
            // A new window: what the last one owes waits to be charged.
            if held.uncharged > 0 {
                let charge = Charge {
                    id: lease.id.clone(),
                    spec: lease.spec,
                    hits: std::mem::take(&mut held.uncharged),
                    at: held.credit_at,
                };
                let mut charges = self.charges.lock();
                // Bounded through a long partition: past the bound the
                // oldest windows' charges go (their windows are long over;
                // only the window's total would have told them).
                if charges.len() >= MAX_CHARGES {
                    charges.pop_front();
                }
                charges.push_back(charge);
            }
            held.credit_at = start;
            held.credit_used = 0;
        }
        let used = held.credit_used.saturating_add(hits);
        let reset = std::time::Duration::from_secs(window.reset_secs(now));
        if used > lease.allowance {
            return Outcome {
                reset,
                ..held.refused(now)
            };
        }
        metrics.record(Fate::Credited, 0, hits);
        let before = held.credit_used;
        held.credit_used = used;
        held.uncharged = held.uncharged.saturating_add(hits);
        Outcome {
            over_limit: false,
            remaining: lease.allowance.saturating_sub(used),
            reset,
            counted: true,
            before,
            after: used,
            limit_index: 0,
            leased: 0,
            tat_us: 0,
        }
    }

    /// The store's measured fetch round trip, ms.
    pub(in crate::limiter) fn rtt_ms(&self) -> u64 {
        self.rtt_us.load(Ordering::Relaxed) / 1_000
    }

    /// The store's measured fetch round trip, µs (for `/metrics`).
    pub(crate) fn rtt_us(&self) -> u64 {
        self.rtt_us.load(Ordering::Relaxed)
    }

    /// Whether the store is far: its fetches take over [`FAR_RTT_US`].
    /// The path's own round trip (its floor, [`Leases::observe_rtt`]) is
    /// what makes a store far, not a slow answer: a nearby Redis paused or
    /// queued for a while stays nearby.
    pub(in crate::limiter) fn far(&self) -> bool {
        let floor = self.floor_us.load(Ordering::Relaxed);
        floor != u64::MAX && floor > FAR_RTT_US
    }

    /// Records a round trip to the store (a fetch, or a decision). Blocks
    /// are sized by a slower one at once (they must cover it now), by a
    /// faster one a sixteenth of the way. The floor (the path's own round
    /// trip, what makes the store far) falls to a faster one at once and
    /// at most doubles with a slower one: one stalled answer from a nearby
    /// Redis does not make it far, and a WAN's answers are never fast.
    pub(in crate::limiter) fn observe_rtt(&self, took: std::time::Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .rtt_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |rtt| {
                Some(if sample >= rtt {
                    sample
                } else {
                    rtt - (rtt - sample) / 16
                })
            });
        let _ = self
            .floor_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |floor| {
                Some(if floor == u64::MAX {
                    sample
                } else {
                    sample.min(floor.saturating_mul(2).max(1))
                })
            });
    }

    /// Records whether the store answered (a fetch, a settle, a decision).
    pub(in crate::limiter) fn set_reachable(&self, reachable: bool) {
        self.unreachable.store(!reachable, Ordering::Relaxed);
    }

    /// Keeps `outcome`, a block of the fixed window after the one of
    /// `now`, fetched ahead at `at`, until that window begins.
    pub(super) fn deposit_next(
        &self,
        lease: &Lease,
        outcome: &Outcome,
        at: UnixMillis,
        metrics: &LeaseMetrics,
    ) {
        if outcome.leased == 0 {
            return;
        }
        metrics.record(Fate::Taken, 1, outcome.leased);
        lease.held.lock().next = Some((*outcome, at));
    }
}

/// Whether `spec` counts refused hits too (a sliding window with
/// `count_rejected`): the store must see every hit, so none is refused
/// locally.
pub(super) fn counts_refused(spec: &Spec) -> bool {
    matches!(spec, Spec::SlidingWindow(sw) if sw.count_rejected())
}
