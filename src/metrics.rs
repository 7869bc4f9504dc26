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

use crate::config::ReloadStats;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Default cap on distinct per-rule stats keys.
pub const DEFAULT_MAX_SERIES: usize = 10_000;

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

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

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (bucket, bound) in self.buckets.iter().zip(LATENCY_BUCKETS) {
            if secs <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bucket, bound) in self.buckets.iter().zip(LATENCY_BUCKETS) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)] // a display value
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Longest label value built from request data (stats keys of runtime
/// values, unknown domains); longer ones are cut at a character boundary,
/// so they may share a series.
pub const MAX_LABEL_BYTES: usize = 256;

/// Most unknown domains with a series of their own: callers choose them, so
/// they get a small cap of their own; past it they count in
/// `ratelimit_metrics_series_dropped_total`.
pub const MAX_UNKNOWN_DOMAINS: usize = 100;

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
    rules: RwLock<HashMap<String, Arc<RuleCounters>>>,
    domains_not_found: RwLock<HashMap<String, AtomicU64>>,
    series_dropped: AtomicU64,
    global_shadow_mode: AtomicU64,
    total_requests: AtomicU64,
    service_errors: AtomicU64,
    store_errors: AtomicU64,
    failure_mode_answers: AtomicU64,
    in_flight: AtomicI64,
    request_latency: Histogram,
    store_latency: Histogram,
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
            rules: RwLock::new(HashMap::new()),
            domains_not_found: RwLock::new(HashMap::new()),
            series_dropped: AtomicU64::new(0),
            global_shadow_mode: AtomicU64::new(0),
            total_requests: AtomicU64::new(0),
            service_errors: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
            failure_mode_answers: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            request_latency: Histogram::default(),
            store_latency: Histogram::default(),
        }
    }

    /// The counters of `stats_key`, created on first use while under the
    /// series cap.
    fn rule(&self, stats_key: &str) -> Option<Arc<RuleCounters>> {
        let stats_key = bounded_label(stats_key);
        if let Some(counters) = self.rules.read().get(stats_key) {
            return Some(counters.clone());
        }
        let mut rules = self.rules.write();
        if let Some(counters) = rules.get(stats_key) {
            return Some(counters.clone());
        }
        if rules.len() >= self.max_series {
            return None;
        }
        let counters = Arc::new(RuleCounters::default());
        rules.insert(stats_key.to_owned(), counters.clone());
        Some(counters)
    }

    /// Records one limited descriptor with the reference's hits-aware
    /// accounting (near/over/within/shadow).
    pub fn record_rule(&self, stats_key: &str, hit: RuleHit) {
        let Some(c) = self.rule(stats_key) else {
            self.series_dropped
                .fetch_add(hit.hits.max(1), Ordering::Relaxed);
            return;
        };
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

    /// Counts a request for a domain no rule file defines.
    pub fn record_domain_not_found(&self, domain: &str) {
        let domain = bounded_label(domain);
        if let Some(counter) = self.domains_not_found.read().get(domain) {
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut domains = self.domains_not_found.write();
        if domains.len() >= self.max_series.min(MAX_UNKNOWN_DOMAINS)
            && !domains.contains_key(domain)
        {
            self.series_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        domains
            .entry(domain.to_owned())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
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
    pub fn start_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.total_requests.fetch_add(1, Ordering::Relaxed);
        RequestGuard {
            metrics: self.clone(),
            started: std::time::Instant::now(),
        }
    }

    /// Counts a request that failed (bad request or store failure).
    pub fn record_service_error(&self) {
        self.service_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters of one stats key, if tracked (for tests and tools).
    pub fn rule_counters(&self, stats_key: &str) -> Option<Arc<RuleCounters>> {
        self.rules.read().get(stats_key).cloned()
    }

    /// Everything, in the Prometheus text exposition format, with the rule
    /// reload counts (`config_load_success` / `config_load_error`).
    pub fn render(&self, reloads: Option<&ReloadStats>) -> String {
        let mut out = String::with_capacity(4_096);
        let rules = self.rules.read();
        let mut keys: Vec<&String> = rules.keys().collect();
        keys.sort();
        type Stat = fn(&RuleCounters) -> &AtomicU64;
        let stats: [(&str, Stat); 6] = [
            ("total_hits", |c| &c.total_hits),
            ("over_limit", |c| &c.over_limit),
            ("near_limit", |c| &c.near_limit),
            ("within_limit", |c| &c.within_limit),
            ("over_limit_with_local_cache", |c| {
                &c.over_limit_with_local_cache
            }),
            ("shadow_mode", |c| &c.shadow_mode),
        ];
        for (stat, get) in stats {
            let name = format!("ratelimit_service_rate_limit_{stat}");
            let _ = writeln!(
                out,
                "# HELP {name} Hits per rule: {stat} (reference stat ratelimit.service.rate_limit.<key>.{stat}).\n# TYPE {name} counter"
            );
            for key in &keys {
                let (domain, rest) = key.split_once('.').unwrap_or((key.as_str(), ""));
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",key=\"{}\"}} {}",
                    escape(domain),
                    escape(rest),
                    get(&rules[*key]).load(Ordering::Relaxed)
                );
            }
        }
        drop(rules);
        let name = "ratelimit_service_rate_limit_domain_not_found";
        let _ = writeln!(
            out,
            "# HELP {name} Requests for a domain no rule file defines.\n# TYPE {name} counter"
        );
        let domains = self.domains_not_found.read();
        let mut names: Vec<&String> = domains.keys().collect();
        names.sort();
        for domain in names {
            let _ = writeln!(
                out,
                "{name}{{domain=\"{}\"}} {}",
                escape(domain),
                domains[domain].load(Ordering::Relaxed)
            );
        }
        drop(domains);
        let (success, error) = reloads.map_or((0, 0), |r| (r.success(), r.error()));
        let loads = [
            (
                "ratelimit_service_config_load_success",
                "Rule reloads that took effect.",
                success,
            ),
            (
                "ratelimit_service_config_load_error",
                "Rule reloads rejected; the last good rules stay in force.",
                error,
            ),
        ];
        for (name, help, value) in loads {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let counters: [(&str, &str, &AtomicU64); 6] = [
            (
                "ratelimit_service_global_shadow_mode",
                "Requests answered OK only because of SHADOW_MODE.",
                &self.global_shadow_mode,
            ),
            (
                "ratelimit_server_should_rate_limit_total_requests",
                "ShouldRateLimit requests (gRPC and /json).",
                &self.total_requests,
            ),
            (
                "ratelimit_service_call_should_rate_limit_service_error",
                "Requests that got an error instead of a decision.",
                &self.service_errors,
            ),
            (
                "ratelimit_service_call_should_rate_limit_redis_error",
                "Store failures (Redis errors and timeouts).",
                &self.store_errors,
            ),
            (
                "ratelimit_service_store_failure_mode_answers",
                "Requests answered by the failure mode while the store failed.",
                &self.failure_mode_answers,
            ),
            (
                "ratelimit_metrics_series_dropped_total",
                "Hits not recorded because the per-rule series cap was reached.",
                &self.series_dropped,
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let name = "ratelimit_server_should_rate_limit_in_flight";
        let _ = writeln!(
            out,
            "# HELP {name} Requests being answered now.\n# TYPE {name} gauge\n{name} {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        self.request_latency.render(
            &mut out,
            "ratelimit_server_should_rate_limit_response_time_seconds",
            "Time to answer ShouldRateLimit.",
        );
        self.store_latency.render(
            &mut out,
            "ratelimit_store_round_trip_seconds",
            "Time of one store round trip.",
        );
        out
    }
}

/// Appends the embedded store's gauges and eviction counter.
pub fn render_memory_store(out: &mut String, stats: &crate::store::memory::MemoryStats) {
    let gauges = [
        (
            "ratelimit_memory_store_bytes",
            "Bytes the embedded store's counters hold (keys included).",
            stats.bytes as u64,
        ),
        (
            "ratelimit_memory_store_max_bytes",
            "Byte budget of the embedded store (MEMORY_STORE_MAX_BYTES).",
            stats.max_bytes as u64,
        ),
        (
            "ratelimit_memory_store_counters",
            "Counters the embedded store holds.",
            stats.counters as u64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    let name = "ratelimit_memory_store_evictions_total";
    let _ = writeln!(
        out,
        "# HELP {name} Counters evicted (least recently used first) to stay within the budget.\n# TYPE {name} counter\n{name} {}",
        stats.evictions
    );
}

/// Marks the end of a request when dropped.
#[derive(Debug)]
pub struct RequestGuard {
    metrics: Arc<Metrics>,
    started: std::time::Instant,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics.request_latency.observe(self.started.elapsed());
    }
}

/// Escapes a Prometheus label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_from_request_data_are_bounded_in_count_and_length() {
        let m = Metrics::default();
        for i in 0..1_000 {
            m.record_domain_not_found(&format!("caller-chosen-{i}"));
        }
        let long = "é".repeat(1_000);
        m.record_rule(&format!("d.user_{long}"), hit(0, 1, 10));
        m.record_rule(&format!("d.user_{long}x"), hit(0, 1, 10));
        let text = m.render(None);
        let unknown = text
            .lines()
            .filter(|l| l.starts_with("ratelimit_service_rate_limit_domain_not_found{"))
            .count();
        assert_eq!(unknown, MAX_UNKNOWN_DOMAINS);
        assert!(
            text.lines().all(|l| l.len() < 2 * MAX_LABEL_BYTES + 200),
            "a label longer than the bound"
        );
        // The two long keys share their cut series.
        assert_eq!(m.rules.read().len(), 1);
        assert_eq!(
            m.series_dropped.load(Ordering::Relaxed),
            1_000 - MAX_UNKNOWN_DOMAINS as u64
        );
    }

    fn hit(before: u64, hits: u64, limit: u64) -> RuleHit {
        let after = before + hits;
        RuleHit {
            hits,
            limit,
            before,
            after,
            over_limit: after > limit,
            local_cache: false,
            shadow_mode: false,
        }
    }

    #[test]
    fn reference_near_limit_vector() {
        // Limit 15, ratio 0.8: threshold 12.
        let m = Metrics::default();
        m.record_rule("d.k", hit(10, 1, 15)); // after 11: OK, near 0
        m.record_rule("d.k", hit(11, 2, 15)); // after 13: OK, near 1
        m.record_rule("d.k", hit(13, 3, 15)); // after 16: over 1
        let c = m.rule_counters("d.k").unwrap();
        assert_eq!(c.within_limit.load(Ordering::Relaxed), 3);
        assert_eq!(c.near_limit.load(Ordering::Relaxed), 1 + 2);
        assert_eq!(c.over_limit.load(Ordering::Relaxed), 1);
        m.record_rule(
            "d.k",
            RuleHit {
                local_cache: true,
                ..hit(16, 1, 15)
            },
        );
        assert_eq!(c.over_limit.load(Ordering::Relaxed), 2);
        assert_eq!(c.over_limit_with_local_cache.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn twenty_five_requests_on_twenty() {
        let m = Metrics::default();
        for before in 0..25 {
            m.record_rule("edge.user", hit(before, 1, 20));
        }
        let c = m.rule_counters("edge.user").unwrap();
        assert_eq!(c.total_hits.load(Ordering::Relaxed), 25);
        assert_eq!(c.within_limit.load(Ordering::Relaxed), 20);
        assert_eq!(c.over_limit.load(Ordering::Relaxed), 5);
        assert_eq!(c.near_limit.load(Ordering::Relaxed), 4);
        let text = m.render(None);
        assert!(
            text.contains(
                "ratelimit_service_rate_limit_within_limit{domain=\"edge\",key=\"user\"} 20"
            ),
            "{text}"
        );
    }

    #[test]
    fn series_are_capped_and_drops_counted() {
        let m = Metrics::new(0.8, 2);
        for i in 0..5 {
            m.record_rule(&format!("d.k_{i}"), hit(0, 1, 10));
        }
        assert!(m.rule_counters("d.k_1").is_some());
        assert!(m.rule_counters("d.k_2").is_none());
        assert!(
            m.render(None)
                .contains("ratelimit_metrics_series_dropped_total 3")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
