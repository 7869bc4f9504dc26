//! Rendering every metric in the Prometheus text format.

use super::{Metrics, RuleCounters, decision_totals};
use crate::metrics::ReloadStats;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

impl Metrics {
    /// Everything, in the Prometheus text exposition format, with the rule
    /// reload counts (`config_load_success` / `config_load_error`).
    pub fn render(&self, reloads: Option<&ReloadStats>) -> String {
        let mut out = String::with_capacity(4_096);
        let rules = self.rules.load();
        let mut keys: Vec<(&str, RuleCounters)> = rules
            .iter()
            .map(|(key, stripes)| (key, RuleCounters::sum(stripes)))
            .collect();
        keys.sort_by_key(|(key, _)| *key);
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
            for (key, counters) in &keys {
                let (domain, rest) = key.split_once('.').unwrap_or((key, ""));
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",key=\"{}\"}} {}",
                    escape(domain),
                    escape(rest),
                    get(counters).load(Ordering::Relaxed)
                );
            }
        }
        drop(rules);
        let name = "ratelimit_decisions_total";
        let _ = writeln!(
            out,
            "# HELP {name} Answers to ShouldRateLimit per domain the rules define, by overall code.\n# TYPE {name} counter"
        );
        let decisions = self.decisions.load();
        let mut names: Vec<_> = decisions.iter().collect();
        names.sort_by_key(|(domain, _)| *domain);
        for (domain, counts) in names {
            for (code, count) in ["OK", "OVER_LIMIT"].iter().zip(decision_totals(counts)) {
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",code=\"{code}\"}} {count}",
                    escape(domain),
                );
            }
        }
        drop(decisions);
        let name = "ratelimit_service_rate_limit_domain_not_found";
        let _ = writeln!(
            out,
            "# HELP {name} Requests for a domain no rule file defines.\n# TYPE {name} counter"
        );
        let domains = self.domains_not_found.load();
        let mut names: Vec<_> = domains.iter().collect();
        names.sort_by_key(|(domain, _)| *domain);
        for (domain, count) in names {
            let _ = writeln!(
                out,
                "{name}{{domain=\"{}\"}} {}",
                escape(domain),
                count.load(Ordering::Relaxed)
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
        let counters: [(&str, &str, u64); 7] = [
            (
                "ratelimit_service_global_shadow_mode",
                "Requests answered OK only because of SHADOW_MODE.",
                self.global_shadow_mode.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_server_should_rate_limit_total_requests",
                "ShouldRateLimit requests (gRPC and /json).",
                self.total_requests.get(),
            ),
            (
                "ratelimit_service_call_should_rate_limit_service_error",
                "Requests that got an error instead of a decision.",
                self.service_errors.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_service_call_should_rate_limit_redis_error",
                "Store failures (Redis errors and timeouts).",
                self.store_errors.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_service_store_failure_mode_answers",
                "Requests answered by the failure mode while the store failed.",
                self.failure_mode_answers.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_metrics_series_dropped_total",
                "Hits not recorded because the per-rule series cap was reached.",
                self.series_dropped.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_statsd_dropped_lines_total",
                "statsd lines not delivered (USE_STATSD sink unreachable or slow).",
                self.statsd_dropped.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {counter}",
            );
        }
        let name = "ratelimit_server_should_rate_limit_in_flight";
        let _ = writeln!(
            out,
            "# HELP {name} Requests being answered now.\n# TYPE {name} gauge\n{name} {}",
            self.in_flight.get()
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
        self.rlqs.render(&mut out);
        self.lease.render(&mut out);
        let _ = writeln!(
            out,
            "# HELP ratelimit_shed_total Requests answered by FAILURE_MODE at once, uncounted, because their caller's deadline passed (deadline) or the wait for a thread would have made them late (queue).\n# TYPE ratelimit_shed_total counter\nratelimit_shed_total{{reason=\"deadline\"}} {}\nratelimit_shed_total{{reason=\"queue\"}} {}",
            self.shed.load(Ordering::Relaxed),
            self.shed_queue.load(Ordering::Relaxed)
        );
        self.admin.render(&mut out);
        self.table.render(&mut out);
        out
    }
}

/// Appends the embedded store's gauges and eviction counter.
pub(crate) fn render_memory_store(out: &mut String, stats: &crate::metrics::store::MemoryStats) {
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
    if let Some(snapshot) = stats.snapshot {
        let name = "ratelimit_memory_store_snapshot_writes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Snapshot writes of the embedded store (MEMORY_STORE_SNAPSHOT_PATH), by result.\n# TYPE {name} counter\n{name}{{result=\"ok\"}} {}\n{name}{{result=\"error\"}} {}",
            snapshot.written, snapshot.failed
        );
        let name = "ratelimit_memory_store_snapshot_bytes";
        let _ = writeln!(
            out,
            "# HELP {name} Size of the last snapshot written.\n# TYPE {name} gauge\n{name} {}",
            snapshot.bytes
        );
        let name = "ratelimit_memory_store_snapshot_last_success_timestamp_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} When the last snapshot was written (Unix seconds; 0: never).\n# TYPE {name} gauge\n{name} {}",
            snapshot.last_written.0 / 1_000
        );
    }
}

/// Appends the Redis store's call counters: requests per call is how well
/// concurrent requests share script calls.
pub(crate) fn render_redis_calls(out: &mut String, stats: crate::metrics::store::CallStats) {
    let counters = [
        (
            "ratelimit_redis_calls_total",
            "Script calls sent to Redis.",
            stats.calls,
        ),
        (
            "ratelimit_redis_call_requests_total",
            "Requests those script calls carried (divided by the calls: requests per call).",
            stats.requests,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
}

/// Escapes a Prometheus label value.
pub(super) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
