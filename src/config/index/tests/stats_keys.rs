//! Stats keys (detailed_metric, value_to_metric, shared patterns), merged
//! domains, units and the sorted summaries.

use super::*;

fn stats(index: &Index, pairs: &[(&str, &str)]) -> String {
    let request = entries(pairs);
    match index.lookup("d", &request) {
        Lookup::Matched(m) => m.stats_key(&request, &crate::config::Redactor::random()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn stats_key_defaults_to_the_config_path() {
    let index = index(NESTED);
    assert_eq!(
        stats(&index, &[("a", "1"), ("b", "2"), ("c", "3")]),
        "d.a.b.c"
    );
    let index = index_of(&[("w.yaml", SHARED)], false);
    assert_eq!(
        stats(&index, &[("path", "files/a"), ("user", "u")]),
        "d.path_files/*.user"
    );
}

#[test]
fn stats_key_with_detailed_metric_uses_runtime_values() {
    let index = index(
        "
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: fixed
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: c
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    assert_eq!(
        stats(&index, &[("a", "x"), ("b", "fixed")]),
        "d.a_x.b_fixed"
    );
    // The reference writes `key_` even for an empty runtime value.
    assert_eq!(stats(&index, &[("a", ""), ("c", "y")]), "d.a_.c_y");
}

#[test]
fn stats_key_with_detailed_metric_keeps_shared_patterns() {
    let index = index(
        "
domain: d
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    assert_eq!(
        stats(&index, &[("path", "files/x"), ("user", "bob")]),
        "d.path_files/*.user_bob"
    );
    assert_eq!(
        stats(&index, &[("path", "files/x"), ("user", "")]),
        "d.path_files/*.user"
    );
}

#[test]
fn stats_key_with_value_to_metric_includes_unspecified_values() {
    let index = index(
        "
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        value_to_metric: true
        descriptors:
          - key: path
            value: /api/*
            value_to_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
          - key: path
            value: /static/*
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: shared
    value: s*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    // Default and wildcard levels show the runtime value; the exact level
    // shows its (equal) config value.
    assert_eq!(
        stats(
            &index,
            &[("route", "r1"), ("method", "GET"), ("path", "/api/v1")]
        ),
        "d.route_r1.method_GET.path_/api/v1"
    );
    // A wildcard node without the flag keeps its pattern.
    assert_eq!(
        stats(
            &index,
            &[("route", "r1"), ("method", "GET"), ("path", "/static/a")]
        ),
        "d.route_r1.method_GET.path_/static/*"
    );
    // An empty runtime value leaves the bare key.
    assert_eq!(
        stats(
            &index,
            &[("route", ""), ("method", "GET"), ("path", "/api/v")]
        ),
        "d.route.method_GET.path_/api/v"
    );
    // share_threshold wins over value_to_metric.
    assert_eq!(stats(&index, &[("shared", "sx")]), "d.shared_s*");
}

#[test]
fn merged_domains_combine_descriptors() {
    let index = index_of(
        &[
            (
                "a.yaml",
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            ),
            (
                "b.yaml",
                "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
            ),
        ],
        true,
    );
    assert_eq!(hit(&index, "d", &[("a", "x")]), "d.a");
    assert_eq!(hit(&index, "d", &[("b", "x")]), "d.b");
    let keys: Vec<_> = index.rules().map(|rule| rule.full_key.as_str()).collect();
    assert_eq!(keys, ["d.a", "d.b"]);
    assert_eq!(
        index.summaries(),
        [DomainSummary {
            domain: "d".to_owned(),
            descriptors: 2,
            rules: 2
        }]
    );
}

#[test]
fn units_are_case_insensitive_and_multiplied() {
    let index = index(
        "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: MINUTE, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: Hour, requests_per_unit: 1, unit_multiplier: 3, algorithm: fixed_window}
",
    );
    let a = limit(&index, "d", &[("a", "")]);
    assert_eq!(a.unit, Unit::Minute);
    assert_eq!(a.unit_multiplier.get(), 1);
    assert_eq!(a.window_secs(), 60);
    assert_eq!(a.algorithm, Algorithm::FixedWindow);
    let b = limit(&index, "d", &[("b", "")]);
    assert_eq!(b.unit, Unit::Hour);
    assert_eq!(b.unit_multiplier.get(), 3);
    assert_eq!(b.window_secs(), 3 * 3_600);
}

#[test]
fn summaries_and_rules_are_sorted_by_domain() {
    let index = index_of(
        &[
            (
                "1.yaml",
                "domain: zeta\ndescriptors:\n  - key: z\n    rate_limit: {unlimited: true}\n",
            ),
            ("2.yaml", NESTED),
            ("3.yaml", "domain: alpha\n"),
        ],
        false,
    );
    let domains: Vec<_> = index.summaries().into_iter().map(|s| s.domain).collect();
    assert_eq!(domains, ["alpha", "d", "zeta"]);
    let summary = &index.summaries()[1];
    assert_eq!((summary.descriptors, summary.rules), (3, 2));
    let keys: Vec<_> = index.rules().map(|rule| rule.full_key.as_str()).collect();
    assert_eq!(keys, ["d.a", "d.a.b.c", "zeta.z"]);
}
