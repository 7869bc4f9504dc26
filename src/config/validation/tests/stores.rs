//! `store: NAME` and `partition_allowance`: limits counted on the store
//! their rule names, and what each store can count.

use super::*;

fn with_stores() -> LoadOptions {
    LoadOptions {
        stores: vec![
            StoreInfo {
                name: "global".to_owned(),
                index: 1,
                fixed_windows_only: false,
            },
            StoreInfo {
                name: "edge".to_owned(),
                index: 2,
                fixed_windows_only: true,
            },
            StoreInfo {
                name: "local".to_owned(),
                index: 3,
                fixed_windows_only: false,
            },
        ],
        ..LoadOptions::default()
    }
}

#[test]
fn each_limit_counts_on_the_store_its_rule_names() {
    let index = load_sources(
        &[source(
            "s.yaml",
            "domain: d
descriptors:
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 10, store: local}
      - {unit: day, requests_per_unit: 10000, store: global, lease: true, partition_allowance: 0.1}
      - {unit: hour, requests_per_unit: 500}
",
        )],
        &with_stores(),
    )
    .unwrap();
    let rule = index.rules().next().unwrap();
    let Policy::Limited(limits) = &rule.policy else {
        panic!("limited");
    };
    let placed: Vec<(u8, u64)> = limits
        .iter()
        .map(|l| (l.store, l.partition_allowance))
        .collect();
    assert_eq!(placed, [(3, 0), (1, 1_000), (0, 0)]);
}

#[test]
fn unknown_stores_and_what_a_store_cannot_count_are_errors_naming_the_rule() {
    let check = |yaml: &str| rendered(load_sources(&[source("s.yaml", yaml)], &with_stores()));
    assert_eq!(
        check(
            "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3, store: elsewhere}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra, store: edge}
  - key: c
    rate_limit: {unlimited: true, store: global}
  - key: e
    rate_limits:
      - {unit: minute, requests_per_unit: 3, algorithm: sliding_window, store: global}
      - {unit: hour, requests_per_unit: 30, algorithm: sliding_window}
  - key: f
    rate_limits:
      - {unit: minute, requests_per_unit: 3, store: edge}
      - {unit: hour, requests_per_unit: 30}
"
        ),
        "s.yaml: descriptors[0] (key=a): store 'elsewhere' is not defined (stores: default, global, edge, local; STORES_FILE defines more)\n\
         s.yaml: descriptors[1] (key=b): algorithm gcra needs Redis or the embedded store: the memcache store counts fixed_window only\n\
         s.yaml: descriptors[2] (key=c): store is not valid on an unlimited limit\n\
         s.yaml: descriptors[3] (key=e): all sliding_window rate_limits of a descriptor must agree on store\n\
         s.yaml: descriptors[4] (key=f): several enforced limits on one descriptor need Redis or the embedded store: the memcache store keeps one limit per descriptor, as the reference"
    );
    // Without a stores file, only `default` is known.
    assert!(
        rendered(load_sources(
            &[source(
                "s.yaml",
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3, store: global}\n"
            )],
            &LoadOptions::default()
        ))
        .contains("store 'global' is not defined (stores: default;")
    );
}

#[test]
fn a_partition_allowance_is_a_share_on_a_leased_fixed_window() {
    let check = |yaml: &str| rendered(load_sources(&[source("s.yaml", yaml)], &with_stores()));
    assert_eq!(
        check(
            "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3, lease: true, partition_allowance: 1.5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3, partition_allowance: 0.1}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra, lease: true, partition_allowance: 0.1}
"
        ),
        "s.yaml: descriptors[0] (key=a): partition_allowance must be a number from 0 to 1, not 1.5\n\
         s.yaml: descriptors[1] (key=b): partition_allowance is only valid on a leased fixed window (lease: true, algorithm fixed_window)\n\
         s.yaml: descriptors[2] (key=c): partition_allowance is only valid on a leased fixed window (lease: true, algorithm fixed_window)"
    );
}
