//! The stores a limiter counts in besides its own (`STORES_FILE`, and
//! `local`): each limit's operations go to the store its rule names
//! (`store: NAME`), a request's operations on several stores are sent to
//! all of them at once, and a store that fails answers by its own
//! `failure_mode` for the limits on it alone.

use super::lease::Leases;
use super::plan::{Pending, Plan, failure_outcome};
use super::stage::Work;
use super::{FailureMode, LimitError, Limiter};
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::metrics::store::NamedStoreStats;
use crate::store::{Batch, CounterId, Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The name of the process-wide store.
pub const DEFAULT_STORE: &str = "default";

/// A store rules name, with what the limiter keeps for it.
#[derive(Debug)]
pub(super) struct Named<S> {
    pub(super) name: Arc<str>,
    pub(super) store: S,
    /// Blocks of its leased limits, when it keeps leases.
    pub(super) leases: Option<Leases>,
    /// Its `failure_mode` (else `FAILURE_MODE`'s).
    pub(super) failure_mode: Option<FailureMode>,
}

/// One store of a limiter, as the decision sees it.
#[derive(Debug)]
pub(super) struct StoreRef<'a, S> {
    pub(super) store: &'a S,
    pub(super) leases: Option<&'a Leases>,
    pub(super) failure_mode: FailureMode,
    pub(super) stats: Option<&'a NamedStoreStats>,
}

impl<S> Clone for StoreRef<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for StoreRef<'_, S> {}

/// A store to add to a limiter ([`Limiter::with_stores`]).
#[derive(Debug)]
pub struct StoreEntry<S> {
    /// The name rules give it (`store: NAME`).
    pub name: Arc<str>,
    /// The store.
    pub store: S,
    /// Its `failure_mode`; `None`: `FAILURE_MODE`'s.
    pub failure_mode: Option<FailureMode>,
}

impl<S: Store> Limiter<S> {
    /// Counts the limits whose rules name a store (`store: NAME`) in
    /// `stores`: the `i`-th is the store at place `i + 1` (rules are
    /// loaded with the same places, [`crate::config::StoreInfo`]).
    #[must_use]
    pub fn with_stores(mut self, stores: Vec<StoreEntry<S>>) -> Self {
        self.metrics
            .stores
            .name_all(stores.iter().map(|s| Arc::clone(&s.name)));
        self.others = stores
            .into_iter()
            .map(|entry| Named {
                leases: entry.store.leases().then(Leases::default),
                name: entry.name,
                store: entry.store,
                failure_mode: entry.failure_mode,
            })
            .collect();
        self
    }

    /// The store at place `at` (0: the limiter's own), or `None`.
    pub(super) fn store_at(&self, at: u8) -> Option<StoreRef<'_, S>> {
        if at == 0 {
            return Some(StoreRef {
                store: &self.store,
                leases: self.leases.as_ref(),
                failure_mode: self.options.failure_mode,
                stats: self.metrics.stores.get(0),
            });
        }
        let named = self.others.get(usize::from(at) - 1)?;
        Some(StoreRef {
            store: &named.store,
            leases: named.leases.as_ref(),
            failure_mode: named.failure_mode.unwrap_or(self.options.failure_mode),
            stats: self.metrics.stores.get(at),
        })
    }

    /// The name of the store at place `at`.
    pub(crate) fn store_name(&self, at: u8) -> &str {
        match at {
            0 => DEFAULT_STORE,
            _ => self
                .others
                .get(usize::from(at) - 1)
                .map_or(DEFAULT_STORE, |n| &n.name),
        }
    }

    /// Every store but the limiter's own, with its name and place.
    pub fn named_stores(&self) -> impl Iterator<Item = (u8, &str, &S)> {
        self.others
            .iter()
            .zip(1u8..)
            .map(|(n, at)| (at, &*n.name, &n.store))
    }

    /// Every store's leases, with the store that keeps them.
    pub(super) fn all_leases(&self) -> impl Iterator<Item = (&S, &Leases, u8)> {
        std::iter::once((&self.store, self.leases.as_ref()))
            .chain(self.others.iter().map(|n| (&n.store, n.leases.as_ref())))
            .zip(0u8..)
            .filter_map(|((store, leases), at)| Some((store, leases?, at)))
    }

    /// Reads `batch` without counting ([`Store::peek`]), each operation on
    /// the store at its place in `at` (one per operation), the outcomes
    /// in the batch's order.
    ///
    /// # Errors
    ///
    /// The first store that cannot be read.
    pub(super) async fn peek_routed(
        &self,
        batch: &Batch,
        at: &[u8],
        now: UnixMillis,
    ) -> Result<Vec<Outcome>, StoreError> {
        if at.iter().all(|&a| a == 0) {
            return self.store.peek(batch, now).await;
        }
        let mut places: Vec<u8> = at.to_vec();
        places.sort_unstable();
        places.dedup();
        let mut answers: Vec<(u8, std::vec::IntoIter<Outcome>)> = Vec::new();
        for place in places {
            let part = Batch {
                ops: batch
                    .ops
                    .iter()
                    .zip(at)
                    .filter(|&(_, &a)| a == place)
                    .map(|(op, _)| op.clone())
                    .collect(),
                stop_when_over: batch.stop_when_over,
            };
            let store = self
                .store_at(place)
                .ok_or(StoreError::Config {
                    reason: "a rule names a store this instance does not have",
                })?
                .store;
            answers.push((place, store.peek(&part, now).await?.into_iter()));
        }
        Ok(at
            .iter()
            .filter_map(|a| {
                answers
                    .iter_mut()
                    .find(|(place, _)| place == a)
                    .and_then(|(_, outcomes)| outcomes.next())
            })
            .collect())
    }
}

/// The store stage: each store asked for its part of a request.
impl<S: Store> Limiter<S> {
    /// Sends the batch (if any) in one round trip, by `deadline`: each
    /// sent slot gets its outcome, or the failure policy's answer. With
    /// operations on several stores, every store is asked at once; each
    /// store's part is refused as a whole on its own
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), and a store that fails
    /// answers by its own `failure_mode` for its limits alone.
    ///
    /// # Errors
    ///
    /// [`LimitError::Store`] when a store fails and its policy is `error`.
    pub(super) async fn ask_store(
        &self,
        work: &mut Work,
        plans: &[Plan<'_>],
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> Result<(), LimitError> {
        if work.more.is_empty() {
            if work.batch.is_empty() {
                return Ok(());
            }
            let batch = std::mem::take(&mut work.batch);
            let (ids, result) = self.call(0, batch, now, deadline).await;
            return self.take_answers(work, plans, 0, &ids, result, now);
        }
        let mut parts = std::mem::take(&mut work.more);
        if !work.batch.is_empty() {
            parts.push((0, std::mem::take(&mut work.batch)));
        }
        let calls = parts
            .into_iter()
            .map(|(at, batch)| async move { (at, self.call(at, batch, now, deadline).await) });
        let mut failed = None;
        for (at, (ids, result)) in futures_util::future::join_all(calls).await {
            if let Err(err) = self.take_answers(work, plans, at, &ids, result, now) {
                failed.get_or_insert(err);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One store's round trip: `batch` to the store at place `at`, with
    /// the identities the local cache needs kept.
    async fn call(
        &self,
        at: u8,
        batch: Batch,
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> (
        Vec<(CounterId, Spec, u64)>,
        Result<Vec<Outcome>, StoreError>,
    ) {
        // Identities are kept only when the local cache needs them (the
        // process-wide store's).
        let cached_ids: Vec<(CounterId, Spec, u64)> = match &self.local_cache {
            Some(_) if at == 0 => batch
                .ops
                .iter()
                .map(|op| (op.id.clone(), op.spec, op.hits))
                .collect(),
            _ => Vec::new(),
        };
        let Some(store) = self.store_at(at) else {
            return (
                cached_ids,
                Err(StoreError::Config {
                    reason: "a rule names a store this instance does not have",
                }),
            );
        };
        // The embedded store answers in process: its calls are counted
        // with no time, sparing two clock reads a request.
        let started = (!store.store.in_process()).then(std::time::Instant::now);
        // A child span of the call's when it is traced. The store keeps the
        // caller's deadline (Redis: no timer per request).
        let result =
            crate::otel::store_round_trip(store.store.execute_within(batch, now, deadline)).await;
        let elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
        self.metrics.observe_store(elapsed);
        if let Some(leases) = store.leases {
            // Partition allowances start once the store stops answering.
            // (A caller's deadline passing says nothing of the store.)
            match &result {
                Ok(_) => {
                    leases.set_reachable(true);
                    // A decision's round trip measures the store too: a
                    // descriptor too slow for a block yet learns whether
                    // the store is far (and so needs one).
                    leases.observe_rtt(elapsed);
                }
                Err(StoreError::Timeout) => {}
                Err(err) => leases.set_reachable(!err.is_transient()),
            }
        }
        if let Some(stats) = store.stats {
            stats.calls.fetch_add(1, Ordering::Relaxed);
            if !elapsed.is_zero() {
                let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                stats.round_trip_us.fetch_add(us, Ordering::Relaxed);
            }
            if result.is_err() {
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        (cached_ids, result)
    }

    /// The answers of the store at place `at` into its sent slots, or its
    /// failure policy's.
    fn take_answers(
        &self,
        work: &mut Work,
        plans: &[Plan<'_>],
        at: u8,
        cached_ids: &[(CounterId, Spec, u64)],
        result: Result<Vec<Outcome>, StoreError>,
        now: UnixMillis,
    ) -> Result<(), LimitError> {
        match result {
            Ok(results) => {
                let sent = work.slots.iter_mut().filter(|s| s.sent && s.store == at);
                for (slot, outcome) in sent.zip(results) {
                    slot.outcome = Some(outcome);
                }
                self.cache_over_limit(&work.slots, at, cached_ids, now);
                Ok(())
            }
            Err(err) => self.answer_by_failure_mode(err, work, plans, at, now),
        }
    }

    /// Remembers the counters the store found over their limit, for the
    /// local cache to answer until their window ends.
    fn cache_over_limit(
        &self,
        slots: &[Pending],
        at: u8,
        ids: &[(CounterId, Spec, u64)],
        now: UnixMillis,
    ) {
        let Some(cache) = &self.local_cache else {
            return;
        };
        for (slot, (id, spec, hits)) in slots.iter().filter(|s| s.sent && s.store == at).zip(ids) {
            // Only a counter really over its limit is cached: one that
            // counted the hits, or a read of one already over. A refusal
            // that counted nothing (stop-increment) leaves the counter below
            // the limit, so later smaller requests must still be asked.
            if slot
                .outcome
                .is_some_and(|o| o.over_limit && (o.counted || *hits == 0))
            {
                cache.insert(id, *spec, now);
            }
        }
    }

    /// The store at place `at` failed: logged (rate limited), counted, and
    /// answered as its failure mode says.
    fn answer_by_failure_mode(
        &self,
        err: StoreError,
        work: &mut Work,
        plans: &[Plan<'_>],
        at: u8,
        now: UnixMillis,
    ) -> Result<(), LimitError> {
        let store = self.store_at(at);
        let mode = store.map_or(self.options.failure_mode, |s| s.failure_mode);
        if let Some(suppressed) = self.failures.admit(err.kind(), now) {
            tracing::warn!(
                error = &err as &dyn std::error::Error,
                rl.store = self.store_name(at),
                rl.failure_mode = ?mode,
                suppressed,
                "store unavailable; answering by failure mode"
            );
        }
        let over = match mode {
            FailureMode::Error => {
                self.metrics.record_store_error(false);
                return Err(LimitError::Store(err));
            }
            FailureMode::Allow => false,
            FailureMode::Deny => true,
        };
        self.metrics.record_store_error(true);
        if let Some(stats) = store.and_then(|s| s.stats) {
            stats.failure_mode_answers.fetch_add(1, Ordering::Relaxed);
        }
        for slot in work.slots.iter_mut().filter(|s| s.sent && s.store == at) {
            if let Some(Plan::Limited { limits, .. }) = plans.get(slot.plan) {
                // The slot's base limit, or the last one.
                if let Some(limit) = limits.get(slot.base).or(limits.last()) {
                    slot.outcome = Some(failure_outcome(limit, over));
                }
            }
        }
        Ok(())
    }
}
