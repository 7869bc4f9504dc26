//! Descriptor matching over named rule sets.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floodgate::Entry;
use floodgate::{Index, LoadOptions, Lookup, Source, load_sources};
use std::fmt::{self, Write as _};
use std::hint::black_box;

#[derive(Clone, Copy)]
enum Scenario {
    Small,
    Wide,
    Deep,
    WildcardHeavy,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Small => "small",
            Self::Wide => "wide_1000_rules",
            Self::Deep => "deep_8_levels",
            Self::WildcardHeavy => "wildcard_heavy",
        })
    }
}

fn rules(scenario: Scenario) -> (String, Vec<Entry>) {
    let limit = "rate_limit: {unit: second, requests_per_unit: 10}";
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    let entries = match scenario {
        Scenario::Small => {
            yaml.push_str(&format!("  - key: user\n    {limit}\n"));
            vec![Entry::new("user", "alice")]
        }
        Scenario::Wide => {
            for i in 0..1_000 {
                let _ = writeln!(yaml, "  - key: tenant\n    value: t{i}\n    {limit}");
            }
            vec![Entry::new("tenant", "t777")]
        }
        Scenario::Deep => {
            let mut indent = String::from("  ");
            for level in 0..8 {
                let _ = writeln!(yaml, "{indent}- key: k{level}");
                if level == 7 {
                    let _ = writeln!(yaml, "{indent}  {limit}");
                } else {
                    let _ = writeln!(yaml, "{indent}  descriptors:");
                }
                indent.push_str("    ");
            }
            (0..8).map(|l| Entry::new(format!("k{l}"), "v")).collect()
        }
        Scenario::WildcardHeavy => {
            for i in 0..100 {
                let _ = write!(
                    yaml,
                    "  - key: path\n    value: /svc{i}/*/items/*\n    {limit}\n"
                );
            }
            vec![Entry::new("path", "/svc99/v1/items/42")]
        }
    };
    (yaml, entries)
}

fn matching(c: &mut Criterion) {
    let mut group = c.benchmark_group("matching");
    group.throughput(Throughput::Elements(1));
    for scenario in [
        Scenario::Small,
        Scenario::Wide,
        Scenario::Deep,
        Scenario::WildcardHeavy,
    ] {
        let (yaml, entries) = rules(scenario);
        let index: Index = load_sources(
            &[Source {
                name: "bench.yaml".into(),
                text: yaml,
            }],
            &LoadOptions::default(),
        )
        .expect("bench rules are valid");
        group.bench_with_input(
            BenchmarkId::from_parameter(scenario),
            &entries,
            |b, entries| {
                b.iter(|| {
                    let found = index.lookup(black_box("bench"), black_box(entries));
                    black_box(matches!(found, Lookup::Matched(_)))
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, matching);
criterion_main!(benches);
