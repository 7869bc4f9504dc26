//! One hot descriptor decided from one thread and from two at once on the
//! embedded store: the cost per request on each thread. With nothing
//! shared but the counter itself, two threads cost each about what one
//! does; a lock every request takes shows as the two-thread cost growing.
#![allow(missing_docs)]

#[path = "common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::Limiter;
use floodgate::StoreKind;
use floodgate::{Descriptor, Request};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const RULES: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
";

fn limiter() -> Limiter<StoreKind> {
    common::memory_limiter(RULES)
}

/// `iters` decisions on each of `threads` threads at once; the time of the
/// slowest thread.
fn run(limiter: &Arc<Limiter<StoreKind>>, threads: usize, iters: u64) -> Duration {
    let start = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (limiter, start) = (Arc::clone(limiter), Arc::clone(&start));
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let request = Request {
                    domain: "bench".into(),
                    descriptors: vec![Descriptor::from_pairs([("user", "hot")])],
                    hits_addend: 0,
                };
                start.wait();
                let began = Instant::now();
                for _ in 0..iters {
                    black_box(rt.block_on(limiter.should_rate_limit(&request)).ok());
                }
                began.elapsed()
            })
        })
        .collect();
    workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .max()
        .unwrap_or_default()
}

fn contention(c: &mut Criterion) {
    let mut group = c.benchmark_group("contention/hot_key");
    for threads in [1usize, 2] {
        let limiter = Arc::new(limiter());
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| run(&limiter, threads, iters));
        });
    }
    group.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
