//! One whole decision at the limiter level on the embedded store: request
//! in, response out (validation, matching, plan, one store batch, response,
//! metrics), for a hot key (one descriptor value) and a wide key space (a
//! new value every call), one and three descriptors per request.
#![allow(missing_docs)]

#[path = "common/mod.rs"]
mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::Limiter;
use floodgate::StoreKind;
use floodgate::{Descriptor, Request};
use std::hint::black_box;

const RULES: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 1000000000, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 2000000000, algorithm: sliding_window}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 1000000000, algorithm: gcra}
";

fn limiter() -> Limiter<StoreKind> {
    common::memory_limiter(RULES)
}

fn request(value: &str, three: bool) -> Request {
    let mut descriptors = vec![Descriptor::from_pairs([("user", value)])];
    if three {
        descriptors.push(Descriptor::from_pairs([("tenant", value)]));
        descriptors.push(Descriptor::from_pairs([("api", value)]));
    }
    Request {
        domain: "bench".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn decision(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("decision/memory");
    group.throughput(Throughput::Elements(1));
    for three in [false, true] {
        let suffix = if three {
            "three_descriptors"
        } else {
            "one_descriptor"
        };
        let l = limiter();
        let hot = request("hot", three);
        group.bench_function(format!("hot_key/{suffix}"), |b| {
            b.iter(|| black_box(rt.block_on(l.should_rate_limit(&hot))));
        });
        let l = limiter();
        let values: Vec<Request> = (0..100_000)
            .map(|i| request(&format!("u{i}"), three))
            .collect();
        let mut i = 0;
        group.bench_function(format!("wide_keys/{suffix}"), |b| {
            b.iter(|| {
                i = (i + 1) % values.len();
                black_box(rt.block_on(l.should_rate_limit(&values[i])))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
