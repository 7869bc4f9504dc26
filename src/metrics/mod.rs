//! Every metric floodgate exports, and the Prometheus text rendering of
//! them. Names follow the reference service's stats, mapped the way its
//! Prometheus mapper maps them (`ratelimit.service.rate_limit.<key>.<stat>`
//! becomes `ratelimit_service_rate_limit_<stat>{domain, key}`), so dashboards
//! carry over.
//!
//! Cardinality is bounded: per-rule series are keyed by the rule's stats key,
//! which with `detailed_metric`, `value_to_metric` or request overrides holds
//! runtime values; past `max_series` distinct keys new ones are not tracked
//! and `ratelimit_metrics_series_dropped_total` counts the hits that were not
//! recorded. Nothing here logs or allocates per request in the common case.
//!
//! The same counters also leave under the reference's statsd names
//! (`statsd_names`): through a statsd_exporter mapping on the Prometheus
//! listener (`mapper`, `mapped`) and to statsd (`statsd`, a background
//! task: requests only bump atomics). `process` reads `/proc/self`.

pub(crate) mod admin;
mod histogram;
pub(crate) mod history;
pub(crate) mod lease;
pub(crate) mod mapped;
pub(crate) mod mapper;
pub(crate) mod process;
mod reload;
mod render;
pub(crate) mod rlqs;
mod series;
pub(crate) mod statsd;
pub(crate) mod statsd_names;
pub(crate) mod store;
mod striped;
pub(crate) mod table;
#[cfg(test)]
mod tests;

pub(crate) use admin::{AdminResult, View};
pub(crate) use mapper::MetricType;
pub use mapper::{Mapper, MapperError};
pub use reload::ReloadStats;
pub(crate) use render::{render_memory_store, render_redis_calls};

use histogram::Histogram;
use series::Series;
use striped::{Counter, Gauge, Striped};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Default cap on distinct per-rule stats keys.
pub(crate) const DEFAULT_MAX_SERIES: usize = 10_000;

/// The per-rule counters of the reference (`ratelimit.service.rate_limit.*`).
#[derive(Debug, Default)]
pub struct RuleCounters {
    /// Hits asked for.
    pub total_hits: AtomicU64,
    /// Hits over the limit.
    pub over_limit: AtomicU64,
    /// Hits past the near-limit threshold but within the limit.
    pub near_limit: AtomicU64,
    /// Hits within the limit.
    pub within_limit: AtomicU64,
    /// Over-limit hits answered from the local cache.
    pub over_limit_with_local_cache: AtomicU64,
    /// Over-limit hits let through by shadow mode.
    pub shadow_mode: AtomicU64,
}

impl RuleCounters {
    /// The totals of a rule's stripes.
    fn sum(stripes: &Striped<Self>) -> Self {
        let total = Self::default();
        let add = |to: &AtomicU64, from: &AtomicU64| {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        };
        for c in stripes.each() {
            add(&total.total_hits, &c.total_hits);
            add(&total.over_limit, &c.over_limit);
            add(&total.near_limit, &c.near_limit);
            add(&total.within_limit, &c.within_limit);
            add(
                &total.over_limit_with_local_cache,
                &c.over_limit_with_local_cache,
            );
            add(&total.shadow_mode, &c.shadow_mode);
        }
        total
    }
}

/// Both answers' counts of a domain, `[OK, OVER_LIMIT]`, over its stripes.
fn decision_totals(stripes: &Striped<[AtomicU64; 2]>) -> [u64; 2] {
    stripes.each().fold([0, 0], |[ok, over], [o, v]| {
        [
            ok.wrapping_add(o.load(Ordering::Relaxed)),
            over.wrapping_add(v.load(Ordering::Relaxed)),
        ]
    })
}

/// What one limited descriptor did, for [`Metrics::record_rule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleHit {
    /// Hits of the descriptor.
    pub hits: u64,
    /// The limit.
    pub limit: u64,
    /// Count before and after this request (fixed-window semantics; the
    /// other algorithms report their window sums).
    pub before: u64,
    /// See `before`.
    pub after: u64,
    /// Over the limit.
    pub over_limit: bool,
    /// Answered from the local over-limit cache.
    pub local_cache: bool,
    /// The rule is in shadow mode.
    pub shadow_mode: bool,
}

/// Longest label value built from request data (stats keys of runtime
/// values, unknown domains); longer ones are cut at a character boundary,
/// so they may share a series.
pub(crate) const MAX_LABEL_BYTES: usize = 256;

/// Most unknown domains with a series of their own: callers choose them, so
/// they get a small cap of their own; past it they count in
/// `ratelimit_metrics_series_dropped_total`.
pub(crate) const MAX_UNKNOWN_DOMAINS: usize = 100;

/// `text` cut to at most [`MAX_LABEL_BYTES`], on a character boundary.
fn bounded_label(text: &str) -> &str {
    if text.len() <= MAX_LABEL_BYTES {
        return text;
    }
    let mut end = MAX_LABEL_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// All of floodgate's metrics.
#[derive(Debug)]
pub struct Metrics {
    near_limit_ratio: f64,
    max_series: usize,
    /// Each rule's counters, a stripe per thread (summed by readers).
    rules: Series<Striped<RuleCounters>>,
    domains_not_found: Series<AtomicU64>,
    /// Answers per domain a rule file defines: `[OK, OVER_LIMIT]`.
    decisions: Series<Striped<[AtomicU64; 2]>>,
    series_dropped: AtomicU64,
    global_shadow_mode: AtomicU64,
    total_requests: Counter,
    service_errors: AtomicU64,
    store_errors: AtomicU64,
    failure_mode_answers: AtomicU64,
    /// Requests shed: their caller's deadline passed before they were
    /// served (`reason="deadline"`).
    shed: AtomicU64,
    /// Requests shed at admission, before they were decoded, because the
    /// wait for a thread would have made them late (`reason="queue"`).
    shed_queue: AtomicU64,
    in_flight: Gauge,
    request_latency: Histogram,
    store_latency: Histogram,
    /// The reference's response-time timer, in whole milliseconds.
    response_time_ms: statsd_names::TimerCounts,
    /// statsd lines not delivered (sink unreachable or slow).
    statsd_dropped: AtomicU64,
    /// RLQS streams, buckets and assignments.
    pub rlqs: rlqs::RlqsMetrics,
    /// Leased blocks taken, given back and stranded.
    pub lease: lease::LeaseMetrics,
    /// Calls to the operator views.
    pub admin: admin::AdminMetrics,
    /// Limit tables' entries and changes.
    pub table: table::TableMetrics,
    /// Each store's decisions, by name.
    pub stores: store::StoreStatsSet,
    /// The last 15 minutes, for the live page.
    history: history::History,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(0.8, DEFAULT_MAX_SERIES)
    }
}

impl Metrics {
    /// Metrics with `NEAR_LIMIT_RATIO` and a cap on per-rule series.
    pub fn new(near_limit_ratio: f64, max_series: usize) -> Self {
        Self {
            near_limit_ratio,
            max_series,
            rules: Series::default(),
            domains_not_found: Series::default(),
            decisions: Series::default(),
            series_dropped: AtomicU64::new(0),
            global_shadow_mode: AtomicU64::new(0),
            total_requests: Counter::default(),
            service_errors: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
            failure_mode_answers: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            shed_queue: AtomicU64::new(0),
            in_flight: Gauge::default(),
            request_latency: Histogram::default(),
            store_latency: Histogram::default(),
            response_time_ms: statsd_names::TimerCounts::default(),
            statsd_dropped: AtomicU64::new(0),
            rlqs: rlqs::RlqsMetrics::default(),
            lease: lease::LeaseMetrics::default(),
            admin: admin::AdminMetrics::default(),
            table: table::TableMetrics::default(),
            stores: store::StoreStatsSet::default(),
            history: history::History::default(),
        }
    }

    /// The counters of `stats_key`, created on first use while under the
    /// series cap.
    fn rule(&self, stats_key: &str) -> Option<Arc<Striped<RuleCounters>>> {
        self.rules
            .get_or_add(bounded_label(stats_key), self.max_series)
    }

    /// Records one limited descriptor with the reference's hits-aware
    /// accounting (near/over/within/shadow).
    pub fn record_rule(&self, stats_key: &str, hit: RuleHit) {
        // The common case: a known series, counted without a lock or a
        // reference count (no write any other request shares but the
        // series' own counters).
        if self
            .rules
            .with(bounded_label(stats_key), |counters| {
                self.count_rule(counters.local(), hit);
            })
            .is_some()
        {
            return;
        }
        match self.rule(stats_key) {
            Some(counters) => self.count_rule(counters.local(), hit),
            None => {
                self.series_dropped
                    .fetch_add(hit.hits.max(1), Ordering::Relaxed);
            }
        }
    }

    fn count_rule(&self, c: &RuleCounters, hit: RuleHit) {
        let add = |counter: &AtomicU64, n: u64| {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&c.total_hits, hit.hits);
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let threshold = (hit.limit as f64 * self.near_limit_ratio).floor() as u64;
        if hit.local_cache {
            add(&c.over_limit, hit.hits);
            add(&c.over_limit_with_local_cache, hit.hits);
        } else if hit.over_limit {
            if hit.before >= hit.limit {
                add(&c.over_limit, hit.hits);
            } else {
                add(&c.over_limit, hit.after.saturating_sub(hit.limit));
                add(
                    &c.near_limit,
                    hit.limit.saturating_sub(threshold.max(hit.before)),
                );
            }
        } else {
            add(&c.within_limit, hit.hits);
            if hit.after > threshold {
                if hit.before >= threshold {
                    add(&c.near_limit, hit.hits);
                } else {
                    add(&c.near_limit, hit.after - threshold);
                }
            }
        }
        if hit.shadow_mode && (hit.over_limit || hit.local_cache) {
            let shadowed = if hit.local_cache || hit.before >= hit.limit {
                hit.hits
            } else {
                hit.after.saturating_sub(hit.limit)
            };
            add(&c.shadow_mode, shadowed);
        }
    }

    /// Counts `hits` that a rule's shadow (candidate) limits would have
    /// denied, in the rule's `shadow_mode` stat.
    pub fn record_shadow(&self, stats_key: &str, hits: u64) {
        match self.rule(stats_key) {
            Some(c) => c.local().shadow_mode.fetch_add(hits, Ordering::Relaxed),
            None => self.series_dropped.fetch_add(hits, Ordering::Relaxed),
        };
    }

    /// Counts a request for a domain no rule file defines.
    pub fn record_domain_not_found(&self, domain: &str) {
        let domain = bounded_label(domain);
        match self
            .domains_not_found
            .get_or_add(domain, self.max_series.min(MAX_UNKNOWN_DOMAINS))
        {
            Some(counter) => counter.fetch_add(1, Ordering::Relaxed),
            None => self.series_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Counts one answer for `domain` (one the rules define: callers
    /// cannot grow the series), OVER_LIMIT or OK.
    pub fn record_decision(&self, domain: &str, over_limit: bool) {
        let at = usize::from(over_limit);
        let count = |counters: &Striped<[AtomicU64; 2]>| {
            if let Some(counter) = counters.local().get(at) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        };
        if self.decisions.with(domain, count).is_some() {
            return;
        }
        match self.decisions.get_or_add(domain, self.max_series) {
            Some(counters) => count(&counters),
            None => {
                self.series_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a request answered OK only because of global shadow mode.
    pub fn record_global_shadow(&self) {
        self.global_shadow_mode.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a store failure, and whether the failure mode answered anyway.
    pub fn record_store_error(&self, answered: bool) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
        if answered {
            self.failure_mode_answers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the latency of one store round trip.
    pub fn observe_store(&self, elapsed: Duration) {
        self.store_latency.observe(elapsed);
    }

    /// Marks a request as started; the guard marks it finished when dropped.
    /// It borrows the metrics: no reference count is touched per request.
    pub fn start_request(&self) -> RequestGuard<'_> {
        self.in_flight.add(1);
        self.total_requests.add(1);
        RequestGuard {
            metrics: self,
            started: std::time::Instant::now(),
        }
    }

    /// Counts a request shed because its caller's deadline passed before it
    /// was served.
    pub fn record_shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests shed so far because their deadline had passed.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    /// Counts a request shed at admission: the wait for a thread would
    /// have made it late.
    pub fn record_shed_queue(&self) {
        self.shed_queue.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests shed at admission so far.
    pub fn shed_queue(&self) -> u64 {
        self.shed_queue.load(Ordering::Relaxed)
    }

    /// Counts a request that failed (bad request or store failure).
    pub fn record_service_error(&self) {
        self.service_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts statsd lines that could not be delivered.
    pub fn record_statsd_dropped(&self, lines: u64) {
        self.statsd_dropped.fetch_add(lines, Ordering::Relaxed);
    }

    /// statsd lines not delivered so far.
    pub fn statsd_dropped(&self) -> u64 {
        self.statsd_dropped.load(Ordering::Relaxed)
    }

    /// The counters of one stats key, if tracked (for tests and tools):
    /// their totals now.
    pub fn rule_counters(&self, stats_key: &str) -> Option<RuleCounters> {
        self.rules.get(stats_key).map(|c| RuleCounters::sum(&c))
    }
}

/// Marks the end of a request when dropped.
#[derive(Debug)]
pub struct RequestGuard<'a> {
    metrics: &'a Metrics,
    started: std::time::Instant,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.add(-1);
        let elapsed = self.started.elapsed();
        self.metrics.request_latency.observe(elapsed);
        self.metrics.response_time_ms.observe(elapsed);
    }
}
