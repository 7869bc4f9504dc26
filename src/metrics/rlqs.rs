//! RLQS metrics: streams and buckets open now, reports in, assignments and
//! abandons out, refused input by reason, and the token rate this instance
//! has granted. Every label set is fixed (no request data in labels).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Why part of an RLQS stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A bucket id with too many entries, an entry too long, or none.
    BadBucket,
    /// A stream past its cap of distinct buckets.
    TooManyBuckets,
    /// A bucket that already has the most members the registry tracks.
    RegistryFull,
    /// A stream ended for a bad domain (empty, too long, or changed).
    BadDomain,
}

impl Refusal {
    const ALL: [Self; 4] = [
        Self::BadBucket,
        Self::TooManyBuckets,
        Self::RegistryFull,
        Self::BadDomain,
    ];

    /// The `reason` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadBucket => "bad_bucket",
            Self::TooManyBuckets => "too_many_buckets",
            Self::RegistryFull => "registry_full",
            Self::BadDomain => "bad_domain",
        }
    }
}

/// What an assignment told an Envoy to do, for the `strategy` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// A blanket ALLOW_ALL.
    AllowAll,
    /// A blanket DENY_ALL.
    DenyAll,
    /// A token bucket.
    TokenBucket,
}

/// Counters and gauges of the RLQS service.
#[derive(Debug, Default)]
pub struct RlqsMetrics {
    streams: AtomicI64,
    buckets: AtomicI64,
    reports: AtomicU64,
    pushed: [AtomicU64; 3],
    abandoned: AtomicU64,
    refused: [AtomicU64; 4],
    store_errors: AtomicU64,
    /// Sum of the token rates in force, in millionths of a token per second.
    granted_micro: AtomicI64,
}

impl RlqsMetrics {
    /// A stream opened (+1) or closed (-1).
    pub fn add_streams(&self, delta: i64) {
        self.streams.fetch_add(delta, Ordering::Relaxed);
    }

    /// Buckets tracked by open streams went up or down by `delta`.
    pub fn add_buckets(&self, delta: i64) {
        self.buckets.fetch_add(delta, Ordering::Relaxed);
    }

    /// `n` bucket usage reports arrived.
    pub fn record_reports(&self, n: u64) {
        self.reports.fetch_add(n, Ordering::Relaxed);
    }

    /// One assignment was pushed.
    pub fn record_pushed(&self, pushed: Pushed) {
        if let Some(count) = self.pushed.get(pushed as usize) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One bucket was abandoned.
    pub fn record_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// Input was refused.
    pub fn record_refused(&self, refusal: Refusal) {
        if let Some(count) = self.refused.get(refusal as usize) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A report's store round trip failed.
    pub fn record_store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The token rate in force changed by `delta_micro` millionths of a
    /// token per second.
    pub fn add_granted(&self, delta_micro: i64) {
        self.granted_micro.fetch_add(delta_micro, Ordering::Relaxed);
    }

    /// Appends every RLQS metric in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let gauge = |out: &mut String, name: &str, help: &str, value: i64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        gauge(
            out,
            "ratelimit_rlqs_streams",
            "RLQS streams open now.",
            self.streams.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "ratelimit_rlqs_buckets",
            "Buckets tracked by the open RLQS streams.",
            self.buckets.load(Ordering::Relaxed),
        );
        counter(
            out,
            "ratelimit_rlqs_reports_total",
            "Bucket usage reports received.",
            self.reports.load(Ordering::Relaxed),
        );
        let name = "ratelimit_rlqs_assignments_pushed_total";
        let _ = writeln!(
            out,
            "# HELP {name} Quota assignments sent, by strategy.\n# TYPE {name} counter"
        );
        for (strategy, value) in ["allow_all", "deny_all", "token_bucket"]
            .iter()
            .zip(&self.pushed)
        {
            let _ = writeln!(
                out,
                "{name}{{strategy=\"{strategy}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        counter(
            out,
            "ratelimit_rlqs_abandoned_total",
            "Buckets abandoned after being idle.",
            self.abandoned.load(Ordering::Relaxed),
        );
        let name = "ratelimit_rlqs_refused_total";
        let _ = writeln!(
            out,
            "# HELP {name} RLQS input refused, by reason.\n# TYPE {name} counter"
        );
        for refusal in Refusal::ALL {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                refusal.as_str(),
                self.refused
                    .get(refusal as usize)
                    .map_or(0, |c| c.load(Ordering::Relaxed))
            );
        }
        counter(
            out,
            "ratelimit_rlqs_store_errors_total",
            "RLQS reports whose store round trip failed.",
            self.store_errors.load(Ordering::Relaxed),
        );
        #[allow(clippy::cast_precision_loss)] // a gauge for humans
        let granted = self.granted_micro.load(Ordering::Relaxed) as f64 / 1e6;
        let name = "ratelimit_rlqs_granted_tokens_per_second";
        let _ = writeln!(
            out,
            "# HELP {name} Sum of the token-bucket rates this instance has assigned and not withdrawn.\n# TYPE {name} gauge\n{name} {granted}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_with_fixed_labels() {
        let metrics = RlqsMetrics::default();
        metrics.add_streams(2);
        metrics.add_streams(-1);
        metrics.add_buckets(3);
        metrics.record_pushed(Pushed::TokenBucket);
        metrics.record_refused(Refusal::TooManyBuckets);
        metrics.add_granted(1_500_000);
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains("ratelimit_rlqs_streams 1\n"), "{out}");
        assert!(out.contains("ratelimit_rlqs_buckets 3\n"), "{out}");
        assert!(
            out.contains("ratelimit_rlqs_assignments_pushed_total{strategy=\"token_bucket\"} 1\n")
        );
        assert!(out.contains("ratelimit_rlqs_assignments_pushed_total{strategy=\"deny_all\"} 0\n"));
        assert!(out.contains("ratelimit_rlqs_refused_total{reason=\"too_many_buckets\"} 1\n"));
        assert!(
            out.contains("ratelimit_rlqs_granted_tokens_per_second 1.5\n"),
            "{out}"
        );
    }
}
