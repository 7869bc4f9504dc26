//! The leases' background work: blocks fetched before they are needed,
//! given back when their descriptor goes quiet or the process stops, and
//! the limiter's handles on it (driven by the server, or by a test).

use super::Leases;
use crate::clock::UnixMillis;
use crate::limiter::Limiter;
use crate::metrics::lease::{Fate, LeaseMetrics};
use crate::store::{Fetch, Op, Store, Unused};
use std::hash::BuildHasher as _;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The background work runs at least this often (quiet descriptors).
const TICK: Duration = Duration::from_millis(250);

impl Leases {
    /// The background work due at `now`: fetches the blocks asked for,
    /// gives back the blocks of quiet descriptors (every block once
    /// closed) and those that lapsed, and forgets idle descriptors.
    /// Returns the blocks fetched and given back.
    pub(super) async fn step<S: Store>(
        &self,
        store: &S,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> usize {
        let closed = self.closed.load(Ordering::Acquire);
        let mut done = 0;
        // Fetches that failed first: a block one took is given back below.
        // While the store cannot settle them it cannot fetch either: none
        // is sent (so the unsettled never pile up).
        let reachable = self.settle(store, metrics).await;
        let wanted = std::mem::take(&mut *self.refills.lock());
        if !wanted.is_empty() {
            let mut fetches = Vec::with_capacity(wanted.len());
            let mut asked = Vec::with_capacity(wanted.len());
            for lease in wanted {
                let want = lease.held.lock().want(lease.cap);
                if want == 0 || closed || !reachable {
                    lease.refilling.store(false, Ordering::Release);
                    continue;
                }
                fetches.push(Fetch {
                    op: Op {
                        id: lease.id.clone(),
                        spec: lease.spec,
                        hits: 0,
                        lease: Some(want),
                    },
                    token: self.token(),
                    forget: Some(lease.answered.swap(0, Ordering::Relaxed)).filter(|&t| t != 0),
                    at: now,
                });
                asked.push(lease);
            }
            if !fetches.is_empty() {
                // A failed fetch leaves requests to ask the store
                // themselves, and is settled by the next step.
                match store.fetch(&fetches).await {
                    Ok(outcomes) => {
                        for ((lease, outcome), fetch) in asked.iter().zip(&outcomes).zip(&fetches) {
                            lease.answered.store(fetch.token, Ordering::Relaxed);
                            self.deposit_block(lease, outcome, now, metrics);
                            done += usize::from(outcome.leased > 0);
                        }
                    }
                    Err(_) => self.unsettled.lock().extend(fetches),
                }
                for lease in &asked {
                    lease.refilling.store(false, Ordering::Release);
                }
            }
        }
        let mut unused = std::mem::take(&mut *self.lapsed.lock());
        for shard in &self.shards {
            let mut forget = false;
            for lease in shard.read().values().flatten() {
                let mut held = lease.held.lock();
                let quiet = held.quiet(now);
                if quiet || closed {
                    unused.extend(lease.take_unused(&mut held, now, metrics));
                }
                forget |= quiet && held.left == 0;
            }
            if forget {
                let mut shard = shard.write();
                let before: usize = shard.values().map(Vec::len).sum();
                shard.retain(|_, all| {
                    all.retain(|lease| {
                        let held = lease.held.lock();
                        held.left > 0 || !held.quiet(now) || lease.refilling.load(Ordering::Acquire)
                    });
                    !all.is_empty()
                });
                let after: usize = shard.values().map(Vec::len).sum();
                self.count.fetch_sub(before - after, Ordering::Relaxed);
            }
        }
        if !unused.is_empty() {
            let (blocks, hits) = (unused.len() as u64, unused.iter().map(|u| u.hits).sum());
            done += unused.len();
            match store.give_back(unused).await {
                Ok(kept) => {
                    let kept_hits: u64 = kept.iter().map(|u| u.hits).sum();
                    let kept_blocks = kept.len() as u64;
                    metrics.record(Fate::GivenBack, blocks - kept_blocks, hits - kept_hits);
                    metrics.record(Fate::Stranded, kept_blocks, kept_hits);
                }
                Err(_) => metrics.record(Fate::Stranded, blocks, hits),
            }
        }
        done
    }

    /// Settles the fetches that failed: a block one took after all joins
    /// the lapsed ones, to be given back. Whether the store answered (or
    /// there was nothing to settle).
    async fn settle<S: Store>(&self, store: &S, metrics: &LeaseMetrics) -> bool {
        let pending = std::mem::take(&mut *self.unsettled.lock());
        if pending.is_empty() {
            return true;
        }
        match store.settle(pending.clone()).await {
            Ok(found) => {
                let mut lapsed = self.lapsed.lock();
                for (fetch, outcome) in found.into_iter().filter(|(_, o)| o.leased > 0) {
                    metrics.record(Fate::Taken, 1, outcome.leased);
                    lapsed.push(Unused {
                        id: fetch.op.id,
                        spec: fetch.op.spec,
                        hits: outcome.leased,
                        taken_at: fetch.at,
                        tat_us: outcome.tat_us,
                    });
                }
                true
            }
            Err(_) => {
                self.unsettled.lock().extend(pending);
                false
            }
        }
    }

    /// A token for a fetch: unique to it, whatever instance sends it;
    /// never 0 (a lease's "no fetch answered").
    fn token(&self) -> u64 {
        let (seed, next) = &self.tokens;
        seed.hash_one(next.fetch_add(1, Ordering::Relaxed)).max(1)
    }

    /// Stops taking blocks: from now on requests ask the store without
    /// one, and the next [`Leases::step`] gives back every block held.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether a background fetch is asked for or under way.
    pub(super) fn refilling(&self) -> bool {
        self.shards.iter().any(|shard| {
            shard
                .read()
                .values()
                .flatten()
                .any(|l| l.refilling.load(Ordering::Acquire))
        })
    }
}

impl<S: Store> Limiter<S> {
    /// The leases' background work due now (by the limiter's clock):
    /// fetches the blocks that run low, gives back those of quiet
    /// descriptors and those that lapsed. Returns how many blocks were
    /// fetched or given back. The server runs it ([`Limiter::run_leases`]);
    /// tests call it to choose when it happens.
    pub async fn lease_step(&self) -> usize {
        match &self.leases {
            Some(leases) => {
                leases
                    .step(&self.store, self.clock.now(), &self.metrics.lease)
                    .await
            }
            None => 0,
        }
    }

    /// Runs [`Limiter::lease_step`] whenever a block runs low, and every
    /// 250 ms, until `shutdown`. Returns at once on a store without leases.
    pub async fn run_leases(&self, shutdown: CancellationToken) {
        let Some(leases) = &self.leases else {
            return;
        };
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = leases.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            self.lease_step().await;
        }
    }

    /// Takes no more blocks and gives back every unused hit of the blocks
    /// held (at shutdown, once requests have drained), after any fetch
    /// under way has landed (waiting at most a second for it).
    pub async fn give_back_leases(&self) {
        let Some(leases) = &self.leases else {
            return;
        };
        leases.close();
        // Fetches asked for are dropped; one under way (the background
        // task's) lands before its block is given back.
        self.lease_step().await;
        for _ in 0..100 {
            if !leases.refilling() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.lease_step().await;
    }
}
