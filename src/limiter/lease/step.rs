//! The leases' background work: blocks fetched before they are needed,
//! given back when their descriptor goes quiet or the process stops, and
//! the limiter's handles on it (driven by the server, or by a test).

use super::{Charge, Leases};
use crate::algorithm::Spec;
use crate::clock::UnixMillis;
use crate::limiter::Limiter;
use crate::metrics::lease::{Fate, LeaseMetrics};
use crate::store::Batch;
use crate::store::{Fetch, Op, Store, Unused};
use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The background work runs at least this often (quiet descriptors).
const TICK: Duration = Duration::from_millis(250);
/// A give-back is sent again only this long after it was first sent: its
/// fence, which keeps Redis from running it twice, lives at least as long
/// after it ran (`FENCE_TTL_MS` in the Redis store).
const FENCE_TTL: Duration = Duration::from_secs(30);
/// At shutdown, what the store left unanswered is asked again this many
/// times at most, [`RETRY_PAUSE`] apart (a Redis frozen for a second or
/// two, restarting, failing over).
const RETRIES_AT_SHUTDOWN: usize = 20;
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// A fixed window's next block is fetched at most this long before the
/// window begins: the Redis key it makes lives a second longer than a
/// window's (`ttl` of a leased operation), so it outlives its window.
const AHEAD_MAX_MS: u64 = 900;

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
        let (rtt_ms, far) = (self.rtt_ms(), self.far());
        let wanted = std::mem::take(&mut *self.refills.lock());
        if !wanted.is_empty() {
            let mut fetches = Vec::with_capacity(wanted.len());
            let mut asked = Vec::with_capacity(wanted.len());
            for lease in wanted {
                let want = lease.held.lock().want(lease.cap, rtt_ms, far);
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
                let started = Instant::now();
                let fetched = store.fetch(&fetches).await;
                self.set_reachable(fetched.is_ok());
                match fetched {
                    Ok(outcomes) => {
                        self.observe_rtt(started.elapsed());
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
        if reachable && !closed && self.far() {
            done += self.fetch_ahead(store, now, metrics).await;
        }
        if reachable {
            // Also the probe that finds the store back after a partition.
            self.charge(store, metrics).await;
        }
        let mut unused = std::mem::take(&mut *self.lapsed.lock());
        for shard in &self.shards {
            let mut forget = false;
            for lease in shard.read().values().flatten() {
                let mut held = lease.held.lock();
                let quiet = held.quiet(now);
                if quiet || closed {
                    unused.extend(lease.take_unused(&mut held, now, metrics));
                    // A next window's block fetched ahead goes back too.
                    if let Some((outcome, at)) = held.next.take() {
                        unused.push(lease.unused_block(&outcome, at));
                    }
                }
                forget |= quiet && held.left == 0;
            }
            if forget {
                let mut shard = shard.write();
                let before: usize = shard.values().map(Vec::len).sum();
                shard.retain(|_, all| {
                    all.retain(|lease| {
                        let held = lease.held.lock();
                        // Hits to charge keep it too, until charged.
                        held.left > 0
                            || held.uncharged > 0
                            || !held.quiet(now)
                            || lease.refilling.load(Ordering::Acquire)
                    });
                    !all.is_empty()
                });
                let after: usize = shard.values().map(Vec::len).sum();
                self.count.fetch_sub(before - after, Ordering::Relaxed);
            }
        }
        if !unused.is_empty() || !self.returning.lock().is_empty() {
            done += unused.len();
            self.give_back(store, unused, metrics).await;
        }
        done
    }

    /// A far store's fixed windows: the next window's block of each busy
    /// lease fetched before that window begins (counted there), so the
    /// first hits of a window never wait for a round trip. Fetched once
    /// the window ends within a tick, two round trips and a block's span
    /// (at most [`AHEAD_MAX`] ahead: a key made early lives that much
    /// longer). Returns the blocks fetched.
    async fn fetch_ahead<S: Store>(
        &self,
        store: &S,
        now: UnixMillis,
        metrics: &LeaseMetrics,
    ) -> usize {
        let rtt_ms = self.rtt_ms();
        let lead = u64::try_from(TICK.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(rtt_ms.saturating_mul(2))
            .saturating_add(super::held::SPAN_MS)
            .min(AHEAD_MAX_MS);
        let mut ahead = Vec::new();
        for shard in &self.shards {
            for lease in shard.read().values().flatten() {
                let Spec::FixedWindow { window, .. } = lease.spec else {
                    continue;
                };
                let held = lease.held.lock();
                let ends = now
                    .as_secs()
                    .saturating_add(window.reset_secs(now))
                    .saturating_mul(1_000);
                let want = held.want(lease.cap, rtt_ms, true);
                if held.next.is_none()
                    && want > 0
                    && !held.quiet(now)
                    && ends.saturating_sub(now.0) <= lead
                {
                    ahead.push((Arc::clone(lease), want, UnixMillis(ends)));
                }
            }
        }
        if ahead.is_empty() {
            return 0;
        }
        // One round trip for every lease's next block.
        let fetches: Vec<Fetch> = ahead
            .iter()
            .map(|(lease, want, at)| Fetch {
                op: Op {
                    id: lease.id.clone(),
                    spec: lease.spec,
                    hits: 0,
                    lease: Some(*want),
                },
                token: self.token(),
                forget: None,
                at: *at,
            })
            .collect();
        let mut done = 0;
        match store.fetch(&fetches).await {
            Ok(outcomes) => {
                for ((lease, _, at), outcome) in ahead.iter().zip(&outcomes) {
                    self.deposit_next(lease, outcome, *at, metrics);
                    done += usize::from(outcome.leased > 0);
                }
            }
            Err(_) => {
                self.set_reachable(false);
                self.unsettled.lock().extend(fetches);
            }
        }
        done
    }

    /// Charges the hits admitted on partition allowances to their windows'
    /// counters, now that the store answers again: those of windows ended
    /// and those of each lease's current one. A charge the store does not
    /// answer is kept for the next step (one whose answer was lost may be
    /// charged twice: counted more, never admitted more).
    async fn charge<S: Store>(&self, store: &S, metrics: &LeaseMetrics) {
        let mut due = std::mem::take(&mut *self.charges.lock());
        for shard in &self.shards {
            for lease in shard.read().values().flatten() {
                let mut held = lease.held.lock();
                if held.uncharged > 0 {
                    due.push_back(Charge {
                        id: lease.id.clone(),
                        spec: lease.spec,
                        hits: std::mem::take(&mut held.uncharged),
                        at: held.credit_at,
                    });
                }
            }
        }
        let mut left = Vec::new();
        for charge in due {
            let batch = Batch {
                ops: vec![Op {
                    id: charge.id.clone(),
                    spec: charge.spec,
                    hits: charge.hits,
                    lease: None,
                }],
                stop_when_over: false,
            };
            if left.is_empty() && store.execute(batch, charge.at).await.is_ok() {
                metrics.record(Fate::Charged, 1, charge.hits);
                self.set_reachable(true);
            } else {
                left.push(charge);
            }
        }
        if !left.is_empty() {
            self.set_reachable(false);
            self.charges.lock().extend(left);
        }
    }

    /// Gives back `unused` (each named by a token of its own, unless it
    /// has one) and the give-backs the store left unanswered before (sent
    /// again under their tokens: Redis runs each once). Each block's fate
    /// is counted once the store answers for it; one still unanswered
    /// [`FENCE_TTL`] after it was first sent is counted stranded, and never
    /// sent again (its fence may have expired: sent again, it could run
    /// twice).
    async fn give_back<S: Store>(&self, store: &S, unused: Vec<Unused>, metrics: &LeaseMetrics) {
        let started = Instant::now();
        let mut first_sent: HashMap<u64, Instant> = HashMap::new();
        let mut all = Vec::with_capacity(unused.len());
        for (u, sent) in std::mem::take(&mut *self.returning.lock()) {
            if started.saturating_duration_since(sent) >= FENCE_TTL {
                metrics.record(Fate::Stranded, 1, u.hits);
                continue;
            }
            first_sent.insert(u.token, sent);
            all.push(u);
        }
        for mut u in unused {
            if u.token == 0 {
                u.token = self.token();
            }
            all.push(u);
        }
        let given = store.give_back(all).await;
        let sum = |all: &[Unused]| (all.len() as u64, all.iter().map(|u| u.hits).sum());
        let (blocks, hits) = sum(&given.back);
        metrics.record(Fate::GivenBack, blocks, hits);
        let (blocks, hits) = sum(&given.kept);
        metrics.record(Fate::Stranded, blocks, hits);
        self.returning
            .lock()
            .extend(given.unanswered.into_iter().map(|u| {
                let sent = first_sent.get(&u.token).copied().unwrap_or(started);
                (u, sent)
            }));
    }

    /// Settles the fetches that failed: a block one took after all joins
    /// the lapsed ones, to be given back under the fetch's token. Whether
    /// the store answered for all of them (or there was nothing to
    /// settle).
    async fn settle<S: Store>(&self, store: &S, metrics: &LeaseMetrics) -> bool {
        let pending = std::mem::take(&mut *self.unsettled.lock());
        if pending.is_empty() {
            return true;
        }
        let settled = store.settle(pending).await;
        {
            let mut lapsed = self.lapsed.lock();
            for (fetch, outcome) in settled.found.into_iter().filter(|(_, o)| o.leased > 0) {
                metrics.record(Fate::Taken, 1, outcome.leased);
                lapsed.push(Unused {
                    id: fetch.op.id,
                    spec: fetch.op.spec,
                    hits: outcome.leased,
                    taken_at: fetch.at,
                    tat_us: outcome.tat_us,
                    token: fetch.token,
                });
            }
        }
        let reachable = settled.unanswered.is_empty();
        self.set_reachable(reachable);
        self.unsettled.lock().extend(settled.unanswered);
        reachable
    }

    /// Whether fetches wait to be settled or give-backs to be answered.
    fn unresolved(&self) -> bool {
        !self.unsettled.lock().is_empty() || !self.returning.lock().is_empty()
    }

    /// At shutdown, once the store has been asked all it can be: the
    /// give-backs it never answered are counted stranded (an upper bound:
    /// some may have landed), and forgotten with the unsettled fetches.
    fn abandon(&self, metrics: &LeaseMetrics) {
        for (u, _) in std::mem::take(&mut *self.returning.lock()) {
            metrics.record(Fate::Stranded, 1, u.hits);
        }
        self.unsettled.lock().clear();
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
    /// The leases' background work due now (by the limiter's clock), on
    /// every store that keeps leases at once: fetches the blocks that run
    /// low, gives back those of quiet descriptors and those that lapsed.
    /// Returns how many blocks were fetched or given back. The server runs
    /// it ([`Limiter::run_leases`]); tests call it to choose when it
    /// happens.
    pub async fn lease_step(&self) -> usize {
        let now = self.clock.now();
        let steps = self
            .all_leases()
            .map(|(store, leases, _)| leases.step(store, now, &self.metrics.lease));
        futures_util::future::join_all(steps)
            .await
            .into_iter()
            .sum()
    }

    /// Runs each store's leases' work whenever one of its blocks runs
    /// low, and every 250 ms, until `shutdown`: one loop per store, so a
    /// store far away never delays the fetches of one nearby. Returns at
    /// once when no store keeps leases.
    pub async fn run_leases(&self, shutdown: CancellationToken) {
        let loops = self.all_leases().map(|(store, leases, at)| {
            let shutdown = shutdown.clone();
            let stats = self.metrics.stores.get(at);
            async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = leases.wake.notified() => {}
                        () = tokio::time::sleep(TICK) => {}
                    }
                    leases
                        .step(store, self.clock.now(), &self.metrics.lease)
                        .await;
                    if let Some(stats) = stats {
                        stats
                            .lease_round_trip_us
                            .store(leases.rtt_us(), std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        });
        futures_util::future::join_all(loops).await;
    }

    /// Takes no more blocks and gives back every unused hit of the blocks
    /// held (at shutdown, once requests have drained), after any fetch
    /// under way has landed (waiting at most a second for it), on every
    /// store at once.
    pub async fn give_back_leases(&self) {
        let all = self.all_leases().map(|(store, leases, _)| async move {
            leases.close();
            let step = || leases.step(store, self.clock.now(), &self.metrics.lease);
            // Fetches asked for are dropped; one under way (the background
            // task's) lands before its block is given back.
            step().await;
            for _ in 0..100 {
                if !leases.refilling() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            step().await;
            // Give-backs and settles the store did not answer (Redis frozen
            // or restarting as the process stops) are sent again for a
            // while.
            for _ in 0..RETRIES_AT_SHUTDOWN {
                if !leases.unresolved() {
                    break;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                step().await;
            }
            leases.abandon(&self.metrics.lease);
        });
        futures_util::future::join_all(all).await;
    }
}
