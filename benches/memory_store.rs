//! The embedded store: one-op batches on distinct counters (uncontended) and
//! on one hot counter from every core (contended).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::UnixMillis;
use floodgate::algorithm::{FixedWindow, Spec};
use floodgate::{Batch, CounterId, MemoryStore, Op};
use std::hint::black_box;

fn batch(ids: &[CounterId], i: usize) -> Batch {
    Batch {
        ops: vec![Op {
            id: ids[i % ids.len()].clone(),
            spec: Spec::FixedWindow {
                window: FixedWindow::new(60),
                limit: 1_000_000,
            },
            hits: 1,
            lease: None,
        }],
        stop_when_over: false,
    }
}

fn memory_store(c: &mut Criterion) {
    let now = UnixMillis::from_secs(1_700_000_000);
    let ids: Vec<CounterId> = (0..10_000)
        .map(|i| CounterId::new("edge", [("user", format!("u{i}").as_str())]))
        .collect();

    let mut group = c.benchmark_group("store/memory");
    group.throughput(Throughput::Elements(1));
    let store = MemoryStore::new();
    let mut i = 0;
    group.bench_function("uncontended", |b| {
        b.iter(|| {
            i += 1;
            black_box(store.apply(batch(&ids, i), now))
        });
    });

    let hot = vec![CounterId::new("edge", [("user", "hot")])];
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    group.throughput(Throughput::Elements(u64::try_from(threads).unwrap_or(1)));
    group.bench_function("contended", |b| {
        b.iter(|| {
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| black_box(store.apply(batch(&hot, 0), now)));
                }
            });
        });
    });
    group.finish();
}

criterion_group!(benches, memory_store);
criterion_main!(benches);
