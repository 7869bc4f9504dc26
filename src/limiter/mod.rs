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
mod stage;
mod stores;
#[cfg(test)]
mod tests;

pub(crate) use answer::Status;
pub use answer::{Code, HeaderNames, Response};
pub use error::LimitError;
pub(crate) use explain::{Explained, Explanation, Shedding, Step, TableRead, Verdict, WindowState};
pub(crate) use options::RequestBounds;
pub use options::{FailureMode, LimiterOptions};
pub use stores::{DEFAULT_STORE, StoreEntry};

use crate::clock::Clock;
use crate::config::{Redactor, SharedIndex, Tables};
use crate::descriptor::Request;
use crate::insight::TopRecorder;
use crate::metrics::Metrics;
use crate::store::Store;
use lease::Leases;
use local_cache::LocalCache;
use plan::{Plan, apply_replaces};
use quiet_log::QuietLog;
use stage::apply_tables;
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
    /// Limit tables, read by rules with `table`.
    tables: Arc<Tables>,
    /// The stores rules name besides this one (`store: NAME`), at places
    /// 1, 2, …
    others: Vec<stores::Named<S>>,
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
            tables: Arc::new(Tables::default()),
            others: Vec::new(),
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

    /// Reads limit tables from `tables` (resolved for the rules now; the
    /// caller refreshes them when the rules change).
    #[must_use]
    pub fn with_tables(mut self, tables: Arc<Tables>) -> Self {
        tables.refresh(&self.rules.load_full(), &self.metrics);
        self.tables = tables;
        self
    }

    /// The limit tables decisions read.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// Records into `metrics` instead of a private set.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        metrics
            .stores
            .name_all(self.others.iter().map(|n| Arc::clone(&n.name)));
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

    /// Answers a request whose caller's deadline passed (or cannot be met)
    /// before it was served, at once and counting nothing: by
    /// `FAILURE_MODE` (`allow` every descriptor OK, `deny` every one
    /// OVER_LIMIT, with no limit named), counted in `ratelimit_shed_total`.
    /// Serving it would spend the time of requests still waiting whose
    /// callers still listen.
    ///
    /// # Errors
    ///
    /// [`LimitError::Shed`] under `FAILURE_MODE=error`.
    pub fn shed(&self, request: &Request) -> Result<Response, LimitError> {
        self.metrics.record_shed();
        let code = match self.options.failure_mode {
            FailureMode::Error => return Err(LimitError::Shed),
            FailureMode::Allow => Code::Ok,
            FailureMode::Deny => Code::OverLimit,
        };
        Ok(Response {
            overall_code: code,
            statuses: request
                .descriptors
                .iter()
                .map(|_| Status {
                    code,
                    ..Status::NO_LIMIT
                })
                .collect(),
            response_headers: Vec::new(),
            request_headers: Vec::new(),
            dynamic_metadata: None,
        })
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
        let index = self.rules_now();
        let tables = index.has_tables().then(|| self.tables.load());
        let now = self.clock.now();
        let mut plans: Vec<Plan<'_>> = request
            .descriptors
            .iter()
            .map(|descriptor| self.plan(&index, &request.domain, descriptor))
            .collect();
        if let Some(tables) = &tables {
            apply_tables(tables, &mut plans, request, None);
        }
        apply_replaces(&mut plans);
        let mut work = self.operations(&index, request, &plans, now);
        work.count_nothing_when_cached();
        self.ask_store(&mut work, &plans, now, deadline).await?;
        self.put_back_refused(&mut work);
        let response = self.respond(&plans, &work.slots);
        if index.has_domain(&request.domain) {
            self.metrics
                .record_decision(&request.domain, response.overall_code == Code::OverLimit);
        }
        self.observe(&index, request, &work.slots, now);
        Ok(response)
    }
}
