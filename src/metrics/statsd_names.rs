//! The reference's stats under their statsd names, read from the
//! [`Metrics`] snapshot: what the statsd sink sends and what the
//! Prometheus mapper maps. Names as the reference builds them (its stats
//! manager and gRPC interceptor):
//!
//! | stat | kind |
//! |---|---|
//! | `ratelimit.service.rate_limit.<stats key>.{total_hits,over_limit,near_limit,within_limit,over_limit_with_local_cache,shadow_mode}` | counter |
//! | `ratelimit.service.rate_limit.<domain>.domain_not_found` | counter |
//! | `ratelimit.service.{config_load_success,config_load_error,global_shadow_mode}` | counter |
//! | `ratelimit.service.call.should_rate_limit.{redis_error,service_error}` | counter |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | counter |
//! | `ratelimit_server.ShouldRateLimit.response_time` | timer, whole milliseconds |
//!
//! Stats keys and domains are sanitised as the reference does (`:` and `|`
//! become `_`, and so do the dots of IPv4 addresses). `EXTRA_TAGS` are
//! appended in gostats' form, `.__<key>=<value>`, sorted by key. As in the
//! reference, a counter that never moved is not reported.

use super::{MetricType, Metrics, RuleCounters};
use crate::metrics::ReloadStats;
use regex::Regex;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The response-time timer's name.
pub(crate) const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// One stat's current value (counters are totals since start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The statsd name, tags included.
    pub name: String,
    /// Counter or gauge.
    pub kind: MetricType,
    /// The value.
    pub value: u64,
}

/// `EXTRA_TAGS`: pairs appended to every stat name, sorted by key; values
/// have `.`, `:` and `|` replaced by `_`, and empty keys or values are left
/// out (as gostats does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags(Vec<(String, String)>);

impl Tags {
    /// Parses `k1:v1,k2:v2` (the reference's map form).
    ///
    /// # Errors
    ///
    /// The offending item when one has no `:`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for item in text.split(',').filter(|i| !i.trim().is_empty()) {
            let Some((key, value)) = item.split_once(':') else {
                return Err(item.to_owned());
            };
            pairs.push((key.trim().to_owned(), value.trim().to_owned()));
        }
        Ok(Self::from_pairs(pairs))
    }

    /// Tags from pairs.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        let mut pairs: Vec<(String, String)> = pairs
            .into_iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k, v.replace(['.', ':', '|'], "_")))
            .collect();
        pairs.sort();
        pairs.dedup_by(|a, b| a.0 == b.0);
        Self(pairs)
    }

    /// The pairs, sorted by key.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// `name` with the tags appended as `.__k=v`.
    pub fn apply(&self, name: &str) -> String {
        let mut out = name.to_owned();
        for (k, v) in &self.0 {
            out.push_str(".__");
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

/// Splits gostats' serialized tags back off a name: `a.b.__k=v` is
/// `("a.b", [("k", "v")])`.
pub(crate) fn split_tags(name: &str) -> (&str, Vec<(&str, &str)>) {
    let Some((short, rest)) = name.split_once(".__") else {
        return (name, Vec::new());
    };
    let tags = rest
        .split(".__")
        .filter_map(|pair| pair.split_once('='))
        .collect();
    (short, tags)
}

static IPV4: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}").expect("a valid constant regex")
});

/// The reference's `SanitizeStatName`: `:` and `|` become `_`, and so do
/// the dots inside anything shaped like an IPv4 address.
pub(crate) fn sanitize_stat_name(name: &str) -> String {
    let replaced = name.replace([':', '|'], "_");
    IPV4.replace_all(&replaced, |c: &regex::Captures<'_>| {
        c.get(0)
            .map_or_else(String::new, |m| m.as_str().replace('.', "_"))
    })
    .into_owned()
}

/// Longest response time recorded exactly; slower requests count as this
/// many milliseconds (far beyond any rate-limit call's deadline).
pub(crate) const MAX_TIMER_MS: u64 = 10_000;

/// Response times in whole milliseconds (the reference's timer unit): one
/// counter per millisecond, so both a statsd flush (the new observations)
/// and a Prometheus histogram with any buckets can be derived exactly.
#[derive(Debug)]
pub(super) struct TimerCounts {
    /// The first [`STRIPED_MS`] milliseconds, where nearly every request
    /// lands: a stripe per thread, so requests on many cores do not all
    /// add to one cache line.
    fast: super::striped::Striped<[AtomicU64; STRIPED_MS]>,
    /// Every millisecond up to [`MAX_TIMER_MS`] (those below
    /// [`STRIPED_MS`] stay zero).
    counts: Box<[AtomicU64]>,
}

/// Milliseconds counted per thread; see [`TimerCounts`].
const STRIPED_MS: usize = 4;

impl Default for TimerCounts {
    fn default() -> Self {
        Self {
            fast: super::striped::Striped::default(),
            counts: (0..=MAX_TIMER_MS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl TimerCounts {
    pub(super) fn observe(&self, elapsed: Duration) {
        let ms = u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_TIMER_MS);
        let Ok(ms) = usize::try_from(ms) else { return };
        let slot = if ms < STRIPED_MS {
            self.fast.local().get(ms)
        } else {
            self.counts.get(ms)
        };
        if let Some(slot) = slot {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(milliseconds, observations)` for every value seen, ascending.
    pub(super) fn snapshot(&self) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .zip(0_u64..)
            .filter_map(|(count, ms)| {
                let mut n = count.load(Ordering::Relaxed);
                if let Some(i) = usize::try_from(ms).ok().filter(|&i| i < STRIPED_MS) {
                    for fast in self.fast.each() {
                        n = n.wrapping_add(fast.get(i).map_or(0, |c| c.load(Ordering::Relaxed)));
                    }
                }
                (n > 0).then_some((ms, n))
            })
            .collect()
    }
}

impl Metrics {
    /// Every reference stat that has moved, under its statsd name with
    /// `tags` appended; `reloads` gives the config load counts.
    pub fn reference_stats(&self, reloads: Option<&ReloadStats>, tags: &Tags) -> Vec<Stat> {
        let mut stats = Vec::new();
        let mut push = |name: String, value: u64| {
            if value > 0 {
                stats.push(Stat {
                    name: tags.apply(&name),
                    kind: MetricType::Counter,
                    value,
                });
            }
        };
        type Get = fn(&RuleCounters) -> &AtomicU64;
        let per_rule: [(&str, Get); 6] = [
            ("total_hits", |c| &c.total_hits),
            ("over_limit", |c| &c.over_limit),
            ("near_limit", |c| &c.near_limit),
            ("over_limit_with_local_cache", |c| {
                &c.over_limit_with_local_cache
            }),
            ("within_limit", |c| &c.within_limit),
            ("shadow_mode", |c| &c.shadow_mode),
        ];
        {
            let rules = self.rules.load();
            let mut keys: Vec<(&str, RuleCounters)> = rules
                .iter()
                .map(|(key, stripes)| (key, RuleCounters::sum(stripes)))
                .collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            for (key, counters) in keys {
                let key = sanitize_stat_name(key);
                for (stat, get) in per_rule {
                    push(
                        format!("ratelimit.service.rate_limit.{key}.{stat}"),
                        get(&counters).load(Ordering::Relaxed),
                    );
                }
            }
        }
        {
            let domains = self.domains_not_found.load();
            let mut names: Vec<(&str, &AtomicU64)> = domains.iter().collect();
            names.sort_by(|a, b| a.0.cmp(b.0));
            for (domain, count) in names {
                push(
                    format!(
                        "ratelimit.service.rate_limit.{}.domain_not_found",
                        sanitize_stat_name(domain)
                    ),
                    count.load(Ordering::Relaxed),
                );
            }
        }
        let (success, error) = reloads.map_or((0, 0), |r| (r.success(), r.error()));
        push("ratelimit.service.config_load_success".to_owned(), success);
        push("ratelimit.service.config_load_error".to_owned(), error);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        push(
            "ratelimit.service.global_shadow_mode".to_owned(),
            load(&self.global_shadow_mode),
        );
        push(
            "ratelimit.service.call.should_rate_limit.redis_error".to_owned(),
            load(&self.store_errors),
        );
        push(
            "ratelimit.service.call.should_rate_limit.service_error".to_owned(),
            load(&self.service_errors),
        );
        push(
            "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
            self.total_requests.get(),
        );
        stats
    }

    /// Response times seen since start: `(milliseconds, observations)`,
    /// ascending (the `ratelimit_server.ShouldRateLimit.response_time` timer).
    pub fn response_times_ms(&self) -> Vec<(u64, u64)> {
        self.response_time_ms.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RuleHit;

    #[test]
    fn names_are_the_references_with_sanitised_keys_and_tags() {
        let m = Metrics::new(0.8, 100);
        let hit = RuleHit {
            hits: 3,
            limit: 2,
            before: 0,
            after: 3,
            over_limit: true,
            local_cache: false,
            shadow_mode: false,
        };
        m.record_rule("edge.remote_address_10.0.0.1", hit);
        m.record_rule(
            "edge.path_a:b|c",
            RuleHit {
                hits: 1,
                limit: 5,
                after: 1,
                over_limit: false,
                ..hit
            },
        );
        m.record_domain_not_found("ghost.1.2.3.4");
        let stats = m.reference_stats(None, &Tags::default());
        let names: Vec<String> = stats
            .iter()
            .map(|s| format!("{}={}", s.name, s.value))
            .collect();
        assert_eq!(
            names,
            [
                "ratelimit.service.rate_limit.edge.path_a_b_c.total_hits=1",
                "ratelimit.service.rate_limit.edge.path_a_b_c.within_limit=1",
                "ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.total_hits=3",
                "ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.over_limit=1",
                "ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.near_limit=1",
                "ratelimit.service.rate_limit.ghost.1_2_3_4.domain_not_found=1",
            ]
        );
        let tags = Tags::parse("zone:eu.west, app:rl ,empty:").unwrap();
        assert_eq!(tags.apply("a.b"), "a.b.__app=rl.__zone=eu_west");
        assert_eq!(
            split_tags("a.b.__app=rl.__zone=eu_west"),
            ("a.b", vec![("app", "rl"), ("zone", "eu_west")])
        );
        assert!(Tags::parse("novalue").is_err());
    }

    #[test]
    fn response_times_are_whole_milliseconds_capped() {
        let t = TimerCounts::default();
        t.observe(Duration::from_micros(900));
        t.observe(Duration::from_micros(1_999));
        t.observe(Duration::from_millis(2));
        t.observe(Duration::from_secs(3_600));
        assert_eq!(t.snapshot(), [(0, 1), (1, 1), (2, 1), (MAX_TIMER_MS, 1)]);
    }
}
