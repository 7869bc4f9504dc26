//! One hot descriptor decided from one thread and from two at once on the
//! embedded store: the cost per request on each thread. With nothing
//! shared but the counter itself, two threads cost each about what one
//! does; a lock every request takes shows as the two-thread cost growing.
//! Two threads on one limiter, each on a descriptor of its own, tell the
//! counter's share from the rest of the limiter's.
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
/// `limiters[i % len]`, all on one descriptor or (`own`) each thread on a
/// descriptor of its own; the CPU time of the thread that spent most.
fn run(limiters: &[Arc<Limiter<StoreKind>>], threads: usize, iters: u64, own: bool) -> Duration {
    let start = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .filter_map(|i| limiters.get(i % limiters.len().max(1)))
        .enumerate()
        .map(|(i, limiter)| {
            let (limiter, start) = (Arc::clone(limiter), Arc::clone(&start));
            let value = if own { format!("hot{i}") } else { "hot".into() };
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let request = Request {
                    domain: "bench".into(),
                    descriptors: vec![Descriptor::from_pairs([("user", value.as_str())])],
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
            b.iter_custom(|iters| run(&limiters, threads, iters, false));
        });
    }
    // The machine's own floor: two threads that share nothing of
    // floodgate's (a limiter each) still share the host's cores, caches
    // and memory bandwidth. What `2_threads` costs beyond this is what
    // sharing one limiter costs.
    let apart = [Arc::new(limiter()), Arc::new(limiter())];
    group.bench_function("2_threads_apart", |b| {
        b.iter_custom(|iters| run(&apart, 2, iters, false));
    });
    // One limiter, each thread on a descriptor of its own: everything of
    // the limiter is shared but the counter. What `2_threads` costs beyond
    // this is what sharing the one counter costs (its shard's lock and
    // entry); what this costs beyond `2_threads_apart`, what sharing the
    // rest of the limiter costs. (The two descriptors' counters may fall
    // in one shard of the embedded store, one time in 64.)
    let shared = [Arc::new(limiter())];
    group.bench_function("2_threads_own_descriptors", |b| {
        b.iter_custom(|iters| run(&shared, 2, iters, true));
    });
    group.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
