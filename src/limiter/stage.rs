//! The stages of one decision after its plans are made
//! ([`Limiter::should_rate_limit_within`] reads as their list): the rules
//! read, the operations (leases and the local cache answering what they
//! can, the rest batched for the store), and hits put back when the
//! request is refused as a whole. The store call with the failure policy
//! is `stores.rs`'s.

use super::Limiter;
use super::lease::Admit;
use super::plan::{Pending, Plan, is_candidate, operations, store_tags};
use crate::algorithm::Spec;
use crate::clock::UnixMillis;
use crate::config::table::{Resolved, TableSet};
use crate::config::{Index, TableEntry, TableUse};
use crate::descriptor::Request;
use crate::store::{Batch, CounterId, Op, Store};
use std::borrow::Cow;
use std::sync::Arc;

/// One request's operations: a slot per limit of each planned descriptor,
/// the batch of those the store is asked, and the hits admitted from
/// leases' blocks.
#[derive(Debug)]
pub(super) struct Work {
    pub(super) slots: Vec<Pending>,
    /// The operations for the limiter's own store.
    pub(super) batch: Batch,
    /// Those for the other stores (`store: NAME`), by place: empty (no
    /// allocation) unless a rule names one.
    pub(super) more: Vec<(u8, Batch)>,
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
