//! Unit tests of `index`.

use super::*;
use crate::config::{LoadOptions, Source, load_sources};
use crate::descriptor::Unit;
use proptest::prelude::*;

mod stats_keys;

fn index(yaml: &str) -> Index {
    index_of(&[("rules.yaml", yaml)], false)
}

fn index_of(files: &[(&str, &str)], merge_domains: bool) -> Index {
    let sources: Vec<Source> = files
        .iter()
        .map(|(name, text)| Source {
            name: (*name).to_owned(),
            text: (*text).to_owned(),
        })
        .collect();
    let options = LoadOptions {
        merge_domains,
        ..LoadOptions::default()
    };
    match load_sources(&sources, &options) {
        Ok(index) => index,
        Err(crate::config::ConfigError::Invalid(issues)) => {
            panic!("invalid: {issues:#?}")
        }
        Err(err) => panic!("{err}"),
    }
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
}

/// The full key of the matched rule, or a marker for the other outcomes.
fn hit(index: &Index, domain: &str, pairs: &[(&str, &str)]) -> String {
    match index.lookup(domain, &entries(pairs)) {
        Lookup::UnknownDomain => "<unknown domain>".to_owned(),
        Lookup::NoMatch => "<no match>".to_owned(),
        Lookup::Matched(m) => m.rule.full_key.clone(),
    }
}

fn limit(index: &Index, domain: &str, pairs: &[(&str, &str)]) -> Limit {
    match index.lookup(domain, &entries(pairs)) {
        Lookup::Matched(Match {
            rule:
                Rule {
                    policy: Policy::Limited(limits),
                    ..
                },
            ..
        }) => limits[0].clone(),
        other => panic!("expected a limited match, got {other:?}"),
    }
}

const NESTED: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 3}
";

#[test]
fn request_depth_must_equal_rule_depth() {
    let index = index(NESTED);
    assert_eq!(hit(&index, "d", &[("a", "1")]), "d.a");
    // `b` has no rate_limit: a request ending there matches nothing.
    assert_eq!(hit(&index, "d", &[("a", "1"), ("b", "2")]), "<no match>");
    assert_eq!(
        hit(&index, "d", &[("a", "1"), ("b", "2"), ("c", "3")]),
        "d.a.b.c"
    );
    // Deeper than the tree: the limit of an intermediate node is ignored.
    assert_eq!(
        hit(
            &index,
            "d",
            &[("a", "1"), ("b", "2"), ("c", "3"), ("e", "4")]
        ),
        "<no match>"
    );
}

#[test]
fn node_with_limit_and_children_serves_both_depths() {
    let index = index(
        "
domain: d
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 20}
",
    );
    assert_eq!(limit(&index, "d", &[("foo", "x")]).requests_per_unit, 10);
    assert_eq!(
        limit(&index, "d", &[("foo", "x"), ("bar", "y")]).requests_per_unit,
        20
    );
}

#[test]
fn exact_beats_wildcard_beats_default() {
    let index = index(
        "
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/login
    rate_limit: {unit: second, requests_per_unit: 3}
",
    );
    assert_eq!(
        hit(&index, "d", &[("path", "/api/login")]),
        "d.path_/api/login"
    );
    assert_eq!(hit(&index, "d", &[("path", "/api/users")]), "d.path_/api/*");
    assert_eq!(hit(&index, "d", &[("path", "/static/x")]), "d.path");
    assert_eq!(hit(&index, "d", &[("other", "/api/x")]), "<no match>");
}

#[test]
fn first_wildcard_in_config_order_wins() {
    let index = index(
        "
domain: d
descriptors:
  - key: k
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: abc*
    rate_limit: {unit: second, requests_per_unit: 3}
",
    );
    assert_eq!(hit(&index, "d", &[("k", "abcd")]), "d.k_ab*");
    assert_eq!(hit(&index, "d", &[("k", "axyz")]), "d.k_a*");
    // The literal pattern text is an exact hit on its own node.
    assert_eq!(hit(&index, "d", &[("k", "abc*")]), "d.k_abc*");
}

#[test]
fn wildcard_positions() {
    let index = index(
        "
domain: d
descriptors:
  - key: start
    value: '*.example.com'
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: middle
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: end
    value: files/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: repeated
    value: a*b*c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: star
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let matches = |key: &str, value: &str| hit(&index, "d", &[(key, value)]) != "<no match>";
    assert!(matches("start", "www.example.com"));
    assert!(matches("start", ".example.com"));
    assert!(!matches("start", "example.com"));
    assert!(matches("middle", "/api/v1/action"));
    assert!(matches("middle", "/api//action"));
    assert!(matches("middle", "/api/a/b/action"));
    assert!(!matches("middle", "/api/v1/other"));
    assert!(matches("end", "files/"));
    assert!(matches("end", "files/a/b"));
    assert!(!matches("end", "file"));
    assert!(matches("repeated", "abc"));
    assert!(matches("repeated", "aXbYc"));
    assert!(matches("repeated", "abbcbc"));
    assert!(!matches("repeated", "acb"));
    assert!(matches("star", ""));
    assert!(matches("star", "anything"));
}

#[test]
fn wildcard_does_not_cross_the_key_value_boundary() {
    // The reference would match `a_b_x` against `a_b*` (see module docs).
    let index = index(
        "
domain: d
descriptors:
  - key: a
    value: b*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    assert_eq!(hit(&index, "d", &[("a_b", "x")]), "<no match>");
    assert_eq!(hit(&index, "d", &[("a_b", "c")]), "<no match>");
    assert_eq!(hit(&index, "d", &[("a", "b_c")]), "d.a_b_c");
}

#[test]
fn no_backtracking_to_the_default_node() {
    let index = index(
        "
domain: d
descriptors:
  - key: k
    value: special
    descriptors:
      - key: x
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    descriptors:
      - key: y
        rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    assert_eq!(hit(&index, "d", &[("k", "other"), ("y", "1")]), "d.k.y");
    // `k=special` matched exactly and has no `y` child: the walk stops.
    assert_eq!(
        hit(&index, "d", &[("k", "special"), ("y", "1")]),
        "<no match>"
    );
    assert_eq!(
        hit(&index, "d", &[("k", "special"), ("x", "only")]),
        "d.k_special.x_only"
    );
}

#[test]
fn specific_value_beats_default() {
    let index = index(
        "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
",
    );
    assert_eq!(
        limit(&index, "edge", &[("remote_address", "50.0.0.5")]).requests_per_unit,
        0
    );
    assert_eq!(
        limit(&index, "edge", &[("remote_address", "50.0.0.6")]).requests_per_unit,
        10
    );
}

#[test]
fn unlimited_matches_without_a_limit() {
    let index = index(
        "
domain: d
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
",
    );
    match index.lookup("d", &entries(&[("internal", "x")])) {
        Lookup::Matched(m) => assert!(matches!(m.rule.policy, Policy::Unlimited { .. })),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_domain_and_empty_entries() {
    let index = index(NESTED);
    assert!(index.has_domain("d"));
    assert!(!index.has_domain("other"));
    assert_eq!(hit(&index, "other", &[("a", "1")]), "<unknown domain>");
    assert_eq!(hit(&index, "d", &[]), "<no match>");
    assert_eq!(hit(&Index::empty(), "d", &[("a", "1")]), "<unknown domain>");
}

const SHARED: &str = "
domain: d
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: docs/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 7}
";

#[test]
fn share_threshold_substitutes_the_pattern_from_an_ancestor() {
    let index = index(SHARED);
    let request = entries(&[("path", "files/a.txt"), ("user", "bob")]);
    let Lookup::Matched(m) = index.lookup("d", &request) else {
        panic!("no match");
    };
    assert_eq!(m.rule.full_key, "d.path_files/*.user");
    assert_eq!(m.shared, vec![(0, "files/*")]);

    let Lookup::Matched(m) = index.lookup("d", &entries(&[("path", "docs/x")])) else {
        panic!("no match");
    };
    assert_eq!(m.shared, vec![(0, "docs/*")]);
}

#[test]
fn no_share_threshold_means_no_substitution() {
    let index = index(
        "
domain: d
descriptors:
  - key: path
    value: files/*
    rate_limit: {unit: minute, requests_per_unit: 5}
",
    );
    let Lookup::Matched(m) = index.lookup("d", &entries(&[("path", "files/a")])) else {
        panic!("no match");
    };
    assert!(m.shared.is_empty());
}

/// Plain recursive glob matcher: the specification `Pattern` must meet.
fn reference_match(pattern: &[u8], value: &[u8]) -> bool {
    match pattern.split_first() {
        None => value.is_empty(),
        Some((b'*', rest)) => {
            reference_match(rest, value)
                || (!value.is_empty() && reference_match(pattern, &value[1..]))
        }
        Some((c, rest)) => value.first() == Some(c) && reference_match(rest, &value[1..]),
    }
}

proptest! {
    #[test]
    fn pattern_agrees_with_a_recursive_matcher(
        pattern in "[ab*]{0,8}",
        value in "[ab]{0,10}",
    ) {
        let expected = reference_match(pattern.as_bytes(), value.as_bytes());
        let actual = match Pattern::new(&pattern) {
            Some(compiled) => compiled.matches(&value),
            None => pattern == value,
        };
        prop_assert_eq!(actual, expected);
    }

    #[test]
    fn pattern_never_panics_on_unicode(pattern in "\\PC{0,6}\\*\\PC{0,6}", value in "\\PC{0,12}") {
        let compiled = Pattern::new(&pattern).unwrap();
        let _ = compiled.matches(&value);
    }
}

#[test]
fn an_index_knows_whether_any_rule_is_leased() {
    let plain = index(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
    );
    assert!(!plain.has_leases());
    let leased = index(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: 64, lease: true}\n",
    );
    assert!(leased.has_leases());
}
