//! Counter identity building (`CounterId::new`), done once per limited
//! descriptor on every request: plain values, and hostile values that need
//! escaping.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::CounterId;
use std::hint::black_box;

fn counter_id(c: &mut Criterion) {
    let mut group = c.benchmark_group("store/counter_id");
    group.throughput(Throughput::Elements(1));
    let cases: [(&str, &[(&str, &str)]); 3] = [
        ("one_entry", &[("user", "alice-0042")]),
        (
            "three_entries",
            &[
                ("tenant", "acme"),
                ("remote_address", "203.0.113.77"),
                ("path", "/api/v1/orders"),
            ],
        ),
        ("hostile", &[("k|=", "v%{}|x=y{z}")]),
    ];
    for (name, entries) in cases {
        group.bench_function(name, |b| {
            b.iter(|| black_box(CounterId::new(black_box("edge"), entries.iter().copied())));
        });
    }
    group.finish();
}

criterion_group!(benches, counter_id);
criterion_main!(benches);
