//! Unit tests of `http`.

use super::*;
use crate::config::{LoadOptions, Source, load_sources};
use crate::descriptor::{Entry, RateLimitOverride, Request, Unit};
use crate::limiter::CurrentLimit;
use crate::limiter::Status;
use json::*;
use std::time::Duration;

fn parse(json: &str) -> Result<Request, JsonError> {
    serde_json::from_str::<JsonRequest>(json)
        .map_err(JsonError::Parse)
        .and_then(JsonRequest::into_request)
}

#[test]
fn camel_case_request_with_strings_and_enum_names() {
    let r = parse(
        r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"},"hitsAddend":"2"}],"hitsAddend":1}"#,
    )
    .unwrap();
    assert_eq!(r.domain, "d");
    assert_eq!(r.hits_addend, 1);
    let d = &r.descriptors[0];
    assert_eq!(d.entries, vec![Entry::new("k", "v")]);
    assert_eq!(
        d.limit,
        Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: Unit::Minute
        })
    );
    assert_eq!(d.hits_addend, Some(2));
}

#[test]
fn snake_case_request_with_numbers_and_enum_numbers() {
    let r = parse(
        r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":"7","unit":7},"hits_addend":0}],"hits_addend":"3"}"#,
    )
    .unwrap();
    assert_eq!(r.hits_addend, 3);
    let d = &r.descriptors[0];
    assert_eq!(d.entries, vec![Entry::new("k", "")]);
    assert_eq!(d.limit.unwrap().unit, Unit::Week);
    assert_eq!(d.limit.unwrap().requests_per_unit, 7);
    assert_eq!(d.hits_addend, Some(0));
}

#[test]
fn absent_and_null_fields_are_defaults() {
    let r = parse(r#"{"domain":"d","descriptors":[{"entries":null,"hitsAddend":null}]}"#).unwrap();
    assert_eq!(r.hits_addend, 0);
    assert_eq!(r.descriptors[0].hits_addend, None);
    assert!(r.descriptors[0].entries.is_empty());
    assert_eq!(parse("{}").unwrap(), Request::default());
}

#[test]
fn malformed_requests_are_rejected_with_a_reason() {
    let err = crate::telemetry::error_chain(&parse("{").unwrap_err());
    assert!(err.starts_with("invalid RateLimitRequest JSON: "), "{err}");
    let err = crate::telemetry::error_chain(&parse(r#"{"domian":"d"}"#).unwrap_err());
    assert!(err.contains("unknown field `domian`"), "{err}");
    let err = crate::telemetry::error_chain(&parse(r#"{"hitsAddend":"x"}"#).unwrap_err());
    assert!(err.contains("'x' is not an unsigned integer"), "{err}");
    let err = crate::telemetry::error_chain(&parse(r#"{"hitsAddend":4294967296}"#).unwrap_err());
    assert!(err.contains("does not fit in uint32"), "{err}");
    let err = crate::telemetry::error_chain(
        &parse(r#"{"descriptors":[{"limit":{"requestsPerUnit":1,"unit":"MINUTES"}}]}"#)
            .unwrap_err(),
    );
    assert!(err.contains("unknown unit 'MINUTES'"), "{err}");
    let err = parse(r#"{"descriptors":[{"limit":{"requestsPerUnit":1}}]}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("descriptor 0 limit override has unit UNKNOWN"),
        "{err}"
    );
}

#[test]
fn response_is_proto3_json_with_defaults_omitted() {
    let response = Response {
        overall_code: Code::OverLimit,
        statuses: vec![
            Status {
                code: Code::OverLimit,
                current_limit: Some(CurrentLimit {
                    name: Some("n".into()),
                    requests_per_unit: 20,
                    unit: Unit::Minute,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(Duration::from_secs(58)),
            },
            Status {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: None,
            },
        ],
        response_headers: vec![("RateLimit-Limit".into(), "20".into())],
        request_headers: Vec::new(),
        dynamic_metadata: None,
    };
    let json = serde_json::to_string(&JsonResponse::from(response)).unwrap();
    assert_eq!(
        json,
        r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"n","requestsPerUnit":20,"unit":"MINUTE"},"durationUntilReset":"58s"},{"code":"OK"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"20"}]}"#
    );
}

#[test]
fn decisions_map_to_http_status_codes() {
    let ok = Response {
        overall_code: Code::Ok,
        statuses: Vec::new(),
        response_headers: Vec::new(),
        request_headers: Vec::new(),
        dynamic_metadata: None,
    };
    let over = Response {
        overall_code: Code::OverLimit,
        ..ok.clone()
    };
    assert_eq!(answer(Ok(ok), &Request::default()).status(), StatusCode::OK);
    assert_eq!(
        answer(Ok(over), &Request::default()).status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        answer(Err(LimitError::EmptyDomain), &Request::default()).status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        answer(
            Err(LimitError::Store(crate::store::StoreError::Timeout)),
            &Request::default()
        )
        .status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[test]
fn durations_use_proto3_json_text() {
    assert_eq!(duration_text(Duration::from_secs(0)), "0s");
    assert_eq!(duration_text(Duration::from_millis(1_500)), "1.500s");
    assert_eq!(duration_text(Duration::from_micros(1)), "0.000001s");
    assert_eq!(duration_text(Duration::from_nanos(5)), "0.000000005s");
}

/// `/rlconfig` of `yaml`'s rules, line by line.
fn rlconfig_of(yaml: &str) -> Vec<String> {
    let index = load_sources(
        &[Source {
            name: "d.yaml".into(),
            text: yaml.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap();
    let mut text = String::new();
    for rule in index.rules() {
        rlconfig_lines(&mut text, rule);
    }
    text.lines().map(str::to_owned).collect()
}

/// Every rule shape the reference has prints its `dump()` line to the
/// letter: `<full_key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode:
/// <bool>, quota_mode: <bool>`, nothing else.
#[test]
fn rlconfig_prints_the_reference_line_of_every_reference_shape() {
    let shapes = [
        (
            "- key: plain\n  rate_limit: {unit: minute, requests_per_unit: 5}",
            "d.plain: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: foo\n  value: bay\n  rate_limit: {unlimited: true}",
            "d.foo_bay: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: free\n  rate_limit: {unlimited: true, requests_per_unit: 7}",
            "d.free: unit=UNKNOWN requests_per_unit=7, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: shadow\n  shadow_mode: true\n  rate_limit: {unit: second, requests_per_unit: 1}",
            "d.shadow: unit=SECOND requests_per_unit=1, shadow_mode: true, quota_mode: false",
        ),
        (
            "- key: quota\n  quota_mode: true\n  rate_limit: {unit: day, requests_per_unit: 2}",
            "d.quota: unit=DAY requests_per_unit=2, shadow_mode: false, quota_mode: true",
        ),
        (
            "- key: named\n  rate_limit: {name: n, unit: hour, requests_per_unit: 3, replaces: [{name: other}]}",
            "d.named: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: detailed\n  detailed_metric: true\n  rate_limit: {unit: week, requests_per_unit: 4}",
            "d.detailed: unit=WEEK requests_per_unit=4, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: metric\n  value_to_metric: true\n  rate_limit: {unit: month, requests_per_unit: 6}",
            "d.metric: unit=MONTH requests_per_unit=6, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: path\n  value: files*\n  share_threshold: true\n  rate_limit: {unit: year, requests_per_unit: 8}",
            "d.path_files*: unit=YEAR requests_per_unit=8, shadow_mode: false, quota_mode: false",
        ),
        (
            "- key: outer\n  value: o\n  descriptors:\n    - key: inner\n      rate_limit: {unit: second, requests_per_unit: 9}",
            "d.outer_o.inner: unit=SECOND requests_per_unit=9, shadow_mode: false, quota_mode: false",
        ),
    ];
    for (descriptors, line) in shapes {
        let yaml = format!(
            "domain: d\ndescriptors:\n{}\n",
            descriptors
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(rlconfig_of(&yaml), vec![line.to_owned()], "{yaml}");
    }
}

/// Rules only floodgate has keep the reference's text first and say the
/// rest after it.
#[test]
fn rlconfig_says_floodgates_extensions_after_the_reference_text() {
    let yaml = "domain: d\ndescriptors:\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 10}\n  - key: e\n    rate_limits:\n      - {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 3}\n      - {unit: hour, requests_per_unit: 100, algorithm: gcra}\n";
    assert_eq!(
        rlconfig_of(yaml),
        vec![
            "d.c: unit=SECOND requests_per_unit=2, shadow_mode: false, quota_mode: false, unit_multiplier: 10",
            "d.e: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, algorithm: gcra, burst: 3",
            "d.e: unit=HOUR requests_per_unit=100, shadow_mode: false, quota_mode: false, algorithm: gcra",
        ]
    );
}
