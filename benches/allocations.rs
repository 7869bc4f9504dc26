//! Heap allocations per request, on the embedded store and on a real
//! redis-server (started and stopped here), for a hot key and a wide key
//! space. dhat's allocator counts every heap block, and the decision runs
//! on a current-thread runtime in a process with no other work, so the
//! count is exactly the requests' (the Redis connection's task included),
//! free of noise. `cargo bench --bench allocations` prints the figures kept in
//! `bench/RESULTS.md`.
#![allow(missing_docs, clippy::print_stdout)]

use arc_swap::ArcSwap;
use floodgate::{Descriptor, Request};
use floodgate::{Limiter, LimiterOptions};
use floodgate::{LoadOptions, Source, load_sources};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, RedisConfig, RedisStore, StoreKind};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Heap blocks allocated so far by the whole process (one thread here).
fn allocations() -> u64 {
    dhat::HeapStats::get().total_blocks
}

const RULES: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
";

fn request(value: &str) -> Request {
    Request {
        domain: "bench".into(),
        descriptors: vec![Descriptor::from_pairs([("user", value)])],
        hits_addend: 0,
    }
}

/// Allocations per request over `n` requests (after a warm-up), sent
/// `concurrency` at a time (on Redis, requests in flight together share
/// script calls).
fn per_request(
    rt: &tokio::runtime::Runtime,
    store: StoreKind,
    wide: bool,
    concurrency: usize,
) -> f64 {
    let index = load_sources(
        &[Source {
            name: "bench.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .expect("bench rules are valid");
    let limiter = Limiter::new(
        Arc::new(ArcSwap::from_pointee(index)),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_000))),
        LimiterOptions::default(),
    );
    let n = 2_000;
    let requests: Vec<Request> = (0..2 * n)
        .map(|i| {
            request(&if wide {
                format!("u{i}")
            } else {
                "hot".to_owned()
            })
        })
        .collect();
    let run = |requests: &[Request]| {
        if concurrency <= 1 {
            for r in requests {
                let _ = rt.block_on(limiter.should_rate_limit(r));
            }
            return;
        }
        // Up to 30 futures, join_all keeps them in one block per group (a
        // thirtieth of a block per request, left in the figure).
        for group in requests.chunks(concurrency) {
            let calls = group.iter().map(|r| limiter.should_rate_limit(r));
            let _ = rt.block_on(futures_util::future::join_all(calls));
        }
    };
    run(requests.get(..n).unwrap_or_default());
    let before = allocations();
    run(requests.get(n..).unwrap_or_default());
    let after = allocations();
    (after - before) as f64 / n as f64
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (name, wide) in [("hot key", false), ("wide keys", true)] {
        let memory = per_request(&rt, StoreKind::Memory(MemoryStore::new()), wide, 1);
        println!("memory store, {name}: {memory:.1} allocations per request");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let mut redis = match Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            println!("redis store: skipped (redis-server: {err})");
            return;
        }
    };
    let store = RedisStore::new(RedisConfig::single(format!("127.0.0.1:{port}")));
    let started = Instant::now();
    while rt.block_on(store.connect()).is_err() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (name, wide) in [("hot key", false), ("wide keys", true)] {
        for concurrency in [1, 30] {
            let store = StoreKind::Redis {
                main: store.clone(),
                per_second: None,
            };
            let redis_allocs = per_request(&rt, store, wide, concurrency);
            println!(
                "redis store, {name}, {concurrency} at a time: {redis_allocs:.1} allocations per request"
            );
        }
    }
    let _ = redis.kill();
    let _ = redis.wait();
}
