//! Unit tests of `mapper`.

use super::*;

fn labels<'a>(mapped: &'a Mapped<'a>) -> Vec<(&'a str, &'a str)> {
    mapped
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[test]
fn globs_capture_whole_fields_and_fill_labels() {
    let mapper = Mapper::reference_default(false);
    let m = mapper
        .map(
            "ratelimit.service.rate_limit.edge.user.total_hits",
            MetricType::Counter,
        )
        .unwrap();
    assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
    assert_eq!(labels(&m), [("domain", "edge"), ("key1", "user")]);
    // An empty field is a capture too.
    let m = mapper
        .map(
            "ratelimit.service.rate_limit.edge..near_limit",
            MetricType::Counter,
        )
        .unwrap();
    assert_eq!(labels(&m), [("domain", "edge"), ("key1", "")]);
}

#[test]
fn regexes_apply_when_no_glob_matches_and_are_not_anchored() {
    let mapper = Mapper::reference_default(false);
    let m = mapper
        .map(
            "ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.path_api.over_limit",
            MetricType::Counter,
        )
        .unwrap();
    assert_eq!(m.name, "ratelimit_service_rate_limit_over_limit");
    assert_eq!(
        labels(&m),
        [
            ("domain", "edge"),
            ("key1", "remote_address_10_0_0_1"),
            ("key2", "path_api")
        ]
    );
    // Deeper keys: the optional group takes the rest, key2 is the third field.
    let m = mapper
        .map(
            "ratelimit.service.rate_limit.d.a.b.c.total_hits",
            MetricType::Counter,
        )
        .unwrap();
    assert_eq!(labels(&m), [("domain", "d"), ("key1", "a"), ("key2", "b")]);
    // A stat no mapping knows stays unmapped.
    assert!(
        mapper
            .map(
                "ratelimit.service.rate_limit.d.k.over_limit_with_local_cache",
                MetricType::Counter
            )
            .is_none()
    );
    assert_eq!(
        escape_name("ratelimit.service.rate_limit.d.k.over_limit_with_local_cache"),
        "ratelimit_service_rate_limit_d_k_over_limit_with_local_cache"
    );
}

#[test]
fn metric_type_restricts_and_timers_are_scaled_histograms() {
    let mapper = Mapper::reference_default(false);
    let m = mapper
        .map(
            "ratelimit_server.ShouldRateLimit.total_requests",
            MetricType::Counter,
        )
        .unwrap();
    assert_eq!(m.name, "ratelimit_service_total_requests");
    assert_eq!(labels(&m), [("grpc_method", "ShouldRateLimit")]);
    assert!(
        mapper
            .map(
                "ratelimit_server.ShouldRateLimit.total_requests",
                MetricType::Gauge
            )
            .is_none()
    );
    let m = mapper
        .map(
            "ratelimit_server.ShouldRateLimit.response_time",
            MetricType::Observer,
        )
        .unwrap();
    assert_eq!(m.name, "ratelimit_service_response_time_seconds");
    assert_eq!(m.mapping.scale, 0.001);
    assert_eq!(
        m.mapping.observer,
        Observer::Histogram(DEFAULT_BUCKETS.to_vec())
    );
    let ms = Mapper::reference_default(true);
    let m = ms
        .map(
            "ratelimit_server.ShouldRateLimit.response_time",
            MetricType::Observer,
        )
        .unwrap();
    assert_eq!(m.mapping.scale, 1.0);
}

#[test]
fn first_matching_glob_wins_and_drop_drops() {
    let mapper = Mapper::from_yaml(
        r#"
defaults:
  observer_type: histogram
  buckets: [1, 2]
mappings:
  - match: "a.*.c"
    name: "first_$1"
    help: "first"
  - match: "a.b.*"
    name: "second"
  - match: "x.*"
    name: "dropped"
    action: drop
  - match: 'y\.(\w+)\.(?P<tail>\w+)'
    match_type: regex
    name: "y_${2}_${1}"
    labels:
      tail: "$tail"
      one: "$1"
      whole: "pre_$1_post"
      num: 7
"#,
    )
    .unwrap();
    let m = mapper.map("a.b.c", MetricType::Counter).unwrap();
    assert_eq!(m.name, "first_b");
    assert_eq!(m.mapping.help.as_deref(), Some("first"));
    assert_eq!(m.mapping.observer, Observer::Histogram(vec![1.0, 2.0]));
    assert_eq!(
        mapper.map("a.b.d", MetricType::Counter).unwrap().name,
        "second"
    );
    assert_eq!(
        mapper.map("x.y", MetricType::Gauge).unwrap().mapping.action,
        Action::Drop
    );
    let m = mapper.map("pre.y.one.two", MetricType::Counter).unwrap();
    assert_eq!(m.name, "y_two_one");
    // `$1_post` names group "1_post", which does not exist: Go's rule.
    assert_eq!(
        labels(&m),
        [
            ("num", "7"),
            ("one", "one"),
            ("tail", "two"),
            ("whole", "pre_")
        ]
    );
}

#[test]
fn defaults_set_the_match_type_and_observer() {
    let mapper = Mapper::from_yaml(
            "defaults:\n  match_type: regex\n  timer_type: histogram\n  histogram_options: {buckets: [5]}\nmappings:\n  - match: 'a\\.(\\w+)$'\n    name: t_$1\n",
        )
        .unwrap();
    let m = mapper.map("x.a.b", MetricType::Observer).unwrap();
    assert_eq!(m.name, "t_b");
    assert_eq!(m.mapping.observer, Observer::Histogram(vec![5.0]));
}

#[test]
fn glob_templates_expand_like_statsd_exporter() {
    // statsd_exporter's reference pattern also takes `_` and `$`: `$1_$`
    // is one (non-numeric) reference and expands to nothing, as there.
    assert_eq!(expand_glob("a_$1_${2}_$3", &["x", "y"]), "a_{2}_");
    assert_eq!(expand_glob("${1}_x.$2", &["x", "y"]), "x_x.y");
    assert_eq!(expand_glob("$0$x", &["x"]), "");
    assert_eq!(expand_glob("plain", &[]), "plain");
}

#[test]
fn broken_files_are_clear_errors() {
    let err =
        Mapper::from_yaml("mappings:\n  - match: a.b\n    name: n\n    lables: {}\n").unwrap_err();
    let text = crate::telemetry::error_chain(&err);
    assert!(text.contains("unknown field `lables`"), "{text}");
    assert!(text.contains("line 4"), "{text}");
    let cases = [
        (
            "mappings:\n  - match: a.b\n",
            "mappings[0]: metric mapping didn't set a metric name",
        ),
        (
            "mappings:\n  - match: a.b\n    name: x\n  - match: 'a.b*'\n    name: y\n",
            "mappings[1]: invalid match: a.b*",
        ),
        (
            "mappings:\n  - match: '('\n    match_type: regex\n    name: x\n",
            "mappings[0]: invalid regex (",
        ),
        (
            "mappings:\n  - match: a\n    name: x\n    match_type: fuzzy\n",
            "mappings[0]: invalid match type \"fuzzy\"",
        ),
        (
            "mappings:\n  - match: a\n    name: x\n    labels: {'bad-label': v}\n",
            "mappings[0]: invalid label key: bad-label",
        ),
        (
            "mappings:\n  - match: a\n    name: 'a.b'\n",
            "mappings[0]: metric name 'a.b'",
        ),
        (
            "mappings:\n  - match: a\n    name: x\n    action: keep\n",
            "invalid action type \"keep\"",
        ),
        (
            "mappings:\n  - match: a\n    name: x\n    timer_type: gauge\n",
            "invalid observer type 'gauge'",
        ),
        (
            "defaults:\n  match_type: fuzzy\n",
            "defaults: invalid match type \"fuzzy\"",
        ),
        (
            "defaults:\n  observer_type: x\n",
            "defaults: invalid observer type 'x'",
        ),
    ];
    for (text, want) in cases {
        let err = Mapper::from_yaml(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
    assert!(matches!(
        Mapper::from_yaml("mappings: 3"),
        Err(MapperError::Parse(_))
    ));
}

proptest::proptest! {
    /// A glob matches exactly what statsd_exporter's own regex reading
    /// of it matches (`*` as `([^.]*)`, anchored), with the same captures.
    #[test]
    fn globs_match_like_their_regex(
        fields in proptest::collection::vec("[ab]{0,2}", 1..5),
        pattern in proptest::collection::vec(proptest::prop_oneof!["\\*", "[ab]{1,2}"], 1..5),
    ) {
        let name = fields.join(".");
        let glob: Vec<Option<String>> =
            pattern.iter().map(|f| (f != "*").then(|| f.clone())).collect();
        let parts: Vec<String> = pattern
            .iter()
            .map(|f| if f == "*" { "([^.]*)".to_owned() } else { regex::escape(f) })
            .collect();
        let regex = Regex::new(&format!("^{}$", parts.join("\\."))).unwrap();
        let split: Vec<&str> = name.split('.').collect();
        let ours = glob_captures(&glob, &split);
        let theirs = regex.captures(&name).map(|c| {
            c.iter().skip(1).map(|m| m.map_or("", |m| m.as_str())).collect::<Vec<_>>()
        });
        proptest::prop_assert_eq!(ours, theirs);
    }
}

#[test]
fn escaping_follows_statsd_exporter() {
    assert_eq!(escape_name("a.b-c--d/e"), "a_b_c_d_e");
    assert_eq!(escape_name("1abc"), "_1abc");
    assert_eq!(escape_name("ok_name"), "ok_name");
}
