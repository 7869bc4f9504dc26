//! The cost the top lists add to every decision: recording one descriptor
//! (`insight::TopRecorder::record`) for a hot key (held in every summary)
//! and a wide key space (a new value every call, replacing the smallest
//! counter), within and over the limit.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::Entry;
use floodgate::TopRecorder;
use floodgate::UnixMillis;
use std::hint::black_box;

fn top(c: &mut Criterion) {
    let mut group = c.benchmark_group("insight/top");
    group.throughput(Throughput::Elements(1));
    let now = UnixMillis::from_secs(1_700_000_000);
    let recorder = TopRecorder::default();
    let hot = vec![Entry::new("user", "hot")];
    group.bench_function("record/hot_key", |b| {
        b.iter(|| recorder.record("bench", [(hot.as_slice(), 1, 0)], black_box(now), |_| true));
    });
    group.bench_function("record/hot_key_over_limit", |b| {
        b.iter(|| recorder.record("bench", [(hot.as_slice(), 1, 1)], black_box(now), |_| true));
    });
    let wide: Vec<Vec<Entry>> = (0..100_000)
        .map(|i| vec![Entry::new("user", format!("u{i}"))])
        .collect();
    let mut i = 0;
    group.bench_function("record/wide_keys", |b| {
        b.iter(|| {
            i = (i + 1) % wide.len();
            recorder.record(
                "bench",
                [(wide[i].as_slice(), 1, 0)],
                black_box(now),
                |_| true,
            );
        });
    });
    group.finish();
}

criterion_group!(benches, top);
criterion_main!(benches);
