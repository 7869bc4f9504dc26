//! A fixed-bucket latency histogram, lock-free, rendered in the Prometheus
//! text format.

use super::striped::Striped;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
pub(super) const LATENCY_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// A latency histogram with fixed buckets.
///
/// Each observation increments only the one bucket it falls in (plus the
/// count and sum): three atomic additions per request, whatever the number
/// of buckets, on the calling thread's stripe. The cumulative `le` counts
/// Prometheus wants are summed when rendering, which is rare.
#[derive(Debug, Default)]
pub(super) struct Histogram {
    stripes: Striped<Cells>,
}

/// One stripe of a histogram.
#[derive(Debug, Default)]
struct Cells {
    /// `buckets[i]`: observations in (`LATENCY_BUCKETS[i-1]`,
    /// `LATENCY_BUCKETS[i]`]; those above the last bound are only in
    /// `count`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub(super) fn observe(&self, elapsed: Duration) {
        self.stripes.local().observe(elapsed);
    }

    /// Each bucket's own count (not cumulative), the total count and the
    /// sum in microseconds, over every stripe.
    fn totals(&self) -> ([u64; LATENCY_BUCKETS.len()], u64, u64) {
        let mut buckets = [0u64; LATENCY_BUCKETS.len()];
        let (mut count, mut sum) = (0u64, 0u64);
        for cells in self.stripes.each() {
            // The count first: observations landing meanwhile then never
            // make a bucket exceed the count.
            count = count.wrapping_add(cells.count.load(Ordering::Relaxed));
            sum = sum.wrapping_add(cells.sum_micros.load(Ordering::Relaxed));
            for (total, bucket) in buckets.iter_mut().zip(&cells.buckets) {
                *total = total.wrapping_add(bucket.load(Ordering::Relaxed));
            }
        }
        (buckets, count, sum)
    }

    /// Each bucket's own count (not cumulative) and the total count, for
    /// the live page's history.
    pub(super) fn counts(&self) -> ([u64; LATENCY_BUCKETS.len()], u64) {
        let (buckets, count, _) = self.totals();
        (buckets, count)
    }

    pub(super) fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let (buckets, count, sum_micros) = self.totals();
        let mut cumulative = 0u64;
        for (bucket, bound) in buckets.iter().zip(LATENCY_BUCKETS) {
            cumulative = cumulative.saturating_add(*bucket).min(count);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)] // a display value
        let sum = sum_micros as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

impl Cells {
    fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Some(bucket) = LATENCY_BUCKETS
            .iter()
            .position(|&bound| secs <= bound)
            .and_then(|i| self.buckets.get(i))
        {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}
