//! `/explain`: why a request gets its answer, computed the way the decision
//! is (the same matching, `replaces`, plan, local cache and pick), from the
//! store's current counters read without changing them
//! ([`Store::peek`](crate::store::Store::peek)). Nothing is counted: no
//! counter, no metric, no top list.

mod view;

pub(crate) use view::{Explained, Explanation, Shedding, Step, TableRead, Verdict, WindowState};

use super::Limiter;
use super::answer::{Code, Status};
use super::error::LimitError;
use super::pick::{Overall, pick};
use super::plan::{Pending, Plan, apply_replaces, is_candidate, operations, store_tags};
use super::stage::apply_tables;
use crate::config::single_spec;
use crate::config::table::TableSet;
use crate::config::{Lookup, Policy};
use crate::descriptor::Request;
use crate::store::{Batch, Op, Store};
use std::sync::Arc;

/// Where each answer of the peek batch goes.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// A decision operation: index into the slots.
    Slot(usize),
    /// The state of limit `limit` of descriptor `plan`.
    Window { plan: usize, limit: usize },
}

impl<S: Store> Limiter<S> {
    /// Explains `request` without counting anything: per descriptor the
    /// matcher's walk, the rule, what decided, the status it would get now
    /// and the state of each of its limits.
    ///
    /// # Errors
    ///
    /// [`LimitError`] for an invalid request (as
    /// [`Limiter::should_rate_limit`]) or when the store cannot be read.
    pub async fn explain(&self, request: &Request) -> Result<Explanation, LimitError> {
        self.explain_reading(request, None).await
    }

    /// [`Limiter::explain`] with the limit tables as `tables` says they
    /// would be (a dry run's preview), not as they are.
    ///
    /// # Errors
    /// As [`Limiter::explain`].
    pub(crate) async fn explain_under(
        &self,
        request: &Request,
        tables: &TableSet,
    ) -> Result<Explanation, LimitError> {
        self.explain_reading(request, Some(tables)).await
    }

    async fn explain_reading(
        &self,
        request: &Request,
        given: Option<&TableSet>,
    ) -> Result<Explanation, LimitError> {
        self.options.bounds.check(request)?;
        let index = self.rules.load_full();
        let now = self.clock.now();
        let domain = request.domain.as_str();
        let known = index.has_domain(domain);
        // `plan` counts unknown domains in the metrics; explain counts
        // nothing, so it never asks for one.
        let mut plans: Vec<Plan<'_>> = request
            .descriptors
            .iter()
            .map(|d| {
                if known {
                    self.plan(&index, domain, d)
                } else {
                    Plan::NoLimit
                }
            })
            .collect();
        let loaded = (given.is_none() && index.has_tables()).then(|| self.tables.load());
        let mut lookups = Vec::new();
        if let Some(tables) = given.or(loaded.as_deref().map(|set| &**set)) {
            apply_tables(tables, &mut plans, request, Some(&mut lookups));
        }
        // The walk of the entries that name the rule (a concurrency
        // limit's slot entries follow them, matched by no node).
        let walks: Vec<_> = request
            .descriptors
            .iter()
            .zip(&plans)
            .map(|(d, plan)| {
                let own = match plan {
                    Plan::Limited { entries, .. } => d.entries.get(..*entries),
                    _ => None,
                };
                index.walk(domain, own.unwrap_or(&d.entries))
            })
            .collect();
        let names: Vec<Vec<Arc<str>>> = plans
            .iter()
            .map(|plan| match plan {
                Plan::Limited { limits, .. } => {
                    limits.iter().filter_map(|l| l.name.clone()).collect()
                }
                _ => Vec::new(),
            })
            .collect();
        apply_replaces(&mut plans);

        let request_hits = u64::from(request.hits_addend.max(1));
        let mut slots: Vec<Pending> = Vec::new();
        let mut reads: Vec<Read> = Vec::new();
        let (mut window_reads, mut window_ops): (Vec<Read>, Vec<Op>) = (Vec::new(), Vec::new());
        let mut held_blocks: Vec<((usize, usize), Option<u64>)> = Vec::new();
        // The store of each operation, in the batch's order.
        let (mut op_stores, mut window_stores): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
        let mut batch = Batch::with_capacity(plans.len(), self.options.stop_when_over);
        let tags = store_tags(&self.redactor, &index, domain);
        for (i, (plan, descriptor)) in plans.iter().zip(&request.descriptors).enumerate() {
            let Some((limits, id, specs)) = operations(domain, descriptor, plan, tags) else {
                continue;
            };
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let id_of = |base: usize| {
                if is_candidate(limits, base) {
                    id.candidate(base)
                } else {
                    id.clone()
                }
            };
            for &(spec, base) in specs.iter() {
                let op_id = id_of(base);
                // As the decision: a hit the block held admits is answered
                // from it.
                let store = limits.get(base).map_or(0, |l| l.store);
                let leased = self
                    .store_at(store)
                    .and_then(|s| s.leases)
                    .filter(|_| limits.get(base).is_some_and(|l| l.lease))
                    .and_then(|l| l.peek(&op_id, spec, hits, now))
                    .and_then(|(admitted, _)| admitted);
                let cached = self
                    .local_cache
                    .as_ref()
                    .filter(|_| store == 0)
                    .and_then(|c| c.get(&op_id, spec, now));
                if let Some(outcome) = leased.filter(|_| cached.is_none()) {
                    slots.push(Pending {
                        plan: i,
                        base,
                        outcome: Some(outcome),
                        cached: false,
                        candidate: is_candidate(limits, base),
                        hits,
                        sent: false,
                        store,
                    });
                    continue;
                }
                if cached.is_none() {
                    reads.push(Read::Slot(slots.len()));
                    op_stores.push(store);
                    batch.ops.push(Op {
                        id: op_id,
                        spec,
                        hits,
                        lease: None,
                    });
                }
                slots.push(Pending {
                    plan: i,
                    base,
                    outcome: cached,
                    cached: cached.is_some(),
                    candidate: is_candidate(limits, base),
                    hits,
                    sent: cached.is_none(),
                    store,
                });
            }
            for (at, limit) in limits.iter().enumerate() {
                // The operation covering this limit: its own, or the
                // sliding windows' one.
                let leases = self.store_at(limit.store).and_then(|s| s.leases);
                let held = leases.filter(|_| limit.lease).map(|l| {
                    specs
                        .iter()
                        .rev()
                        .find(|&&(_, base)| base <= at)
                        .and_then(|&(spec, _)| l.peek(&id_of(at), spec, 0, now))
                        .map_or(0, |(_, held)| held)
                });
                held_blocks.push(((i, at), held));
                window_reads.push(Read::Window { plan: i, limit: at });
                window_stores.push(limit.store);
                window_ops.push(Op {
                    id: id_of(at),
                    spec: single_spec(limit),
                    hits: 0,
                    lease: None,
                });
            }
        }
        // Windows are read first, so they show the counters before this
        // request, whatever the store lets later operations see.
        window_reads.append(&mut reads);
        reads = window_reads;
        window_ops.append(&mut batch.ops);
        batch.ops = window_ops;
        window_stores.append(&mut op_stores);
        let op_stores = window_stores;
        let stop_when_over = self.options.stop_when_over;
        if stop_when_over && slots.iter().any(|s| s.cached && !s.candidate) {
            // As the decision: a descriptor over in the local cache makes
            // the request count nothing (candidates count as if alone).
            for (read, op) in reads.iter().zip(&mut batch.ops) {
                if matches!(read, Read::Slot(_)) && !op.id.is_candidate() {
                    op.hits = 0;
                }
            }
        }
        let mut windows: Vec<Vec<WindowState>> = vec![Vec::new(); plans.len()];
        if !batch.is_empty() {
            let mut outcomes = self.peek_routed(&batch, &op_stores, now).await?;
            // As the decision: a request over an enforced limit counts
            // nothing, and the others answer as if refused.
            let decided = || reads.iter().zip(&batch.ops).zip(outcomes.iter());
            let refused = stop_when_over
                && decided().any(|((read, op), o)| {
                    matches!(read, Read::Slot(_)) && o.over_limit && !op.id.is_candidate()
                });
            if refused {
                for ((read, op), outcome) in reads.iter().zip(&batch.ops).zip(&mut outcomes) {
                    if matches!(read, Read::Slot(_))
                        && outcome.counted
                        && op.hits > 0
                        && !op.id.is_candidate()
                    {
                        *outcome = crate::store::taken_back(op, *outcome, now);
                    }
                }
            }
            for (read, outcome) in reads.iter().zip(outcomes) {
                match *read {
                    Read::Slot(s) => {
                        if let Some(slot) = slots.get_mut(s) {
                            slot.outcome = Some(outcome);
                        }
                    }
                    Read::Window {
                        plan,
                        limit: limit_at,
                    } => {
                        let Some(Plan::Limited { limits, .. }) = plans.get(plan) else {
                            continue;
                        };
                        let Some(limit) = limits.get(limit_at) else {
                            continue;
                        };
                        let count = match limit.algorithm {
                            crate::config::Algorithm::Gcra => {
                                u64::from(limit.burst.unwrap_or(limit.requests_per_unit))
                                    .saturating_sub(outcome.remaining)
                            }
                            _ => outcome.before,
                        };
                        if let Some(list) = windows.get_mut(plan) {
                            list.push(WindowState {
                                limit: limit.clone(),
                                count,
                                remaining: outcome.remaining,
                                over_limit: outcome.over_limit,
                                reset: outcome.reset,
                                lease: held_blocks
                                    .iter()
                                    .find(|(at, _)| *at == (plan, limit_at))
                                    .and_then(|&(_, held)| held),
                                store: self.store_name(limit.store).to_owned(),
                            });
                        }
                    }
                }
            }
        }

        let mut overall = Overall::default();
        let mut slots = slots.iter().peekable();
        let secret_keys = index.secret_keys(domain);
        let mut descriptors = Vec::with_capacity(plans.len());
        for (i, (plan, descriptor)) in plans.iter().zip(&request.descriptors).enumerate() {
            let walk = walks.get(i);
            let rule = walk.and_then(|w| match &w.lookup {
                Lookup::Matched(m) => Some(m.rule),
                _ => None,
            });
            let steps = descriptor
                .entries
                .iter()
                .zip(walk.map(|w| w.steps.as_slice()).unwrap_or_default())
                .map(|(entry, matched)| Step {
                    key: entry.key.clone(),
                    value: self
                        .redactor
                        .show(secret_keys, &entry.key, &entry.value)
                        .into_owned(),
                    matched: matched.clone(),
                })
                .collect();
            let (verdict, status) = match plan {
                _ if !known => (Verdict::UnknownDomain, Status::NO_LIMIT),
                Plan::Unlimited { .. } => (Verdict::Unlimited, Status::UNLIMITED),
                Plan::NoLimit => {
                    let replaced_by = (!names.get(i).is_none_or(Vec::is_empty))
                        .then(|| replacer(&walks, i, names.get(i)))
                        .flatten();
                    match replaced_by {
                        Some(by) => (Verdict::Replaced { by }, Status::NO_LIMIT),
                        None => (Verdict::NoRule, Status::NO_LIMIT),
                    }
                }
                Plan::Limited {
                    limits,
                    shadow_mode,
                    quota_mode,
                    ..
                } => {
                    let picked = pick(
                        limits,
                        std::iter::from_fn(|| slots.next_if(|s| s.plan == i)),
                    );
                    let status = picked.status(limits, *shadow_mode);
                    overall.add(&status, *quota_mode);
                    let shadowed = status.code == Code::Ok
                        && ((picked.outcome.over_limit && picked.is_shadow(*shadow_mode))
                            || picked.shadow_denied > 0);
                    let verdict = if descriptor.limit.is_some() {
                        Verdict::Override
                    } else if picked.cached {
                        Verdict::Cached
                    } else if shadowed {
                        Verdict::Shadow
                    } else {
                        Verdict::Limited
                    };
                    (verdict, status)
                }
            };
            descriptors.push(Explained {
                steps,
                rule: match plan {
                    Plan::Limited { .. } if descriptor.limit.is_some() => None,
                    _ => rule.map(|r| r.full_key.clone()),
                },
                verdict,
                status,
                windows: std::mem::take(windows.get_mut(i).unwrap_or(&mut Vec::new())),
                table: lookups.get(i).copied().flatten().map(|read| TableRead {
                    table: read.table.name.to_string(),
                    key: read.table.key.to_string(),
                    value: read.value.map(str::to_owned),
                    entry: read.entry.cloned(),
                }),
            });
        }
        let overall_code = if overall.is_over() && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Ok(Explanation {
            overall_code,
            descriptors,
            shedding: self.shedding(),
        })
    }

    /// How requests are shed now, and how many were.
    pub(crate) fn shedding(&self) -> Shedding {
        Shedding {
            failure_mode: self.options.failure_mode,
            deadline_total: self.metrics.shed(),
            queue_total: self.metrics.shed_queue(),
        }
    }
}

/// The rule of another descriptor of the request whose `replaces` names one
/// of `names` (the limits descriptor `i` had before `replaces`).
fn replacer(
    walks: &[crate::config::Walk<'_>],
    i: usize,
    names: Option<&Vec<Arc<str>>>,
) -> Option<String> {
    let names = names?;
    walks.iter().enumerate().find_map(|(j, walk)| {
        let Lookup::Matched(m) = &walk.lookup else {
            return None;
        };
        let replaces = j != i
            && matches!(m.rule.policy, Policy::Limited(_))
            && m.rule.replaces.iter().any(|r| names.contains(r));
        replaces.then(|| m.rule.full_key.clone())
    })
}
