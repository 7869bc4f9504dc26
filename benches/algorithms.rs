//! The pure decision function of each algorithm, with a manual clock.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::UnixMillis;
use floodgate::algorithm::fixed_window::{Counter, is_over_limit};
use floodgate::algorithm::sliding_log::Log;
use floodgate::algorithm::sliding_window::Buckets;
use floodgate::algorithm::{FixedWindow, Gcra, Limits, SlidingLog, SlidingWindow};
use std::hint::black_box;

fn fixed_window(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm/fixed_window");
    group.throughput(Throughput::Elements(1));
    let window = FixedWindow::new(60);
    let mut counter = Counter::default();
    let mut now = UnixMillis::from_secs(1_700_000_000);
    group.bench_function("apply", |b| {
        b.iter(|| {
            now = UnixMillis(now.0 + 7);
            let tally = window.apply(&mut counter, black_box(now), black_box(1));
            black_box(is_over_limit(tally.after, 1_000))
        });
    });
    group.finish();
}

fn sliding_window(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm/sliding_window");
    group.throughput(Throughput::Elements(1));
    let window = SlidingWindow::new(Limits::new([(1_000, 1), (5_000, 10), (7_000, 15)]), false);
    let mut buckets = Buckets::default();
    let mut now = UnixMillis::from_secs(1_700_000_000);
    group.bench_function("apply_3_windows", |b| {
        b.iter(|| {
            now = UnixMillis(now.0 + 3);
            black_box(buckets.apply(&window, black_box(now), black_box(1)))
        });
    });
    group.finish();
}

fn sliding_log(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm/sliding_log");
    group.throughput(Throughput::Elements(1));
    let log_spec = SlidingLog::new(Limits::new([(1_000, 1_000)]));
    let mut log = Log::default();
    let mut now = UnixMillis::from_secs(1_700_000_000);
    group.bench_function("apply", |b| {
        b.iter(|| {
            now = UnixMillis(now.0 + 1);
            black_box(log.apply(&log_spec, black_box(now), black_box(1)))
        });
    });
    group.finish();
}

fn gcra(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm/gcra");
    group.throughput(Throughput::Elements(1));
    let gcra = Gcra::new(1_000, 1_000, 100);
    let mut tat = None;
    let mut now = UnixMillis::from_secs(1_700_000_000);
    group.bench_function("decide", |b| {
        b.iter(|| {
            now = UnixMillis(now.0 + 1);
            let (new_tat, outcome) = gcra.decide(tat, black_box(now), black_box(1));
            tat = new_tat.or(tat);
            black_box(outcome)
        });
    });
    group.finish();
}

criterion_group!(benches, fixed_window, sliding_window, sliding_log, gcra);
criterion_main!(benches);
