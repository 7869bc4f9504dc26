//! The decision: a request, the loaded rules and a store in; one status per
//! descriptor and an overall code out, with the reference service's exact
//! semantics (hits, shadow, quota, replaces, unlimited, overrides, headers).
//!
//! The limiter knows rules and descriptors but not the wire format (that is
//! `server`) nor how counters are stored (that is `store`). Every request
//! reads the rule index exactly once and the clock exactly once, and sends the
//! store one batch.

mod local_cache;
mod quiet_log;

use crate::algorithm::{FixedWindow, Gcra, Limits, Outcome, SlidingLog, SlidingWindow, Spec};
use crate::clock::Clock;
use crate::config::{Algorithm, Index, Limit, Lookup, Policy};
use crate::descriptor::{Descriptor, Request, Unit};
use crate::metrics::{Metrics, RuleHit};
use crate::store::{Batch, CounterId, Op, Store, StoreError};
use arc_swap::ArcSwap;
use local_cache::LocalCache;
use quiet_log::QuietLog;
use std::borrow::Cow;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// Answer for one descriptor, or for the whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or not limited at all).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit that applied to a descriptor, as reported to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's `name`, if it has one.
    pub name: Option<Arc<str>>,
    /// Allowed hits per window.
    pub requests_per_unit: u32,
    /// The rule's unit (a window may span `unit_multiplier` units).
    pub unit: Unit,
}

/// The answer for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// OK or OVER_LIMIT (after shadow-mode rewriting).
    pub code: Code,
    /// The limit applied, or `None` when no limit matched.
    pub current_limit: Option<CurrentLimit>,
    /// Hits still allowed in this window (`u32::MAX` for unlimited rules).
    pub limit_remaining: u32,
    /// Time until the window resets, when a limit applied.
    pub duration_until_reset: Option<Duration>,
}

impl Status {
    const NO_LIMIT: Self = Self {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
    };

    const UNLIMITED: Self = Self {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: u32::MAX,
        duration_until_reset: None,
    };
}

/// The answer to a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// OVER_LIMIT if any (non-quota) descriptor is over its limit.
    pub overall_code: Code,
    /// One status per request descriptor, in request order.
    pub statuses: Vec<Status>,
    /// `RateLimit-*` headers for the most constrained descriptor, when enabled.
    pub response_headers: Vec<(Arc<str>, String)>,
}

/// Names of the three rate-limit response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// Header carrying the limit (`RateLimit-Limit`).
    pub limit: Arc<str>,
    /// Header carrying the remaining hits (`RateLimit-Remaining`).
    pub remaining: Arc<str>,
    /// Header carrying the seconds until reset (`RateLimit-Reset`).
    pub reset: Arc<str>,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            limit: Arc::from("RateLimit-Limit"),
            remaining: Arc::from("RateLimit-Remaining"),
            reset: Arc::from("RateLimit-Reset"),
        }
    }
}

/// Bounds on request size, so one caller cannot make the service do
/// unbounded work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_entries: usize,
    /// Most bytes in one entry (key plus value).
    pub max_entry_bytes: usize,
    /// Most bytes in the domain.
    pub max_domain_bytes: usize,
    /// Largest `hits_addend`, of the request and of each descriptor.
    pub max_hits_addend: u64,
}

impl Default for RequestBounds {
    fn default() -> Self {
        Self {
            max_descriptors: 64,
            max_entries: 32,
            max_entry_bytes: 4_096,
            max_domain_bytes: 256,
            max_hits_addend: 1_000_000_000,
        }
    }
}

/// What to answer when the store fails (`--on-store-error`, `FAILURE_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Fail the request (gRPC UNAVAILABLE), so Envoy's `failure_mode_deny`
    /// decides.
    #[default]
    Error,
    /// Answer OK, as if every counter were fresh (fail open).
    Allow,
    /// Answer OVER_LIMIT (fail closed).
    Deny,
}

/// Process-wide decision settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimiterOptions {
    /// `SHADOW_MODE`: an OVER_LIMIT overall code is answered as OK.
    pub global_shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor is treated as `quota_mode`.
    pub global_quota_mode: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: add `RateLimit-*` headers.
    pub response_headers: Option<HeaderNames>,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request over the limit
    /// on any descriptor counts nothing on any of them.
    pub stop_when_over: bool,
    /// Request size bounds.
    pub bounds: RequestBounds,
    /// What to answer when the store fails.
    pub failure_mode: FailureMode,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: budget of the in-process over-limit
    /// cache; 0 turns it off.
    pub local_cache_bytes: usize,
}

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// The domain is empty (reference wording).
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// There are no descriptors (reference wording).
    #[error("rate limit descriptor list must not be empty")]
    EmptyDescriptors,
    /// Too many descriptors.
    #[error("request has {count} descriptors, more than the limit of {max}")]
    TooManyDescriptors {
        /// Descriptors sent.
        count: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// Too many entries in one descriptor.
    #[error("descriptor {index} has {count} entries, more than the limit of {max}")]
    TooManyEntries {
        /// Position of the descriptor in the request.
        index: usize,
        /// Entries sent.
        count: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// One entry is too large.
    #[error("descriptor {index} entry {entry} is {bytes} bytes, more than the limit of {max}")]
    EntryTooLarge {
        /// Position of the descriptor in the request.
        index: usize,
        /// Position of the entry in the descriptor.
        entry: usize,
        /// Key plus value length.
        bytes: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// The domain is too long.
    #[error("domain is {bytes} bytes, more than the limit of {max}")]
    DomainTooLong {
        /// Domain length sent.
        bytes: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// A `hits_addend` is larger than the bound.
    #[error("{place} hits_addend {hits} is more than the limit of {max}")]
    TooManyHits {
        /// `request` or `descriptor <n>`.
        place: String,
        /// Hits sent.
        hits: u64,
        /// Allowed maximum.
        max: u64,
    },
    /// The store failed; no decision could be made.
    #[error("rate limit store failed")]
    Store(#[from] StoreError),
}

impl LimitError {
    /// Whether the caller's request was at fault (as opposed to the service).
    pub fn is_invalid_request(&self) -> bool {
        !matches!(self, Self::Store(_))
    }
}

/// Shared, atomically swappable rule index: reloads store a new `Arc<Index>`
/// and each request reads it once.
pub type SharedIndex = Arc<ArcSwap<Index>>;

/// Makes rate-limit decisions against a store.
#[derive(Debug)]
pub struct Limiter<S> {
    rules: SharedIndex,
    store: S,
    clock: Arc<dyn Clock>,
    local_cache: Option<LocalCache>,
    metrics: Arc<Metrics>,
    options: LimiterOptions,
    /// Store failures are logged here, at most once a second per kind.
    failures: QuietLog,
}

/// What one descriptor needs after lookup and `replaces`.
#[derive(Debug)]
enum Plan<'a> {
    NoLimit,
    Unlimited,
    Limited {
        /// The limits to enforce (borrowed from the rules, or one built from
        /// a request override); never empty.
        limits: Cow<'a, [Limit]>,
        shadow_mode: bool,
        quota_mode: bool,
        /// Names of limits this one drops from the same request.
        replaces: &'a [Arc<str>],
        /// `share_threshold` substitutions: (entry index, wildcard pattern).
        shared: Vec<(usize, &'a str)>,
        /// The reference's stats key of this descriptor.
        stats_key: Cow<'a, str>,
    },
}

/// The store operations a descriptor's limits become, each with the index
/// of the first limit it covers: sliding windows and logs decide all their
/// windows in one operation; fixed windows and GCRA have one state per limit.
fn specs(limits: &[Limit]) -> Vec<(Spec, usize)> {
    let Some(first) = limits.first() else {
        return Vec::new();
    };
    match first.algorithm {
        Algorithm::SlidingWindow => {
            let pairs = limits
                .iter()
                .map(|l| (u64::from(l.requests_per_unit), l.window_secs()));
            let count_rejected = limits.iter().any(|l| l.count_rejected);
            vec![(
                Spec::SlidingWindow(SlidingWindow::new(Limits::new(pairs), count_rejected)),
                0,
            )]
        }
        Algorithm::SlidingLog => {
            let pairs = limits.iter().map(|l| {
                (
                    u64::from(l.requests_per_unit),
                    l.window_secs().saturating_mul(1_000),
                )
            });
            vec![(Spec::SlidingLog(SlidingLog::new(Limits::new(pairs))), 0)]
        }
        Algorithm::FixedWindow | Algorithm::Gcra => limits
            .iter()
            .enumerate()
            .map(|(i, limit)| (single_spec(limit), i))
            .collect(),
    }
}

/// The operation of one limit on its own.
fn single_spec(limit: &Limit) -> Spec {
    let requests = u64::from(limit.requests_per_unit);
    match limit.algorithm {
        Algorithm::Gcra => Spec::Gcra(Gcra::new(
            requests,
            limit.window_secs().saturating_mul(1_000),
            limit.burst.map_or(requests, u64::from),
        )),
        Algorithm::SlidingWindow => Spec::SlidingWindow(SlidingWindow::new(
            Limits::new([(requests, limit.window_secs())]),
            limit.count_rejected,
        )),
        Algorithm::SlidingLog => Spec::SlidingLog(SlidingLog::new(Limits::new([(
            requests,
            limit.window_secs().saturating_mul(1_000),
        )]))),
        Algorithm::FixedWindow => Spec::FixedWindow {
            window: FixedWindow::new(limit.window_secs()),
            limit: requests,
        },
    }
}

/// The answer given without the store: a fresh window (`over` false) or an
/// exhausted one (`over` true).
fn failure_outcome(limit: &Limit, over: bool) -> Outcome {
    let requests = u64::from(limit.requests_per_unit);
    Outcome {
        over_limit: over,
        remaining: if over { 0 } else { requests },
        reset: Duration::from_secs(limit.window_secs()),
        counted: false,
        before: 0,
        after: 0,
        limit_index: 0,
    }
}

fn current_limit(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit,
    }
}

/// One store operation of a request: which descriptor it answers for, the
/// first limit it covers, and its outcome once known.
#[derive(Debug, Clone, Copy)]
struct Slot {
    plan: usize,
    base: usize,
    outcome: Option<Outcome>,
    /// Answered from the local over-limit cache.
    cached: bool,
    hits: u64,
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
        Self {
            rules,
            store,
            clock,
            local_cache,
            metrics: Arc::new(Metrics::default()),
            options,
            failures: QuietLog::default(),
        }
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
    /// is [`StoreError::Timeout`].
    pub async fn should_rate_limit_within(
        &self,
        request: &Request,
        deadline: Option<Duration>,
    ) -> Result<Response, LimitError> {
        self.validate(request)?;
        let index = self.rules.load_full();
        let now = self.clock.now();

        let mut plans: Vec<Plan<'_>> = request
            .descriptors
            .iter()
            .map(|descriptor| self.plan(&index, &request.domain, descriptor))
            .collect();
        apply_replaces(&mut plans);

        let request_hits = u64::from(request.hits_addend.max(1));
        let mut slots: Vec<Slot> = Vec::with_capacity(plans.len());
        let mut sent: Vec<usize> = Vec::with_capacity(plans.len());
        let mut batch = Batch::with_capacity(plans.len(), self.options.stop_when_over);
        for (i, (plan, descriptor)) in plans.iter().zip(&request.descriptors).enumerate() {
            let Plan::Limited { limits, shared, .. } = plan else {
                continue;
            };
            let mut id = counter_id(&request.domain, descriptor, shared);
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let specs = specs(limits);
            let last = specs.len().saturating_sub(1);
            for (n, (spec, base)) in specs.into_iter().enumerate() {
                let mut slot = Slot {
                    plan: i,
                    base,
                    outcome: None,
                    cached: false,
                    hits,
                };
                if let Some(hit) = self
                    .local_cache
                    .as_ref()
                    .and_then(|c| c.get(&id, spec, now))
                {
                    slot.outcome = Some(hit);
                    slot.cached = true;
                } else {
                    sent.push(slots.len());
                    // The last operation of the descriptor takes the
                    // identity; only descriptors with several get copies.
                    let id = if n == last {
                        std::mem::take(&mut id)
                    } else {
                        id.clone()
                    };
                    batch.ops.push(Op { id, spec, hits });
                }
                slots.push(slot);
            }
        }
        if self.options.stop_when_over && slots.iter().any(|s| s.cached) {
            // As the reference: a descriptor already over the limit in the
            // local cache makes the request count nothing anywhere; the
            // others are read (hits 0) for their answers.
            for op in &mut batch.ops {
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
            let started = std::time::Instant::now();
            let result = match deadline {
                Some(deadline) => tokio::time::timeout(deadline, self.store.execute(batch, now))
                    .await
                    .unwrap_or(Err(StoreError::Timeout)),
                None => self.store.execute(batch, now).await,
            };
            self.metrics.observe_store(started.elapsed());
            match result {
                Ok(results) => {
                    for (&s, outcome) in sent.iter().zip(results) {
                        slots[s].outcome = Some(outcome);
                    }
                    if let Some(cache) = &self.local_cache {
                        for (&s, (id, spec, hits)) in sent.iter().zip(&cached_ids) {
                            // Only a counter really over its limit is
                            // cached: one that counted the hits, or a read
                            // of one already over. A refusal that counted
                            // nothing (stop-increment) leaves the counter
                            // below the limit, so later smaller requests
                            // must still be asked.
                            if slots[s]
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
                    for &s in &sent {
                        if let Plan::Limited { limits, .. } = &plans[slots[s].plan] {
                            let limit = &limits[slots[s].base.min(limits.len().saturating_sub(1))];
                            slots[s].outcome = Some(failure_outcome(limit, over));
                        }
                    }
                }
            }
        }
        Ok(self.respond(&plans, &slots))
    }

    fn validate(&self, request: &Request) -> Result<(), LimitError> {
        let bounds = self.options.bounds;
        if request.domain.is_empty() {
            return Err(LimitError::EmptyDomain);
        }
        if request.domain.len() > bounds.max_domain_bytes {
            return Err(LimitError::DomainTooLong {
                bytes: request.domain.len(),
                max: bounds.max_domain_bytes,
            });
        }
        if request.descriptors.is_empty() {
            return Err(LimitError::EmptyDescriptors);
        }
        if u64::from(request.hits_addend) > bounds.max_hits_addend {
            return Err(LimitError::TooManyHits {
                place: "request".to_owned(),
                hits: u64::from(request.hits_addend),
                max: bounds.max_hits_addend,
            });
        }
        if request.descriptors.len() > bounds.max_descriptors {
            return Err(LimitError::TooManyDescriptors {
                count: request.descriptors.len(),
                max: bounds.max_descriptors,
            });
        }
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            if let Some(hits) = descriptor
                .hits_addend
                .filter(|&h| h > bounds.max_hits_addend)
            {
                return Err(LimitError::TooManyHits {
                    place: format!("descriptor {index}"),
                    hits,
                    max: bounds.max_hits_addend,
                });
            }
            if descriptor.entries.len() > bounds.max_entries {
                return Err(LimitError::TooManyEntries {
                    index,
                    count: descriptor.entries.len(),
                    max: bounds.max_entries,
                });
            }
            for (entry_index, entry) in descriptor.entries.iter().enumerate() {
                let bytes = entry.key.len() + entry.value.len();
                if bytes > bounds.max_entry_bytes {
                    return Err(LimitError::EntryTooLarge {
                        index,
                        entry: entry_index,
                        bytes,
                        max: bounds.max_entry_bytes,
                    });
                }
            }
        }
        Ok(())
    }

    fn plan<'a>(&self, index: &'a Index, domain: &str, descriptor: &Descriptor) -> Plan<'a> {
        if let Some(limit_override) = descriptor.limit {
            // As in the reference, an override needs a known domain but not
            // a matching rule, and carries no shadow, quota or name.
            if !index.has_domain(domain) {
                return Plan::NoLimit;
            }
            return Plan::Limited {
                limits: Cow::Owned(vec![Limit {
                    name: None,
                    requests_per_unit: limit_override.requests_per_unit,
                    unit: limit_override.unit,
                    unit_multiplier: NonZeroU32::MIN,
                    algorithm: Algorithm::FixedWindow,
                    burst: None,
                    count_rejected: false,
                }]),
                shadow_mode: false,
                quota_mode: self.options.global_quota_mode,
                replaces: &[],
                shared: Vec::new(),
                stats_key: Cow::Owned(runtime_stats_key(domain, descriptor)),
            };
        }
        match index.lookup(domain, &descriptor.entries) {
            Lookup::UnknownDomain => {
                self.metrics.record_domain_not_found(domain);
                Plan::NoLimit
            }
            Lookup::NoMatch => Plan::NoLimit,
            Lookup::Matched(matched) => match &matched.rule.policy {
                Policy::Unlimited => Plan::Unlimited,
                Policy::Limited(limits) if limits.is_empty() => Plan::NoLimit,
                Policy::Limited(limits) => Plan::Limited {
                    limits: Cow::Borrowed(limits),
                    shadow_mode: matched.rule.shadow_mode,
                    quota_mode: matched.rule.quota_mode || self.options.global_quota_mode,
                    replaces: &matched.rule.replaces,
                    stats_key: matched.stats_key_cow(&descriptor.entries),
                    shared: matched.shared,
                },
            },
        }
    }

    fn respond(&self, plans: &[Plan<'_>], slots: &[Slot]) -> Response {
        let mut statuses = Vec::with_capacity(plans.len());
        let (mut any_over, mut quota_total, mut quota_over) = (false, 0usize, 0usize);
        let mut slots = slots.iter().peekable();
        for (i, plan) in plans.iter().enumerate() {
            let status = match plan {
                Plan::NoLimit => Status::NO_LIMIT,
                Plan::Unlimited => Status::UNLIMITED,
                Plan::Limited {
                    limits,
                    shadow_mode,
                    quota_mode,
                    stats_key,
                    ..
                } => {
                    // The descriptor's answer: its first violated limit, else
                    // the one with the least remaining.
                    let mut chosen: Option<(usize, Outcome)> = None;
                    let (mut hits, mut cached) = (0, false);
                    while let Some(slot) = slots.next_if(|s| s.plan == i) {
                        hits = slot.hits;
                        cached |= slot.cached && slot.outcome.is_some_and(|o| o.over_limit);
                        // Every slot gets an outcome; a missing one would be
                        // a store bug, answered as a fresh window.
                        let at = (slot.base + slot.outcome.map_or(0, |o| o.limit_index))
                            .min(limits.len().saturating_sub(1));
                        let outcome = slot
                            .outcome
                            .unwrap_or_else(|| failure_outcome(&limits[at], false));
                        let better = match &chosen {
                            None => true,
                            Some((_, best)) if best.over_limit => false,
                            Some((_, best)) => {
                                outcome.over_limit || outcome.remaining < best.remaining
                            }
                        };
                        if better {
                            chosen = Some((at, outcome));
                        }
                    }
                    let (at, outcome) =
                        chosen.unwrap_or_else(|| (0, failure_outcome(&limits[0], false)));
                    let limit = u64::from(limits[at].requests_per_unit);
                    self.metrics.record_rule(
                        stats_key,
                        RuleHit {
                            hits,
                            limit,
                            // Algorithms without a running count report it
                            // through `remaining`.
                            before: outcome
                                .before
                                .max(limit.saturating_sub(outcome.remaining).saturating_sub(hits)),
                            after: outcome.after.max(limit.saturating_sub(outcome.remaining)),
                            over_limit: outcome.over_limit,
                            local_cache: cached,
                            shadow_mode: *shadow_mode,
                        },
                    );
                    let code = if outcome.over_limit && !shadow_mode {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    };
                    if *quota_mode {
                        quota_total += 1;
                        quota_over += usize::from(code == Code::OverLimit);
                    } else {
                        any_over |= code == Code::OverLimit;
                    }
                    Status {
                        code,
                        current_limit: Some(current_limit(&limits[at])),
                        limit_remaining: u32::try_from(outcome.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(outcome.reset),
                    }
                }
            };
            statuses.push(status);
        }
        let over = any_over || (quota_total > 0 && quota_over == quota_total);
        let overall_code = if over && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            if over {
                self.metrics.record_global_shadow();
            }
            Code::Ok
        };
        let response_headers = self
            .options
            .response_headers
            .as_ref()
            .map(|names| limit_headers(names, plans, &statuses))
            .unwrap_or_default();
        Response {
            overall_code,
            statuses,
            response_headers,
        }
    }
}

/// Drops every limit whose name another matched limit of the same request
/// `replaces` (reference: `constructLimitsToCheck`); a descriptor left with
/// no limit is not limited.
fn apply_replaces(plans: &mut [Plan<'_>]) {
    // Most requests carry no `replaces` at all; they allocate nothing here.
    let mut replaced: Vec<Arc<str>> = Vec::new();
    for plan in plans.iter() {
        if let Plan::Limited { replaces, .. } = plan {
            replaced.extend(replaces.iter().cloned());
        }
    }
    if replaced.is_empty() {
        return;
    }
    let is_replaced = |limit: &Limit| limit.name.as_ref().is_some_and(|n| replaced.contains(n));
    for plan in plans.iter_mut() {
        let Plan::Limited { limits, .. } = plan else {
            continue;
        };
        if !limits.iter().any(is_replaced) {
            continue;
        }
        let kept: Vec<Limit> = limits.iter().filter(|l| !is_replaced(l)).cloned().collect();
        if kept.is_empty() {
            *plan = Plan::NoLimit;
        } else {
            *limits = Cow::Owned(kept);
        }
    }
}

/// The reference's stats key for a request override: the full runtime path
/// `domain.k1_v1.k2_v2` (its cardinality is capped by the metrics).
fn runtime_stats_key(domain: &str, descriptor: &Descriptor) -> String {
    let mut key = domain.to_owned();
    for entry in &descriptor.entries {
        key.push('.');
        key.push_str(&entry.key);
        key.push('_');
        key.push_str(&entry.value);
    }
    key
}

/// The counter identity of a descriptor: the request's own entries, with the
/// wildcard pattern in place of the value where a `share_threshold` node
/// matched, so every value under that wildcard shares one counter.
fn counter_id(domain: &str, descriptor: &Descriptor, shared: &[(usize, &str)]) -> CounterId {
    let entries = descriptor.entries.iter().enumerate().map(|(i, entry)| {
        let value = shared
            .iter()
            .find(|(at, _)| *at == i)
            .map_or(entry.value.as_str(), |(_, pattern)| *pattern);
        (entry.key.as_str(), value)
    });
    CounterId::new(domain, entries)
}

/// The reference's "most constrained descriptor" headers: the smallest
/// remaining among limited descriptors, unless a non-quota descriptor is over
/// its limit, in which case the last such one.
fn limit_headers(
    names: &HeaderNames,
    plans: &[Plan<'_>],
    statuses: &[Status],
) -> Vec<(Arc<str>, String)> {
    let mut chosen: Option<usize> = None;
    for (i, status) in statuses.iter().enumerate() {
        if status.current_limit.is_none() {
            continue;
        }
        let smaller = chosen.is_none_or(|c| status.limit_remaining < statuses[c].limit_remaining);
        if smaller {
            chosen = Some(i);
        }
    }
    for (i, (status, plan)) in statuses.iter().zip(plans).enumerate() {
        let quota = matches!(
            plan,
            Plan::Limited {
                quota_mode: true,
                ..
            }
        );
        if status.code == Code::OverLimit && !quota {
            chosen = Some(i);
        }
    }
    let Some(i) = chosen else {
        return Vec::new();
    };
    let status = &statuses[i];
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status.duration_until_reset.map_or(0, |d| d.as_secs());
    vec![
        (names.limit.clone(), limit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, UnixMillis};
    use crate::config::{LoadOptions, Source, load_sources};
    use crate::descriptor::Entry;
    use crate::store::{MemoryStore, StoreKind};

    const RULES: &str = r"
domain: d
descriptors:
  - key: k20
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: k8
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_minute}
  - key: five_minutes
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: replacer
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_minute}]
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: burst
    rate_limits:
      - {unit: second, requests_per_unit: 3, algorithm: sliding_window}
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
";

    /// 2023-11-14T22:13:20Z, chosen on a minute boundary plus 20 s.
    const T0: u64 = 1_700_000_000;

    fn limiter_with(options: LimiterOptions) -> (Limiter<StoreKind>, ManualClock) {
        let index = load_sources(
            &[Source {
                name: "d.yaml".into(),
                text: RULES.into(),
            }],
            &LoadOptions::default(),
        )
        .unwrap();
        let clock = ManualClock::new(UnixMillis::from_secs(T0));
        let limiter = Limiter::new(
            Arc::new(ArcSwap::from_pointee(index)),
            StoreKind::Memory(MemoryStore::new()),
            Arc::new(clock.clone()),
            options,
        );
        (limiter, clock)
    }

    fn limiter() -> (Limiter<StoreKind>, ManualClock) {
        limiter_with(LimiterOptions::default())
    }

    fn one(key: &str, value: &str) -> Descriptor {
        Descriptor::from_pairs([(key, value)])
    }

    fn request(descriptors: Vec<Descriptor>) -> Request {
        Request {
            domain: "d".into(),
            descriptors,
            hits_addend: 0,
        }
    }

    fn with_hits(mut d: Descriptor, hits: u64) -> Descriptor {
        d.hits_addend = Some(hits);
        d
    }

    async fn ask(l: &Limiter<StoreKind>, descriptors: Vec<Descriptor>) -> Response {
        l.should_rate_limit(&request(descriptors)).await.unwrap()
    }

    #[tokio::test]
    async fn reference_vector_limit_20_hits_3_after_5_leaves_15() {
        let (l, _) = limiter();
        ask(&l, vec![with_hits(one("k20", "x"), 2)]).await;
        let r = ask(&l, vec![with_hits(one("k20", "x"), 3)]).await;
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, 15);
    }

    #[tokio::test]
    async fn reference_vector_limit_8_hits_2_after_7_leaves_1() {
        let (l, _) = limiter();
        ask(&l, vec![with_hits(one("k8", "x"), 5)]).await;
        let r = ask(&l, vec![with_hits(one("k8", "x"), 2)]).await;
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (Code::Ok, 1)
        );
    }

    #[tokio::test]
    async fn reference_vector_hits_0_on_count_11_of_10_is_over_and_consumes_nothing() {
        let (l, _) = limiter();
        ask(&l, vec![with_hits(one("hourly", "x"), 11)]).await;
        for _ in 0..3 {
            let r = ask(&l, vec![with_hits(one("hourly", "x"), 0)]).await;
            assert_eq!(r.overall_code, Code::OverLimit);
            assert_eq!(r.statuses[0].limit_remaining, 0);
        }
        // Nothing was consumed: the counter is still 11.
        let memory = l.store().as_memory().unwrap();
        assert_eq!(memory.len(), 1);
    }

    #[tokio::test]
    async fn hits_0_at_exactly_the_limit_is_ok_with_nothing_left() {
        let (l, _) = limiter();
        ask(&l, vec![with_hits(one("hourly", "x"), 10)]).await;
        let r = ask(&l, vec![with_hits(one("hourly", "x"), 0)]).await;
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (Code::Ok, 0)
        );
    }

    #[tokio::test]
    async fn first_n_hits_pass_then_over_limit_hits_still_count() {
        let (l, clock) = limiter();
        let mut remaining = Vec::new();
        for _ in 0..3 {
            let r = ask(&l, vec![one("minute", "u")]).await;
            remaining.push((r.statuses[0].code, r.statuses[0].limit_remaining));
        }
        assert_eq!(
            remaining,
            vec![(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]
        );
        // The over-limit hit counted: a check without consuming is still over.
        let r = ask(&l, vec![with_hits(one("minute", "u"), 0)]).await;
        assert_eq!(r.statuses[0].code, Code::OverLimit);
        // The next epoch-aligned minute starts from zero.
        clock.advance(Duration::from_secs(40));
        let r = ask(&l, vec![one("minute", "u")]).await;
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (Code::Ok, 1)
        );
    }

    #[tokio::test]
    async fn over_limit_status_carries_limit_and_reset() {
        let (l, _) = limiter();
        let r = ask(&l, vec![one("minute", "u")]).await;
        let status = &r.statuses[0];
        assert_eq!(
            status.current_limit,
            Some(CurrentLimit {
                name: Some(Arc::from("per_minute")),
                requests_per_unit: 2,
                unit: Unit::Minute,
            })
        );
        // T0 is 20 s into its minute.
        assert_eq!(status.duration_until_reset, Some(Duration::from_secs(40)));
    }

    #[tokio::test]
    async fn unit_multiplier_makes_a_longer_window() {
        let (l, clock) = limiter();
        for _ in 0..3 {
            assert_eq!(
                ask(&l, vec![one("five_minutes", "u")]).await.overall_code,
                Code::Ok
            );
        }
        clock.advance(Duration::from_secs(60));
        let r = ask(&l, vec![one("five_minutes", "u")]).await;
        assert_eq!(r.overall_code, Code::OverLimit);
        let reset = r.statuses[0].duration_until_reset.unwrap().as_secs();
        assert_eq!(reset, 300 - (T0 + 60) % 300);
    }

    #[tokio::test]
    async fn zero_requests_per_unit_blocks_everything() {
        let (l, _) = limiter();
        let r = ask(&l, vec![one("blocked", "x")]).await;
        assert_eq!(r.overall_code, Code::OverLimit);
    }

    #[tokio::test]
    async fn shadow_mode_answers_ok_but_reports_nothing_left() {
        let (l, _) = limiter();
        ask(&l, vec![one("shadow", "x")]).await;
        let r = ask(&l, vec![one("shadow", "x")]).await;
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0].code, Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, 0);
        assert!(r.statuses[0].current_limit.is_some());
    }

    #[tokio::test]
    async fn global_shadow_mode_keeps_statuses_over_limit() {
        let (l, _) = limiter_with(LimiterOptions {
            global_shadow_mode: true,
            ..LimiterOptions::default()
        });
        let r = ask(&l, vec![one("blocked", "x")]).await;
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0].code, Code::OverLimit);
    }

    #[tokio::test]
    async fn quota_descriptors_fail_the_request_only_when_all_are_over() {
        let (l, _) = limiter();
        ask(&l, vec![one("quota_a", "x")]).await;
        let r = ask(&l, vec![one("quota_a", "x"), one("quota_b", "x")]).await;
        assert_eq!(r.statuses[0].code, Code::OverLimit);
        assert_eq!(r.statuses[1].code, Code::Ok);
        assert_eq!(r.overall_code, Code::Ok);
        let r = ask(&l, vec![one("quota_a", "x"), one("quota_b", "x")]).await;
        assert_eq!(r.overall_code, Code::OverLimit);
        // A non-quota descriptor over its limit fails the request by itself.
        let r = ask(&l, vec![one("quota_a", "y"), one("blocked", "x")]).await;
        assert_eq!(r.overall_code, Code::OverLimit);
    }

    #[tokio::test]
    async fn unlimited_is_ok_with_max_remaining_and_counts_nothing() {
        let (l, _) = limiter();
        let r = ask(&l, vec![one("free", "x")]).await;
        assert_eq!(r.statuses[0], Status::UNLIMITED);
        assert_eq!(r.statuses[0].limit_remaining, 4_294_967_295);
        assert!(
            l.store()
                .execute(Batch::default(), UnixMillis(0))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(l.store().as_memory().unwrap().is_empty());
    }

    #[tokio::test]
    async fn replaced_limits_are_dropped_and_not_counted() {
        let (l, _) = limiter();
        for _ in 0..5 {
            let r = ask(&l, vec![one("minute", "u"), one("replacer", "u")]).await;
            assert_eq!(r.overall_code, Code::Ok);
            assert_eq!(r.statuses[0], Status::NO_LIMIT);
            assert_eq!(
                r.statuses[1]
                    .current_limit
                    .as_ref()
                    .unwrap()
                    .requests_per_unit,
                100
            );
        }
        // per_minute was never counted while replaced.
        let r = ask(&l, vec![one("minute", "u")]).await;
        assert_eq!(r.statuses[0].limit_remaining, 1);
    }

    #[tokio::test]
    async fn unknown_domain_and_unmatched_descriptors_are_ok_without_limit() {
        let (l, _) = limiter();
        let mut req = request(vec![one("minute", "u")]);
        req.domain = "other".into();
        let r = l.should_rate_limit(&req).await.unwrap();
        assert_eq!(r.statuses, vec![Status::NO_LIMIT]);
        let r = ask(&l, vec![one("nope", "x"), Descriptor::default()]).await;
        assert_eq!(r.statuses, vec![Status::NO_LIMIT, Status::NO_LIMIT]);
        assert_eq!(r.overall_code, Code::Ok);
    }

    #[tokio::test]
    async fn override_replaces_the_rule_but_needs_a_known_domain() {
        let (l, _) = limiter();
        let mut d = one("anything", "x");
        d.limit = Some(crate::descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: Unit::Hour,
        });
        let r = ask(&l, vec![d.clone()]).await;
        assert_eq!(
            r.statuses[0].current_limit.as_ref().unwrap().unit,
            Unit::Hour
        );
        assert_eq!(r.statuses[0].limit_remaining, 0);
        assert_eq!(ask(&l, vec![d.clone()]).await.overall_code, Code::OverLimit);
        let mut req = request(vec![d]);
        req.domain = "other".into();
        let r = l.should_rate_limit(&req).await.unwrap();
        assert_eq!(r.statuses, vec![Status::NO_LIMIT]);
    }

    #[tokio::test]
    async fn request_hits_addend_applies_unless_descriptor_sets_its_own() {
        let (l, _) = limiter();
        let mut req = request(vec![one("k20", "a"), with_hits(one("k20", "b"), 1)]);
        req.hits_addend = 5;
        let r = l.should_rate_limit(&req).await.unwrap();
        assert_eq!(r.statuses[0].limit_remaining, 15);
        assert_eq!(r.statuses[1].limit_remaining, 19);
    }

    #[tokio::test]
    async fn share_threshold_values_share_one_counter() {
        let (l, _) = limiter();
        ask(&l, vec![one("path", "/api/a")]).await;
        let r = ask(&l, vec![one("path", "/api/b")]).await;
        assert_eq!(r.statuses[0].limit_remaining, 0);
        assert_eq!(
            ask(&l, vec![one("path", "/api/c")]).await.overall_code,
            Code::OverLimit
        );
    }

    #[tokio::test]
    async fn headers_describe_the_most_constrained_descriptor() {
        let (l, _) = limiter_with(LimiterOptions {
            response_headers: Some(HeaderNames::default()),
            ..LimiterOptions::default()
        });
        let r = ask(
            &l,
            vec![one("k20", "x"), one("minute", "x"), one("free", "x")],
        )
        .await;
        let headers: Vec<(String, String)> = r
            .response_headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        assert_eq!(
            headers,
            vec![
                ("RateLimit-Limit".into(), "2".into()),
                ("RateLimit-Remaining".into(), "1".into()),
                ("RateLimit-Reset".into(), "40".into()),
            ]
        );
        // An over-limit descriptor wins even with more "remaining" elsewhere.
        let r = ask(&l, vec![one("blocked", "x"), one("k20", "x")]).await;
        assert_eq!(&*r.response_headers[0].1, "0");
        assert_eq!(r.response_headers[2].1, "1");
        // No limited descriptor: no headers.
        let r = ask(&l, vec![one("free", "x")]).await;
        assert!(r.response_headers.is_empty());
    }

    #[tokio::test]
    async fn metrics_follow_the_reference_accounting() {
        let (l, _) = limiter();
        for _ in 0..25 {
            ask(&l, vec![one("k20", "m")]).await;
        }
        let c = l.metrics().rule_counters("d.k20").unwrap();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(get(&c.total_hits), 25);
        assert_eq!(get(&c.within_limit), 20);
        assert_eq!(get(&c.over_limit), 5);
        assert_eq!(get(&c.near_limit), 4);
        let mut req = request(vec![one("k20", "m")]);
        req.domain = "nowhere".into();
        l.should_rate_limit(&req).await.unwrap();
        let text = l.metrics().render(None);
        assert!(
            text.contains("ratelimit_service_rate_limit_domain_not_found{domain=\"nowhere\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn several_limits_report_the_violated_one() {
        let (l, _) = limiter();
        // burst: 3 per second and 5 per minute on one descriptor.
        let mut seen = Vec::new();
        for _ in 0..4 {
            let r = ask(&l, vec![one("burst", "x")]).await;
            let s = &r.statuses[0];
            seen.push((
                s.code,
                s.limit_remaining,
                s.current_limit.as_ref().unwrap().requests_per_unit,
            ));
        }
        assert_eq!(
            seen,
            vec![
                (Code::Ok, 2, 3),
                (Code::Ok, 1, 3),
                (Code::Ok, 0, 3),
                (Code::OverLimit, 0, 3),
            ]
        );
    }

    #[tokio::test]
    async fn bad_requests_are_rejected_and_count_nothing() {
        let (l, _) = limiter_with(LimiterOptions {
            bounds: RequestBounds {
                max_descriptors: 2,
                max_entries: 2,
                max_entry_bytes: 8,
                max_domain_bytes: 4,
                max_hits_addend: 10,
            },
            ..LimiterOptions::default()
        });
        let mut req = request(vec![one("minute", "u")]);
        req.domain.clear();
        let err = l.should_rate_limit(&req).await.unwrap_err();
        assert_eq!(err.to_string(), "rate limit domain must not be empty");
        let err = l.should_rate_limit(&request(vec![])).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "rate limit descriptor list must not be empty"
        );
        let three = vec![one("minute", "u"), one("minute", "u"), one("minute", "u")];
        let err = l.should_rate_limit(&request(three)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "request has 3 descriptors, more than the limit of 2"
        );
        let deep = Descriptor {
            entries: vec![
                Entry::new("a", "1"),
                Entry::new("b", "2"),
                Entry::new("c", "3"),
            ],
            ..Descriptor::default()
        };
        let err = l
            .should_rate_limit(&request(vec![one("minute", "u"), deep]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "descriptor 1 has 3 entries, more than the limit of 2"
        );
        let err = l
            .should_rate_limit(&request(vec![one("minute", "123456789")]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "descriptor 0 entry 0 is 15 bytes, more than the limit of 8"
        );
        assert!(err.is_invalid_request());
        let mut long = request(vec![one("minute", "u")]);
        long.domain = "edge5".into();
        let err = l.should_rate_limit(&long).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "domain is 5 bytes, more than the limit of 4"
        );
        let mut heavy = request(vec![one("minute", "u")]);
        heavy.hits_addend = 11;
        let err = l.should_rate_limit(&heavy).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "request hits_addend 11 is more than the limit of 10"
        );
        let mut heavy = one("minute", "u");
        heavy.hits_addend = Some(1 << 31);
        let err = l
            .should_rate_limit(&request(vec![one("minute", "u"), heavy]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "descriptor 1 hits_addend 2147483648 is more than the limit of 10"
        );
        assert!(err.is_invalid_request());
        let memory = l.store().as_memory().unwrap();
        assert!(memory.is_empty(), "a rejected request counted something");
    }
}
