//! The decision: a request, the loaded rules and a store in; one status per
//! descriptor and an overall code out, with the reference service's exact
//! semantics (hits, shadow, quota, replaces, unlimited, overrides, headers).
//!
//! The limiter knows rules and descriptors but not the wire format (that is
//! `server`) nor how counters are stored (that is `store`). Every request
//! reads the rule index exactly once and the clock exactly once, and sends the
//! store one batch.

mod answer;
#[cfg(test)]
pub(crate) use answer::CurrentLimit;
mod error;
mod explain;
mod lease;
mod local_cache;
mod observe;
mod options;
mod pick;
mod plan;
mod quiet_log;
mod response;
#[cfg(test)]
mod tests;

pub(crate) use answer::Status;
pub use answer::{Code, HeaderNames, Response};
pub use error::LimitError;
pub(crate) use explain::{Explained, Explanation, Step, Verdict, WindowState};
pub(crate) use options::RequestBounds;
pub use options::{FailureMode, LimiterOptions};

use crate::algorithm::Spec;
use crate::clock::{Clock, UnixMillis};
use crate::config::{Redactor, SharedIndex};
use crate::descriptor::Request;
use crate::insight::TopRecorder;
use crate::metrics::Metrics;
use crate::store::{Batch, CounterId, Op, Store};
use lease::{Admit, Leases};
use local_cache::LocalCache;
use plan::{Pending, Plan, apply_replaces, failure_outcome, is_candidate, operations, store_tags};
use quiet_log::QuietLog;
use std::sync::Arc;
use std::time::Duration;

/// Makes rate-limit decisions against a store.
#[derive(Debug)]
pub struct Limiter<S> {
    rules: SharedIndex,
    store: S,
    clock: Arc<dyn Clock>,
    local_cache: Option<LocalCache>,
    metrics: Arc<Metrics>,
    /// Hottest and most-limited descriptors per domain.
    top: Arc<TopRecorder>,
    options: LimiterOptions,
    /// Store failures are logged here, at most once a second per kind.
    failures: QuietLog,
    /// Blocks of leased limits (`lease: true`), on a store that keeps them.
    leases: Option<Leases>,
    /// How secret descriptor values are shown, and stored.
    redactor: Arc<Redactor>,
}

impl<S: Store> Limiter<S> {
    /// A limiter over `rules` and `store`, reading time from `clock`.
    pub fn new(
        rules: SharedIndex,
        store: S,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
    ) -> Self {
        let local_cache =
            (options.local_cache_bytes > 0).then(|| LocalCache::new(options.local_cache_bytes));
        let leases = store.leases().then(Leases::default);
        Self {
            rules,
            store,
            clock,
            local_cache,
            metrics: Arc::new(Metrics::default()),
            top: Arc::new(TopRecorder::default()),
            options,
            failures: QuietLog::default(),
            leases,
            redactor: Arc::new(Redactor::random()),
        }
    }

    /// Shows and stores secret values through `redactor` instead of a
    /// private one with a random key and only the rules' secret keys.
    #[must_use]
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// How secret descriptor values are shown: every view, log line and
    /// metric name built from request values goes through it.
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// Records into `metrics` instead of a private set.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics this limiter records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The top lists this limiter records into.
    pub fn top(&self) -> &Arc<TopRecorder> {
        &self.top
    }

    /// The store this limiter counts in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The clock decisions are made with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The rule index in force.
    pub fn rules(&self) -> &SharedIndex {
        &self.rules
    }

    /// Answers one `ShouldRateLimit` request.
    ///
    /// # Errors
    ///
    /// [`LimitError`] for an empty or oversized request (nothing is counted)
    /// or when the store fails.
    pub async fn should_rate_limit(&self, request: &Request) -> Result<Response, LimitError> {
        self.should_rate_limit_within(request, None).await
    }

    /// Answers one request, giving the store at most `deadline` (the
    /// caller's own deadline, less a margin): past it the failure policy
    /// answers, so the caller hears floodgate's answer, not its own timeout.
    ///
    /// # Errors
    ///
    /// As [`Limiter::should_rate_limit`]; a store that misses the deadline
    /// is [`StoreError::Timeout`](crate::store::StoreError::Timeout).
    pub async fn should_rate_limit_within(
        &self,
        request: &Request,
        deadline: Option<Duration>,
    ) -> Result<Response, LimitError> {
        self.options.bounds.check(request)?;
        // A guard: no shared reference count per request. But a thread
        // has 8 fast guards, and hundreds of requests in flight holding
        // them across a remote store's wait would send every other load on
        // the thread (metrics, top lists, the connection) down arc-swap's
        // slow path: without leases, where every request waits, a request
        // holds a reference instead. Leased rules answer most hits in
        // process, where the guard is the cheaper.
        let mut index = self.rules.load();
        if !self.store.in_process() && !index.has_leases() {
            index = arc_swap::Guard::from_inner(arc_swap::Guard::into_inner(index));
        }
        let now = self.clock.now();

        let mut plans: Vec<Plan<'_>> = request
            .descriptors
            .iter()
            .map(|descriptor| self.plan(&index, &request.domain, descriptor))
            .collect();
        apply_replaces(&mut plans);

        let request_hits = u64::from(request.hits_addend.max(1));
        let mut slots: Vec<Pending> = Vec::with_capacity(plans.len());
        let mut batch = Batch::with_capacity(plans.len(), self.options.stop_when_over);
        // Hits admitted from blocks (slot, identity, spec, when the block
        // was taken: to put back if the request is refused as a whole).
        let mut locals: Vec<(usize, CounterId, Spec, UnixMillis)> = Vec::new();
        let tags = store_tags(&self.redactor, &index, &request.domain);
        for (i, (plan, descriptor)) in plans.iter().zip(&request.descriptors).enumerate() {
            let Some((limits, mut id, specs)) = operations(&request.domain, descriptor, plan, tags)
            else {
                continue;
            };
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let last = specs.len().saturating_sub(1);
            for (n, &(spec, base)) in specs.iter().enumerate() {
                let candidate = is_candidate(limits, base).then(|| id.candidate(base));
                let mut slot = Pending {
                    plan: i,
                    base,
                    outcome: None,
                    cached: false,
                    candidate: candidate.is_some(),
                    hits,
                    sent: false,
                };
                let op_id = candidate.as_ref().unwrap_or(&id);
                // A check-only call (hits 0) reads the store exactly.
                let leases = self
                    .leases
                    .as_ref()
                    .filter(|_| hits > 0 && limits.get(base).is_some_and(|l| l.lease));
                let cached = self
                    .local_cache
                    .as_ref()
                    .and_then(|c| c.get(op_id, spec, now));
                // A hit the local cache answers asks its lease nothing: no
                // hit taken from a block, no fetch of the next one asked.
                let admit = leases
                    .filter(|_| cached.is_none())
                    .map(|l| l.admit(op_id, spec, hits, now, &self.metrics.lease));
                if let Some(hit) = cached {
                    slot.outcome = Some(hit);
                    slot.cached = true;
                } else if let Some(Admit::Local(outcome, taken_at)) = admit {
                    slot.outcome = Some(outcome);
                    if self.options.stop_when_over && candidate.is_none() {
                        locals.push((slots.len(), op_id.clone(), spec, taken_at));
                    }
                } else {
                    slot.sent = true;
                    // A leased operation asks for no block (the background
                    // fetch takes them), but its refused hits count nothing.
                    let lease = match admit {
                        Some(Admit::Store) => Some(0),
                        Some(Admit::Local(..)) | None => None,
                    };
                    // The last operation of the descriptor takes the
                    // identity; only descriptors with several get copies.
                    let id = match candidate {
                        Some(candidate) => candidate,
                        None if n == last => std::mem::take(&mut id),
                        None => id.clone(),
                    };
                    batch.ops.push(Op {
                        id,
                        spec,
                        hits,
                        lease,
                    });
                }
                slots.push(slot);
            }
        }
        if self.options.stop_when_over && slots.iter().any(|s| s.cached && !s.candidate) {
            // As the reference: a descriptor already over the limit in the
            // local cache makes the request count nothing anywhere; the
            // others are read (hits 0) for their answers. Candidate limits
            // count as if alone.
            for op in batch.ops.iter_mut().filter(|op| !op.id.is_candidate()) {
                op.hits = 0;
            }
        }
        if !batch.is_empty() {
            // Identities are kept only when the local cache needs them.
            let cached_ids: Vec<(CounterId, Spec, u64)> = match &self.local_cache {
                Some(_) => batch
                    .ops
                    .iter()
                    .map(|op| (op.id.clone(), op.spec, op.hits))
                    .collect(),
                None => Vec::new(),
            };
            // The embedded store answers in process: its calls are counted
            // with no time, sparing two clock reads a request.
            let started = (!self.store.in_process()).then(std::time::Instant::now);
            // A child span of the call's when it is traced.
            // The store keeps the caller's deadline (Redis: no timer per
            // request).
            let result =
                crate::otel::store_round_trip(self.store.execute_within(batch, now, deadline))
                    .await;
            self.metrics
                .observe_store(started.map_or(Duration::ZERO, |s| s.elapsed()));
            match result {
                Ok(results) => {
                    for (slot, outcome) in slots.iter_mut().filter(|s| s.sent).zip(results) {
                        slot.outcome = Some(outcome);
                    }
                    if let Some(cache) = &self.local_cache {
                        let sent = slots.iter().filter(|s| s.sent);
                        for (slot, (id, spec, hits)) in sent.zip(&cached_ids) {
                            // Only a counter really over its limit is
                            // cached: one that counted the hits, or a read
                            // of one already over. A refusal that counted
                            // nothing (stop-increment) leaves the counter
                            // below the limit, so later smaller requests
                            // must still be asked.
                            if slot
                                .outcome
                                .is_some_and(|o| o.over_limit && (o.counted || *hits == 0))
                            {
                                cache.insert(id, *spec, now);
                            }
                        }
                    }
                }
                Err(err) => {
                    if let Some(suppressed) = self.failures.admit(err.kind(), now) {
                        tracing::warn!(
                            error = &err as &dyn std::error::Error,
                            rl.failure_mode = ?self.options.failure_mode,
                            suppressed,
                            "store unavailable; answering by failure mode"
                        );
                    }
                    let over = match self.options.failure_mode {
                        FailureMode::Error => {
                            self.metrics.record_store_error(false);
                            return Err(LimitError::Store(err));
                        }
                        FailureMode::Allow => false,
                        FailureMode::Deny => true,
                    };
                    self.metrics.record_store_error(true);
                    for slot in slots.iter_mut().filter(|s| s.sent) {
                        if let Some(Plan::Limited { limits, .. }) = plans.get(slot.plan) {
                            // The slot's base limit, or the last one.
                            if let Some(limit) = limits.get(slot.base).or(limits.last()) {
                                slot.outcome = Some(failure_outcome(limit, over));
                            }
                        }
                    }
                }
            }
        }
        if let Some(leases) = &self.leases
            && !locals.is_empty()
            && slots
                .iter()
                .any(|s| !s.candidate && s.outcome.is_some_and(|o| o.over_limit))
        {
            // Refused as a whole (`stop_when_over`): hits admitted from
            // blocks go back to them, as the store took its own back.
            for (s, id, spec, taken_at) in &locals {
                if let Some(slot) = slots.get_mut(*s) {
                    leases.restore(id, *spec, slot.hits, *taken_at);
                    if let Some(outcome) = &mut slot.outcome {
                        outcome.counted = false;
                        outcome.remaining = outcome.remaining.saturating_add(slot.hits);
                    }
                }
            }
        }
        let response = self.respond(&plans, &slots);
        if index.has_domain(&request.domain) {
            self.metrics
                .record_decision(&request.domain, response.overall_code == Code::OverLimit);
        }
        self.observe(&index, request, &slots, now);
        Ok(response)
    }
}
