//! The last 15 minutes of the service, kept in the process for the live
//! page's charts: every `STEP` the cumulative counters are sampled into a
//! ring of `SLOTS` samples (bounded memory, about 20 KiB), and the page's
//! points are the differences between neighbours: requests per second, the
//! share of answers over the limit, the p99 decision latency, store errors
//! and shed answers per second.

use super::Metrics;
use super::histogram::LATENCY_BUCKETS;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Time between two samples.
pub(crate) const STEP: Duration = Duration::from_secs(5);

/// Samples kept: 15 minutes of `STEP`s, and the current one.
const SLOTS: usize = 181;

/// The cumulative counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    requests: u64,
    decisions: u64,
    over_limit: u64,
    store_errors: u64,
    shed: u64,
    latency: [u64; LATENCY_BUCKETS.len()],
    latency_count: u64,
}

/// The samples of the last 15 minutes.
#[derive(Debug, Default)]
pub(crate) struct History {
    samples: Mutex<VecDeque<(Instant, Sample)>>,
}

/// What happened between two samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Seconds before now the period ended.
    pub ago_secs: f64,
    /// ShouldRateLimit calls per second.
    pub requests_per_second: f64,
    /// Share of the answers (to domains the rules define) that were
    /// OVER_LIMIT, 0 to 1; 0 without answers.
    pub over_limit_share: f64,
    /// 99th percentile of the decision time, ms (the upper bound of its
    /// latency bucket); 0 without calls.
    pub p99_ms: f64,
    /// Store errors per second.
    pub store_errors_per_second: f64,
    /// Requests shed per second: answered by `FAILURE_MODE` at once,
    /// uncounted, as their caller's deadline had passed when they were
    /// served.
    pub shed_per_second: f64,
}

/// The live page's view: the last minute, and the points of the last 15
/// minutes, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryView {
    /// Seconds between two points.
    pub step_secs: u64,
    /// From a minute ago (or the oldest sample) to now.
    pub last_minute: Point,
    /// Oldest first; the last one ends now.
    pub points: Vec<Point>,
}

impl History {
    /// Records `sample` taken at `at`, forgetting the oldest past
    /// [`SLOTS`].
    pub(crate) fn record(&self, at: Instant, sample: Sample) {
        let mut samples = self.samples.lock();
        if samples.len() >= SLOTS {
            samples.pop_front();
        }
        samples.push_back((at, sample));
    }

    /// The view at `now`, whose counters are `current`.
    pub(crate) fn view(&self, now: Instant, current: Sample) -> HistoryView {
        let samples = self.samples.lock();
        let mut all: Vec<(Instant, Sample)> = samples.iter().copied().collect();
        drop(samples);
        all.push((now, current));
        let points = all
            .windows(2)
            .filter_map(|pair| match pair {
                [(from_at, from), (to_at, to)] => Some(point(*from_at, from, *to_at, to, now)),
                _ => None,
            })
            .collect();
        let minute_ago = now.checked_sub(Duration::from_secs(60));
        let (from_at, from) = all
            .iter()
            .find(|(at, _)| minute_ago.is_none_or(|m| *at >= m))
            .copied()
            .unwrap_or((now, current));
        HistoryView {
            step_secs: STEP.as_secs(),
            last_minute: point(from_at, &from, now, &current, now),
            points,
        }
    }
}

/// What happened from `from` (at `from_at`) to `to` (at `to_at`).
fn point(from_at: Instant, from: &Sample, to_at: Instant, to: &Sample, now: Instant) -> Point {
    let secs = to_at.saturating_duration_since(from_at).as_secs_f64();
    let per_second = |a: u64, b: u64| {
        if secs > 0.0 {
            to_f64(b.saturating_sub(a)) / secs
        } else {
            0.0
        }
    };
    let decisions = to.decisions.saturating_sub(from.decisions);
    let over = to.over_limit.saturating_sub(from.over_limit);
    Point {
        ago_secs: now.saturating_duration_since(to_at).as_secs_f64(),
        requests_per_second: per_second(from.requests, to.requests),
        over_limit_share: if decisions > 0 {
            to_f64(over) / to_f64(decisions)
        } else {
            0.0
        },
        p99_ms: p99_ms(from, to),
        store_errors_per_second: per_second(from.store_errors, to.store_errors),
        shed_per_second: per_second(from.shed, to.shed),
    }
}

/// The upper bound of the bucket holding the 99th percentile of the calls
/// between two samples (the last bound for calls above every bucket).
fn p99_ms(from: &Sample, to: &Sample) -> f64 {
    let count = to.latency_count.saturating_sub(from.latency_count);
    if count == 0 {
        return 0.0;
    }
    // The rank of the 99th percentile, rounded up.
    let rank = count.saturating_mul(99).div_ceil(100);
    let mut seen = 0u64;
    for ((a, b), bound) in from.latency.iter().zip(&to.latency).zip(LATENCY_BUCKETS) {
        seen = seen.saturating_add(b.saturating_sub(*a));
        if seen >= rank {
            return bound * 1_000.0;
        }
    }
    LATENCY_BUCKETS.last().map_or(0.0, |b| b * 1_000.0)
}

#[allow(clippy::cast_precision_loss)] // display values
fn to_f64(n: u64) -> f64 {
    n as f64
}

impl Metrics {
    /// The cumulative counters now.
    pub(crate) fn sample(&self) -> Sample {
        use std::sync::atomic::Ordering::Relaxed;
        let (decisions, over_limit) =
            self.decisions
                .load()
                .values()
                .fold((0u64, 0u64), |(all, over), counts| {
                    let [ok, over_limit] = super::decision_totals(counts);
                    (
                        all.saturating_add(ok).saturating_add(over_limit),
                        over.saturating_add(over_limit),
                    )
                });
        let (latency, latency_count) = self.request_latency.counts();
        Sample {
            requests: self.total_requests.get(),
            decisions,
            over_limit,
            store_errors: self.store_errors.load(Relaxed),
            shed: self.shed.load(Relaxed) + self.shed_queue.load(Relaxed),
            latency,
            latency_count,
        }
    }

    /// Samples the counters into the history (every `STEP`, by the
    /// server's background task).
    pub fn record_history(&self, at: Instant) {
        self.history.record(at, self.sample());
    }

    /// The live page's view of the last 15 minutes.
    pub fn history_view(&self, now: Instant) -> HistoryView {
        self.history.view(now, self.sample())
    }
}

#[cfg(test)]
mod tests {
    use super::{History, SLOTS, STEP, Sample};
    use std::time::Instant;

    fn sample(requests: u64, decisions: u64, over: u64, fast: u64, slow: u64) -> Sample {
        let mut latency = [0; super::LATENCY_BUCKETS.len()];
        latency[0] = fast; // <= 0.1 ms
        latency[7] = slow; // <= 25 ms
        Sample {
            requests,
            decisions,
            over_limit: over,
            store_errors: 0,
            shed: 0,
            latency,
            latency_count: fast + slow,
        }
    }

    #[test]
    fn points_are_the_rates_between_samples_and_the_last_minute_is_right_at_once() {
        let history = History::default();
        let t0 = Instant::now();
        history.record(t0, sample(0, 0, 0, 0, 0));
        history.record(t0 + STEP, sample(50, 50, 10, 99, 1));
        // 30 calls since, 10 over the limit: the view says so at once.
        let now = t0 + STEP * 2;
        let view = history.view(now, sample(80, 80, 20, 128, 2));
        assert_eq!(view.points.len(), 2);
        assert!((view.points[0].requests_per_second - 10.0).abs() < 1e-9);
        assert!((view.points[0].over_limit_share - 0.2).abs() < 1e-9);
        // 100 calls, one slow: the p99 is the fast bucket's bound.
        assert!((view.points[0].p99_ms - 0.1).abs() < 1e-9);
        assert!((view.points[1].requests_per_second - 6.0).abs() < 1e-9);
        assert!((view.points[1].over_limit_share - 10.0 / 30.0).abs() < 1e-9);
        assert_eq!(view.points[1].ago_secs, 0.0);
        // The last minute reaches back to the oldest sample (10 s here).
        assert!((view.last_minute.requests_per_second - 8.0).abs() < 1e-9);
        assert!((view.last_minute.over_limit_share - 0.25).abs() < 1e-9);
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes_and_no_more() {
        let history = History::default();
        let t0 = Instant::now();
        for i in 0..1_000u32 {
            history.record(t0 + STEP * i, sample(u64::from(i), 0, 0, 0, 0));
        }
        let view = history.view(t0 + STEP * 1_000, sample(1_000, 0, 0, 0, 0));
        assert_eq!(view.points.len(), SLOTS);
        assert!(view.points[0].ago_secs <= 15.0 * 60.0 + 5.0);
        assert!(
            view.points
                .iter()
                .all(|p| (p.requests_per_second - 0.2).abs() < 1e-9)
        );
        // A minute back: 12 steps.
        assert!((view.last_minute.requests_per_second - 0.2).abs() < 1e-9);
    }

    #[test]
    fn without_calls_every_figure_is_zero_not_a_division_by_zero() {
        let history = History::default();
        let now = Instant::now();
        let view = history.view(now, Sample::default());
        assert!(view.points.is_empty());
        assert_eq!(view.last_minute.requests_per_second, 0.0);
        assert_eq!(view.last_minute.p99_ms, 0.0);
        assert_eq!(view.last_minute.shed_per_second, 0.0);
    }

    #[test]
    fn shed_answers_per_second_are_the_shed_count_between_samples() {
        let history = History::default();
        let t0 = Instant::now();
        let shed = |requests, shed| Sample {
            shed,
            ..sample(requests, 0, 0, 0, 0)
        };
        history.record(t0, shed(0, 0));
        history.record(t0 + STEP, shed(100, 40));
        let view = history.view(t0 + STEP * 2, shed(100, 40));
        assert!((view.points[0].shed_per_second - 8.0).abs() < 1e-9);
        assert_eq!(view.points[1].shed_per_second, 0.0);
        // 40 shed over the 10 s since the oldest sample.
        assert!((view.last_minute.shed_per_second - 4.0).abs() < 1e-9);
    }
}
