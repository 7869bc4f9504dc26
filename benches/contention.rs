//! One hot descriptor decided from one thread and from two at once on the
//! embedded store: the cost per request on each thread. With nothing
//! shared but the counter itself, two threads cost each about what one
//! does; a lock every request takes shows as the two-thread cost growing.
//!
//! Each thread's cost is its own CPU time (`CLOCK_THREAD_CPUTIME_ID`), not
//! the wall clock: on a machine with as many cores as threads, any other
//! process that runs meanwhile would otherwise double the two-thread
//! figure by time slicing, which says nothing of floodgate. What sharing
//! costs (cache lines moving between cores, a lock spun on or waited for)
//! is spent on the thread's CPU, so it still shows.
#![allow(missing_docs)]

#[path = "common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::Limiter;
use floodgate::StoreKind;
use floodgate::{Descriptor, Request};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const RULES: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
";

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or_default(),
        u32::try_from(t.tv_nsec).unwrap_or_default(),
    )
}

fn limiter() -> Limiter<StoreKind> {
    common::memory_limiter(RULES)
}

/// `iters` decisions on each of `threads` threads at once, thread `i` on
/// `limiters[i % len]`; the CPU time of the thread that spent most.
fn run(limiters: &[Arc<Limiter<StoreKind>>], threads: usize, iters: u64) -> Duration {
    let start = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .filter_map(|i| limiters.get(i % limiters.len().max(1)))
        .map(|limiter| {
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
                let began = thread_cpu();
                for _ in 0..iters {
                    black_box(rt.block_on(limiter.should_rate_limit(&request)).ok());
                }
                thread_cpu().saturating_sub(began)
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
        let limiters = [Arc::new(limiter())];
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| run(&limiters, threads, iters));
        });
    }
    // The machine's own floor: two threads that share nothing of
    // floodgate's (a limiter each) still share the host's cores, caches
    // and memory bandwidth. What `2_threads` costs beyond this is what
    // sharing one limiter costs.
    let apart = [Arc::new(limiter()), Arc::new(limiter())];
    group.bench_function("2_threads_apart", |b| {
        b.iter_custom(|iters| run(&apart, 2, iters));
    });
    group.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
