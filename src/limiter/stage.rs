//! The stages of one decision after its plans are made
//! ([`Limiter::should_rate_limit_within`] reads as their list): the rules
//! read, the operations (leases and the local cache answering what they
//! can, the rest batched for the store), the store call with the failure
//! policy, and hits put back when the request is refused as a whole.

use super::lease::Admit;
use super::plan::{Pending, Plan, failure_outcome, is_candidate, operations, store_tags};
use super::{FailureMode, LimitError, Limiter};
use crate::algorithm::Spec;
use crate::clock::UnixMillis;
use crate::config::table::{Resolved, TableSet};
use crate::config::{Index, TableEntry, TableUse};
use crate::descriptor::Request;
use crate::store::{Batch, CounterId, Op, Store, StoreError};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One request's operations: a slot per limit of each planned descriptor,
/// the batch of those the store is asked, and the hits admitted from
/// leases' blocks.
#[derive(Debug)]
pub(super) struct Work {
    pub(super) slots: Vec<Pending>,
    /// The operations for the limiter's own store.
    batch: Batch,
    /// Those for the other stores (`store: NAME`), by place: empty (no
    /// allocation) unless a rule names one.
    more: Vec<(u8, Batch)>,
    /// Hits admitted from blocks: put back if the request is refused as a
    /// whole (`stop_when_over`).
    locals: Vec<Local>,
    stop_when_over: bool,
}

/// A slot answered from a lease's block.
#[derive(Debug)]
struct Local {
    slot: usize,
    id: CounterId,
    spec: Spec,
    /// When the block was taken: names the window its hits were counted in.
    taken_at: UnixMillis,
    /// The place of the store whose block it was.
    store: u8,
}

impl Work {
    /// As the reference: a descriptor already over the limit in the local
    /// cache makes the request count nothing anywhere
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`); the others are read
    /// (hits 0) for their answers. Candidate limits count as if alone.
    pub(super) fn count_nothing_when_cached(&mut self) {
        if self.stop_when_over && self.slots.iter().any(|s| s.cached && !s.candidate) {
            let all = std::iter::once(&mut self.batch).chain(self.more.iter_mut().map(|(_, b)| b));
            for op in all
                .flat_map(|b| b.ops.iter_mut())
                .filter(|op| !op.id.is_candidate())
            {
                op.hits = 0;
            }
        }
    }

    /// The batch of the store at place `at`.
    fn batch_at(&mut self, at: u8) -> &mut Batch {
        if at == 0 {
            return &mut self.batch;
        }
        let found = self.more.iter().position(|(place, _)| *place == at);
        let i = found.unwrap_or_else(|| {
            self.more
                .push((at, Batch::with_capacity(1, self.stop_when_over)));
            self.more.len() - 1
        });
        match self.more.get_mut(i) {
            Some((_, batch)) => batch,
            None => &mut self.batch,
        }
    }
}

/// What one descriptor's rule read in its limit table.
#[derive(Debug, Clone, Copy)]
pub(super) struct TableLookup<'a> {
    /// The table and the entry keying it.
    pub(super) table: &'a TableUse,
    /// The value of that entry in the descriptor (`None`: it has none).
    pub(super) value: Option<&'a str>,
    /// The entry found (`None`: the rule's own limits).
    pub(super) entry: Option<&'a TableEntry>,
}

/// The tables stage: each limited plan whose rule reads a table takes the
/// entry for the value of the descriptor entry `table_key` names: its
/// limits (with the store operations built when it was put) replace the
/// rule's, or it makes the descriptor unlimited. Without an entry (or one
/// not yet resolved for a rule changed since) the rule's own limits stand.
/// It runs before `replaces`, so an entry's `name` is the limit's name
/// there too. When `seen` is given (explain), it gets one lookup per plan.
pub(super) fn apply_tables<'a>(
    tables: &'a TableSet,
    plans: &mut [Plan<'a>],
    request: &'a Request,
    mut seen: Option<&mut Vec<Option<TableLookup<'a>>>>,
) {
    for (plan, descriptor) in plans.iter_mut().zip(&request.descriptors) {
        let Plan::Limited {
            table: Some(table),
            limits,
            specs,
            replaces,
            ..
        } = plan
        else {
            if let Some(seen) = seen.as_deref_mut() {
                seen.push(None);
            }
            continue;
        };
        let table: &'a Arc<TableUse> = table;
        let value = descriptor
            .entries
            .iter()
            .find(|entry| *entry.key == *table.key)
            .map(|entry| entry.value.as_str());
        let found = value.and_then(|value| tables.find(table, value));
        if let Some(seen) = seen.as_deref_mut() {
            seen.push(Some(TableLookup {
                table,
                value,
                entry: found.map(|found| found.entry),
            }));
        }
        match found.and_then(|found| found.resolved) {
            None => {}
            Some(Resolved::Unlimited) => *plan = Plan::Unlimited { replaces },
            Some(Resolved::Limited {
                limits: entry_limits,
                specs: entry_specs,
            }) => {
                *limits = Cow::Borrowed(entry_limits);
                *specs = Cow::Borrowed(entry_specs);
            }
        }
    }
}

/// The rule index a request reads, once.
type IndexGuard = arc_swap::Guard<Arc<Index>>;

impl<S: Store> Limiter<S> {
    /// The rules for `request`. A guard: no shared reference count per
    /// request. But a thread has 8 fast guards, and hundreds of requests in
    /// flight holding them across a remote store's wait would send every
    /// other load on the thread (metrics, top lists, the connection) down
    /// arc-swap's slow path: without leases, where every request waits, a
    /// request holds a reference instead. Leased rules answer most hits in
    /// process, where the guard is the cheaper.
    pub(super) fn rules_now(&self) -> IndexGuard {
        let index = self.rules.load();
        if !self.store.in_process() && !index.has_leases() {
            return arc_swap::Guard::from_inner(arc_swap::Guard::into_inner(index));
        }
        index
    }

    /// Every planned limit as a slot: answered by the local over-limit
    /// cache or a lease's block where they can, else an operation of the
    /// store's batch ([`Limiter::place`]).
    pub(super) fn operations(
        &self,
        index: &Index,
        request: &Request,
        plans: &[Plan<'_>],
        now: UnixMillis,
    ) -> Work {
        let request_hits = u64::from(request.hits_addend.max(1));
        let stop_when_over = self.options.stop_when_over;
        let mut work = Work {
            slots: Vec::with_capacity(plans.len()),
            batch: Batch::with_capacity(plans.len(), stop_when_over),
            more: Vec::new(),
            locals: Vec::new(),
            stop_when_over,
        };
        // With REDACT_STORE_KEYS, counters of secret values are named by
        // their tags.
        let tags = store_tags(&self.redactor, index, &request.domain);
        for (i, (plan, descriptor)) in plans.iter().zip(&request.descriptors).enumerate() {
            let Some((limits, mut id, specs)) = operations(&request.domain, descriptor, plan, tags)
            else {
                continue;
            };
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let last = specs.len().saturating_sub(1);
            for (n, &(spec, base)) in specs.iter().enumerate() {
                let candidate = is_candidate(limits, base).then(|| id.candidate(base));
                let limit = limits.get(base);
                // A leased operation's partition allowance (0: none).
                let leased = (hits > 0 && limit.is_some_and(|l| l.lease))
                    .then(|| limit.map_or(0, |l| l.partition_allowance));
                // The last operation of the descriptor takes the identity;
                // only descriptors with several get copies.
                let op_id = match candidate {
                    Some(candidate) => candidate,
                    None if n == last => std::mem::take(&mut id),
                    None => id.clone(),
                };
                let slot = Pending {
                    plan: i,
                    base,
                    outcome: None,
                    cached: false,
                    candidate: op_id.is_candidate(),
                    hits,
                    sent: false,
                    store: limit.map_or(0, |l| l.store),
                };
                self.place(
                    &mut work,
                    slot,
                    Op {
                        id: op_id,
                        spec,
                        hits,
                        lease: None,
                    },
                    leased,
                    now,
                );
            }
        }
        work
    }

    /// Answers `slot` from the local over-limit cache or (`leased`) its
    /// lease's block where they can; else `op` joins the store's batch.
    fn place(
        &self,
        work: &mut Work,
        mut slot: Pending,
        mut op: Op,
        leased: Option<u64>,
        now: UnixMillis,
    ) {
        let (spec, hits) = (op.spec, op.hits);
        // A check-only call (hits 0) reads the store exactly.
        let leases = self.store_at(slot.store).and_then(|s| s.leases).zip(leased);
        // The local cache (LOCAL_CACHE_SIZE_IN_BYTES) serves the
        // process-wide store's counters only: a counter is named by its
        // descriptor, the same on every store.
        let cached = self
            .local_cache
            .as_ref()
            .filter(|_| slot.store == 0)
            .and_then(|c| c.get(&op.id, spec, now));
        // A hit the local cache answers asks its lease nothing: no hit
        // taken from a block, no fetch of the next one asked.
        let admit = leases
            .filter(|_| cached.is_none())
            .map(|(l, allowance)| l.admit(&op.id, spec, hits, allowance, now, &self.metrics.lease));
        if let Some(hit) = cached {
            slot.outcome = Some(hit);
            slot.cached = true;
        } else if let Some(Admit::Answered(outcome)) = admit {
            slot.outcome = Some(outcome);
        } else if let Some(Admit::Local(outcome, taken_at)) = admit {
            slot.outcome = Some(outcome);
            if work.stop_when_over && !slot.candidate {
                let (at, id) = (work.slots.len(), op.id);
                work.locals.push(Local {
                    slot: at,
                    id,
                    spec,
                    taken_at,
                    store: slot.store,
                });
            }
        } else {
            slot.sent = true;
            // A leased operation asks for no block (the background fetch
            // takes them), but its refused hits count nothing.
            op.lease = matches!(admit, Some(Admit::Store)).then_some(0);
            work.batch_at(slot.store).ops.push(op);
        }
        work.slots.push(slot);
    }

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
        Result<Vec<crate::algorithm::Outcome>, StoreError>,
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
        result: Result<Vec<crate::algorithm::Outcome>, StoreError>,
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

    /// Refused as a whole (`stop_when_over`): hits admitted from blocks go
    /// back, as the store took its own back.
    pub(super) fn put_back_refused(&self, work: &mut Work) {
        if work.locals.is_empty()
            || !work
                .slots
                .iter()
                .any(|s| !s.candidate && s.outcome.is_some_and(|o| o.over_limit))
        {
            return;
        }
        for local in &work.locals {
            let leases = self.store_at(local.store).and_then(|s| s.leases);
            if let (Some(slot), Some(leases)) = (work.slots.get_mut(local.slot), leases) {
                leases.restore(&local.id, local.spec, slot.hits, local.taken_at);
                if let Some(outcome) = &mut slot.outcome {
                    outcome.counted = false;
                    outcome.remaining = outcome.remaining.saturating_add(slot.hits);
                }
            }
        }
    }
}
