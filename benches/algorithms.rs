//! The pure decision function of each algorithm, with a manual clock.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::algorithm::FixedWindow;
use floodgate::algorithm::fixed_window::{Counter, is_over_limit};
use floodgate::clock::UnixMillis;
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

criterion_group!(benches, fixed_window);
criterion_main!(benches);
