//! Leased quotas (`lease: true`, on Redis): an instance takes a block of
//! hits from the store in one atomic operation (counted there at once, so
//! spent for every other instance) and admits locally against it, fetching
//! the next block in the background before this one runs out.
//!
//! Only the background fetch takes blocks, never a request's own store
//! call: a caller may give up on a request (Envoy's filter does at its
//! timeout) or its deadline may pass while Redis is slow, after Redis has
//! counted what the call asked for. A block taken there would be held by
//! no one until its window ends, and a slow Redis could strand one per
//! request until the window's quota was gone. The fetch waits for Redis up
//! to the store's own timeout whatever callers do.
//!
//! Why it never over-admits: every hit admitted from a block was counted
//! in the store before it was admitted, in the window or bucket it is
//! admitted in. So a block is usable only while that holds:
//!
//! - fixed window: within the window it was taken in;
//! - sliding window: within the bucket of every series it was counted in
//!   (a hit is exact to its bucket, as without leases);
//! - GCRA: while the theoretical arrival time (TAT) the block left, less
//!   the block's unused cells, is still ahead of now. Then the bucket has
//!   not emptied since the block was taken, and cells admitted later than
//!   they were counted are as conforming as if they arrived in order. A
//!   block that lapses is stranded: the store has already let it drain.
//!
//! Under-admission is bounded: the store gives a block at most half of
//! what remains after the request's own hits (so the last hits of a window
//! go one at a time) and at most `requests_per_unit / 16`; an instance
//! holds at most one block and the one being fetched. Unused hits are
//! given back to the window or bucket they came from when the descriptor
//! goes quiet and at shutdown.
//!
//! Across a WAN (a store whose measured fetch round trip is over
//! [`FAR_RTT_US`]), the round trip stays off the request path: blocks are
//! sized by it ([`held::Held::want`]), a fixed window's next block is
//! fetched before its window begins, and a hit its block cannot take in a
//! window the store has answered for is refused locally instead of asking
//! the store (under-admission while the next block travels, never
//! over-admission). With `partition_allowance` (leased fixed windows),
//! an instance cut off from the store admits up to its allowance per
//! window on its own once its blocks run out, and charges those hits to
//! the window's counter when the store is back.

use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::metrics::lease::{Fate, LeaseMetrics};
use crate::store::{CounterId, Fetch, Unused};
use far::counts_refused;
use held::Held;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

mod far;
mod held;
mod step;
#[cfg(test)]
mod tests;

/// Lock shards of the table: descriptors on different shards never meet.
const SHARDS: usize = 16;
/// A block is at most the limit divided by this.
pub(crate) const CAP_DIVISOR: u64 = 16;
/// Most descriptors with lease state at once; past it, new ones are
/// decided in the store as without a lease (refused hits still uncounted).
const MAX_LEASES: usize = 65_536;
/// A GCRA block is given back only while it stays valid this much longer
/// (the give-back's own round trip); else it is stranded.
const GCRA_GIVE_BACK_MARGIN_US: u64 = 1_000_000;
/// Charges of ended windows kept while the store is unreachable, at most
/// (one per leased descriptor and window cut off).
const MAX_CHARGES: usize = MAX_LEASES;
/// A store whose block fetches take longer than this is far (across a
/// WAN): hits are not sent there on the request path when its state in the
/// window is known. A Redis nearby answers in well under a millisecond, and
/// within a few even behind a busy instance's own requests; 20 ms is past
/// that and past Envoy's default rate-limit call timeout, so a hit sent
/// there would be answered by the caller's own timeout anyway. A host so
/// loaded that a fetch's answer waits 20 ms for a thread makes a nearby
/// store look far too, until a faster answer: hits past a block are then
/// refused (under-admission, never over).
pub(crate) const FAR_RTT_US: u64 = 20_000;

/// The lease state of one leased operation of one descriptor.
#[derive(Debug)]
pub(super) struct Lease {
    id: CounterId,
    spec: Spec,
    /// The largest block (`requests_per_unit / 16`).
    cap: u64,
    /// `partition_allowance`: hits per window admitted on the instance's
    /// own while the store is unreachable (0: none).
    allowance: u64,
    /// A background fetch is asked for or under way.
    refilling: AtomicBool,
    /// The token of the last fetch answered (0: none): its fence is no
    /// longer needed, and the next fetch removes it.
    answered: AtomicU64,
    held: Mutex<Held>,
}

/// What the table says for one hit.
#[derive(Debug)]
pub(super) enum Admit {
    /// Admitted from the block held, taken at the instant given (it names
    /// the window or bucket the hits were counted in).
    Local(Outcome, UnixMillis),
    /// Ask the store for the hits alone: too few left in the block held
    /// (the background fetch is asked for the next), or the table is full
    /// or closed.
    Store,
    /// Answered here without a block: refused (a far store's window known
    /// to be spent, or the partition allowance spent), or admitted on the
    /// partition allowance (charged to the store when it is back).
    Answered(Outcome),
}

/// Hits admitted on the partition allowance, to charge to the window of
/// `at` once the store is back.
#[derive(Debug, Clone)]
pub(super) struct Charge {
    pub(super) id: CounterId,
    pub(super) spec: Spec,
    pub(super) hits: u64,
    pub(super) at: UnixMillis,
}

/// Callers choose the descriptors: a keyed hash, and a fast one (looked
/// up on every leased hit).
type LeaseHash = foldhash::fast::RandomState;

/// The leases of the descriptors of one shard: per counter, one per
/// leased operation.
type Shard = RwLock<HashMap<CounterId, Vec<Arc<Lease>>, LeaseHash>>;

/// Every lease of one limiter.
#[derive(Debug)]
pub(super) struct Leases {
    shards: [Shard; SHARDS],
    hasher: LeaseHash,
    count: AtomicUsize,
    /// Leases whose block runs low: fetched by the next [`Leases::step`].
    refills: Mutex<Vec<Arc<Lease>>>,
    /// Blocks that lapsed on the request path, to give back.
    lapsed: Mutex<Vec<Unused>>,
    /// Woken when a refill is asked for.
    pub(super) wake: tokio::sync::Notify,
    closed: AtomicBool,
    /// Fetches that failed, to settle ([`crate::store::Store::settle`]).
    unsettled: Mutex<Vec<Fetch>>,
    /// Give-backs the store did not answer, with when each was first sent:
    /// sent again under their tokens.
    returning: Mutex<Vec<(Unused, std::time::Instant)>>,
    /// Each fetch's token: unique to it among every instance's.
    tokens: (std::hash::RandomState, AtomicU64),
    /// The store's block fetches' round trip, µs: rises at once with a
    /// slower fetch, falls slowly.
    rtt_us: AtomicU64,
    /// The path's own round trip, µs (`u64::MAX`: none measured yet).
    floor_us: AtomicU64,
    /// The store did not answer the last fetch, settle or decision.
    unreachable: AtomicBool,
    /// Partition-allowance hits of windows ended before they were
    /// charged (those of a lease's current window wait in its block).
    charges: Mutex<std::collections::VecDeque<Charge>>,
}

impl Default for Leases {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::default()),
            hasher: LeaseHash::default(),
            count: AtomicUsize::new(0),
            refills: Mutex::default(),
            lapsed: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            closed: AtomicBool::new(false),
            unsettled: Mutex::default(),
            returning: Mutex::default(),
            tokens: (std::hash::RandomState::new(), AtomicU64::new(0)),
            rtt_us: AtomicU64::new(0),
            floor_us: AtomicU64::new(u64::MAX),
            unreachable: AtomicBool::new(false),
            charges: Mutex::default(),
        }
    }
}

/// The lease of `id`'s operation `spec` in its shard's map, if any.
fn find<'m>(
    map: &'m HashMap<CounterId, Vec<Arc<Lease>>, LeaseHash>,
    id: &CounterId,
    spec: Spec,
) -> Option<&'m Arc<Lease>> {
    map.get(id)?.iter().find(|l| l.spec == spec)
}

/// The largest block of a leased operation; 0 for algorithms without
/// leases.
pub(crate) fn cap_of(spec: &Spec) -> u64 {
    let limit = match spec {
        Spec::FixedWindow { limit, .. } => *limit,
        Spec::SlidingWindow(sw) => sw.limits().iter().map(|&(l, _)| l).min().unwrap_or(0),
        Spec::Gcra(g) => g.limit().min(g.burst()),
        Spec::SlidingLog(_) | Spec::Concurrency(_) => 0,
    };
    limit / CAP_DIVISOR
}

impl Lease {
    /// A window's whole block `outcome`, taken at `at` and never used
    /// (fetched ahead, or answered after its window turned), to give back
    /// to that window.
    fn unused_block(&self, outcome: &Outcome, at: UnixMillis) -> Unused {
        Unused {
            id: self.id.clone(),
            spec: self.spec,
            hits: outcome.leased,
            taken_at: at,
            tat_us: 0,
            token: 0,
        }
    }

    /// Takes the unused hits out of a block that can no longer be used at
    /// `now`: to give back (windows) or stranded (GCRA, counted at once).
    fn drop_lapsed(
        &self,
        held: &mut Held,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> Option<Unused> {
        if held.left == 0 || held.usable(&self.spec, now, 0) {
            return None;
        }
        self.take_unused(held, now, metrics)
    }

    /// Takes every unused hit out of the block held at `now`: to give back
    /// to its window or bucket. A GCRA block comes back only while it stays
    /// usable long enough for the give-back to land, and only the cells of
    /// the last block taken (the store takes them only while that block is
    /// still the top of the bucket); the rest is stranded.
    fn take_unused(
        &self,
        held: &mut Held,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> Option<Unused> {
        let gcra = matches!(self.spec, Spec::Gcra(_));
        let fits = !gcra || held.usable(&self.spec, now, GCRA_GIVE_BACK_MARGIN_US);
        let hits = std::mem::take(&mut held.left);
        if hits == 0 {
            return None;
        }
        if !fits {
            metrics.record(Fate::Stranded, 1, hits);
            return None;
        }
        let back = if gcra { hits.min(held.block) } else { hits };
        if back < hits {
            metrics.record(Fate::Stranded, 0, hits - back);
        }
        Some(Unused {
            id: self.id.clone(),
            spec: self.spec,
            hits: back,
            taken_at: held.taken_at,
            tat_us: held.tat_us,
            // Named when it is sent.
            token: 0,
        })
    }
}

impl Leases {
    fn shard(&self, id: &CounterId) -> &Shard {
        let [first, ..] = &self.shards;
        let at = usize::try_from(self.hasher.hash_one(id) % SHARDS as u64).unwrap_or(0);
        self.shards.get(at).unwrap_or(first)
    }

    /// Admits `hits` on `id`'s operation `spec` from the block held, or
    /// says what to ask the store.
    pub(super) fn admit(
        &self,
        id: &CounterId,
        spec: Spec,
        hits: u64,
        allowance: u64,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> Admit {
        if self.closed.load(Ordering::Relaxed) {
            return Admit::Store;
        }
        {
            let shard = self.shard(id).read();
            if let Some(lease) = find(&shard, id, spec) {
                return self.admit_on(lease, hits, now, metrics);
            }
        }
        if self.count.load(Ordering::Relaxed) >= MAX_LEASES {
            return Admit::Store;
        }
        let mut shard = self.shard(id).write();
        let all = shard.entry(id.clone()).or_default();
        let lease = match all.iter().find(|l| l.spec == spec) {
            Some(lease) => Arc::clone(lease),
            None => {
                let lease = Arc::new(Lease {
                    id: id.clone(),
                    spec,
                    cap: cap_of(&spec),
                    allowance,
                    refilling: AtomicBool::new(false),
                    answered: AtomicU64::new(0),
                    held: Mutex::default(),
                });
                all.push(Arc::clone(&lease));
                self.count.fetch_add(1, Ordering::Relaxed);
                lease
            }
        };
        drop(shard);
        self.admit_on(&lease, hits, now, metrics)
    }

    fn admit_on(
        &self,
        lease: &Arc<Lease>,
        hits: u64,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> Admit {
        let mut held = lease.held.lock();
        held.note(hits, now);
        self.promote_next(lease, &mut held, now, metrics);
        if let Some(unused) = lease.drop_lapsed(&mut held, now, metrics) {
            self.lapsed.lock().push(unused);
        }
        let want = held.want(lease.cap, self.rtt_ms(), self.far());
        if held.left < hits {
            // The hits go to the store alone (or are answered here); the
            // background fetch takes the next block (one at a time per
            // lease, so an instance never holds more than one block and the
            // one being fetched).
            let answered = if self.unreachable.load(Ordering::Relaxed) && lease.allowance > 0 {
                Some(self.on_credit(lease, &mut held, hits, now, metrics))
            } else if self.far() && held.warm(&lease.spec, now) && !counts_refused(&lease.spec) {
                Some(held.refused(now))
            } else {
                None
            };
            drop(held);
            self.ask_refill(lease, want);
            return answered.map_or(Admit::Store, Admit::Answered);
        }
        let outcome = held.admitted(held.left, hits, now);
        let taken_at = held.taken_at;
        held.left -= hits;
        // The next block is fetched while a whole block's worth is left,
        // so it lands before this one is spent.
        let low = held.left <= want;
        drop(held);
        if low {
            self.ask_refill(lease, want);
        }
        Admit::Local(outcome, taken_at)
    }

    /// Asks the background fetch for `lease`'s next block of up to `want`,
    /// unless one is asked for or under way already.
    fn ask_refill(&self, lease: &Arc<Lease>, want: u64) {
        if want > 0 && !lease.refilling.swap(true, Ordering::AcqRel) {
            self.refills.lock().push(Arc::clone(lease));
            self.wake.notify_one();
        }
    }

    /// Puts back `hits` admitted from `id`'s block taken at `taken_at`, for
    /// a request that was then refused as a whole
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`). They go back into the
    /// block held only while it belongs to the same window or bucket (the
    /// window may have turned while the request was in flight, and a newer
    /// block was taken): else to the store, given back to the window they
    /// were counted in, as a lapsed block's are. A GCRA block's cells go
    /// back into the block held, whose TAT is the newest: they stay usable
    /// only while it says so.
    pub(super) fn restore(&self, id: &CounterId, spec: Spec, hits: u64, taken_at: UnixMillis) {
        let shard = self.shard(id).read();
        if let Some(lease) = find(&shard, id, spec) {
            let mut held = lease.held.lock();
            if matches!(spec, Spec::Gcra(_)) || held.same_period(&spec, taken_at) {
                held.left = held.left.saturating_add(hits);
                return;
            }
        }
        if matches!(spec, Spec::Gcra(_)) {
            // The lease is gone, and its TAT with it: nothing to compare a
            // give-back against. The cells drain with the bucket.
            return;
        }
        self.lapsed.lock().push(Unused {
            id: id.clone(),
            spec,
            hits,
            taken_at,
            tat_us: 0,
            token: 0,
        });
    }

    /// What a hit of `hits` on `id`'s operation `spec` would be answered
    /// from the block held at `now`, without taking it (for `/explain`),
    /// and the hits the block holds; `None` without a usable block.
    pub(super) fn peek(
        &self,
        id: &CounterId,
        spec: Spec,
        hits: u64,
        now: UnixMillis,
    ) -> Option<(Option<Outcome>, u64)> {
        let shard = self.shard(id).read();
        let lease = find(&shard, id, spec)?;
        let held = lease.held.lock();
        if held.left == 0 || !held.usable(&spec, now, 0) {
            return None;
        }
        let admitted = (hits > 0 && held.left >= hits).then(|| held.admitted(held.left, hits, now));
        Some((admitted, held.left))
    }
}
