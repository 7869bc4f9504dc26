//! Rule checks of floodgate's extensions: candidate limits, what a store
//! counting fixed windows only refuses, calendar windows, concurrency.

use super::*;

#[test]
fn candidate_limits_may_share_a_window_or_differ_in_algorithm_and_come_last() {
    let index = load_sources(
        &[source(
            "t.yaml",
            "domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 10, shadow_mode: true}
      - {unit: minute, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 5, algorithm: gcra, shadow_mode: true}
",
        )],
        &LoadOptions::default(),
    )
    .unwrap();
    let rule = index.rules().next().unwrap();
    let Policy::Limited(limits) = &rule.policy else {
        panic!("limited");
    };
    let order: Vec<(u32, bool)> = limits
        .iter()
        .map(|l| (l.requests_per_unit, l.shadow_mode))
        .collect();
    assert_eq!(order, [(100, false), (10, true), (5, true)]);
    // Two enforced limits of one window still share a counter.
    assert!(
        errors_of(
            "domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 10}
      - {unit: minute, requests_per_unit: 100}
"
        )
        .contains("has the same window (60 s) as rate_limits[0]")
    );
    assert_eq!(
        errors_of(
            "domain: d
descriptors:
  - key: k
    rate_limit: {unlimited: true, shadow_mode: true}
"
        ),
        "t.yaml: descriptors[0] (key=k): shadow_mode cannot be set on an unlimited limit"
    );
}

#[test]
fn a_fixed_windows_only_store_refuses_what_it_cannot_count() {
    let memcache = LoadOptions {
        fixed_windows_only: true,
        ..LoadOptions::default()
    };
    let check = |yaml: &str| rendered(load_sources(&[source("m.yaml", yaml)], &memcache));
    let accepted = r"
domain: d
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: multiplied
    rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: trial
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: hour, requests_per_unit: 30, shadow_mode: true}
  - key: leased
    rate_limit: {unit: minute, requests_per_unit: 3, lease: true}
";
    // `lease: true` loads and changes nothing there (memcached keeps no
    // leases: store/memcache/tests.rs).
    assert_eq!(check(accepted), "<loaded>");
    let refused = r"
domain: d
descriptors:
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: gcra}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 30}
";
    assert_eq!(
        check(refused),
        "m.yaml: descriptors[0] (key=sliding): algorithm sliding_window needs Redis or the embedded store: the memcache store counts fixed_window only\n\
         m.yaml: descriptors[1] (key=gcra): algorithm gcra needs Redis or the embedded store: the memcache store counts fixed_window only\n\
         m.yaml: descriptors[2] (key=two): several enforced limits on one descriptor need Redis or the embedded store: the memcache store keeps one limit per descriptor, as the reference"
    );
    // Any other store takes them.
    assert_eq!(
        rendered(load_sources(
            &[source("m.yaml", refused)],
            &LoadOptions::default()
        )),
        "<loaded>"
    );
}

#[test]
fn calendar_windows_are_checked() {
    let ok = r"
domain: d
descriptors:
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 10000, calendar: true, time_zone: America/New_York}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 10, calendar: true, week_start: sunday}
  - key: daily
    rate_limits:
      - {unit: day, requests_per_unit: 100, calendar: true, time_zone: Europe/Paris}
      - {unit: day, requests_per_unit: 1000}
";
    assert_eq!(errors_of(ok), "<loaded>");
    let bad = r"
domain: d
descriptors:
  - key: zone
    rate_limit: {unit: day, requests_per_unit: 1, calendar: true, time_zone: Europe/Pariss}
  - key: unit
    rate_limit: {unit: hour, requests_per_unit: 1, calendar: true}
  - key: algorithm
    rate_limit: {unit: day, requests_per_unit: 1, calendar: true, algorithm: gcra}
  - key: multiplier
    rate_limit: {unit: day, unit_multiplier: 2, requests_per_unit: 1, calendar: true}
  - key: weekday
    rate_limit: {unit: week, requests_per_unit: 1, calendar: true, week_start: someday}
  - key: not_a_week
    rate_limit: {unit: month, requests_per_unit: 1, calendar: true, week_start: sunday}
  - key: no_calendar
    rate_limit: {unit: day, requests_per_unit: 1, time_zone: UTC}
";
    assert_eq!(
        errors_of(bad),
        "t.yaml: descriptors[0] (key=zone): unknown time zone 'Europe/Pariss' (an IANA name such as Europe/Paris or America/New_York)\n\
         t.yaml: descriptors[1] (key=unit): calendar windows need unit day, week, month or year\n\
         t.yaml: descriptors[2] (key=algorithm): calendar is only valid with algorithm fixed_window\n\
         t.yaml: descriptors[3] (key=multiplier): calendar windows are one unit long: unit_multiplier must be 1\n\
         t.yaml: descriptors[4] (key=weekday): invalid week_start 'someday' (monday, tuesday, ..., sunday)\n\
         t.yaml: descriptors[5] (key=not_a_week): week_start is only valid with unit week\n\
         t.yaml: descriptors[6] (key=no_calendar): time_zone and week_start need calendar: true"
    );
}

#[test]
fn concurrency_limits_name_their_slot_entries() {
    let ok = r"
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: concurrency, slot_key: request_id, release_key: done}
";
    assert_eq!(errors_of(ok), "<loaded>");
    let bad = r"
domain: d
descriptors:
  - key: missing
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: concurrency}
  - key: same
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: concurrency, slot_key: id, release_key: id}
  - key: stray
    rate_limit: {unit: minute, requests_per_unit: 10, slot_key: id, release_key: done}
";
    assert_eq!(
        errors_of(bad),
        "t.yaml: descriptors[0] (key=missing): algorithm concurrency needs slot_key (the entry holding the request's id) and release_key (the entry marking its release)\n\
         t.yaml: descriptors[1] (key=same): slot_key and release_key must differ\n\
         t.yaml: descriptors[2] (key=stray): slot_key and release_key are only valid with algorithm concurrency"
    );
}

#[test]
fn redact_marks_a_key_secret_in_its_domain_and_must_be_a_boolean() {
    let index = load_sources(
        &[source(
            "t.yaml",
            "domain: d
descriptors:
  - key: api_key
    redact: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: user
        redact: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
",
        )],
        &LoadOptions::default(),
    )
    .unwrap();
    let keys: Vec<&str> = index.secret_keys("d").iter().map(|k| &**k).collect();
    assert_eq!(keys, ["api_key", "user"]);
    assert!(index.secret_keys("other").is_empty());
    let errors = errors_of(
        "domain: d
descriptors:
  - key: api_key
    redact: 1
",
    );
    assert!(errors.contains("redact"), "{errors}");
}

#[test]
fn a_table_keys_on_the_rule_key_by_default_and_keeps_the_limits_as_written() {
    let index = load_sources(
        &[source(
            "t.yaml",
            "domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60, table: plans}
  - key: route
    rate_limits:
      - {unit: minute, requests_per_unit: 10, table: routes, table_key: plan}
      - {unit: hour, requests_per_unit: 100, table: routes, table_key: plan}
",
        )],
        &LoadOptions::default(),
    )
    .unwrap();
    let tables: Vec<_> = index
        .rules()
        .map(|rule| {
            let table = rule.table.as_ref().unwrap();
            (
                &*table.name,
                &*table.key,
                table.several,
                table.template.len(),
                table.template.iter().all(|t| t.table.is_none()),
            )
        })
        .collect();
    assert_eq!(
        tables,
        [
            ("plans", "tenant", false, 1, true),
            ("routes", "plan", true, 2, true)
        ]
    );
}

#[test]
fn a_store_keeping_no_tables_refuses_a_rule_naming_one() {
    let memcache = LoadOptions {
        fixed_windows_only: true,
        ..LoadOptions::default()
    };
    let yaml = "domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60, table: plans}
";
    assert_eq!(
        rendered(load_sources(&[source("m.yaml", yaml)], &memcache)),
        "m.yaml: descriptors[0] (key=tenant): table needs Redis or the embedded store: the memcache store keeps no tables"
    );
}
