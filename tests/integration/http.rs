//! The HTTP surface end to end: `/json`, `/rlconfig` and `/healthcheck`
//! against a served floodgate on the embedded store with a manual clock.

use crate::support::grpc::{TestServer, index};
use crate::support::http::{get, post_json};
use floodgate::{HeaderNames, LimiterOptions};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use std::sync::Arc;

const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
";

async fn start(options: LimiterOptions) -> TestServer {
    TestServer::start(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_080))),
        options,
    )
    .await
}

const USER_ALICE: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}"#;

#[tokio::test]
async fn json_answers_200_then_429_with_proto3_json_bodies() {
    let server = start(LimiterOptions {
        response_headers: Some(HeaderNames::default()),
        ..LimiterOptions::default()
    })
    .await;
    let first = post_json(server.http_addr, "/json", USER_ALICE).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(
        first
            .headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        first.headers
    );
    assert_eq!(
        first.body,
        r#"{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_user","requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"20s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"2"},{"key":"RateLimit-Remaining","value":"1"},{"key":"RateLimit-Reset","value":"20"}]}"#
    );
    post_json(server.http_addr, "/json", USER_ALICE).await;
    let over = post_json(server.http_addr, "/json", USER_ALICE).await;
    assert_eq!(over.status, 429, "{}", over.body);
    assert_eq!(
        over.body,
        r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"per_user","requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"20s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"2"},{"key":"RateLimit-Remaining","value":"0"},{"key":"RateLimit-Reset","value":"20"}]}"#
    );
    server.shutdown().await;
}

#[tokio::test]
async fn json_accepts_snake_case_overrides_and_string_integers() {
    let server = start(LimiterOptions::default()).await;
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"anything","value":"x"}],"limit":{"requests_per_unit":"10","unit":3},"hits_addend":"4"}],"hits_addend":1}"#;
    let r = post_json(server.http_addr, "/json", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        r#"{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"HOUR"},"limitRemaining":6,"durationUntilReset":"2720s"}]}"#
    );
    // Unknown domain and unmatched descriptors: OK, no limit, defaults omitted.
    let r = post_json(
        server.http_addr,
        "/json",
        r#"{"domain":"nowhere","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
    )
    .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, r#"{"overallCode":"OK","statuses":[{"code":"OK"}]}"#)
    );
    // A shadow-mode rule over its limit still answers 200.
    let shadow = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"shadow","value":"s"}]}],"hitsAddend":2}"#;
    let r = post_json(server.http_addr, "/json", shadow).await;
    assert_eq!(r.status, 200, "{}", r.body);
    server.shutdown().await;
}

#[tokio::test]
async fn json_rejects_bad_input_with_400_and_a_reason() {
    let server = start(LimiterOptions::default()).await;
    let cases = [
        ("{not json", "invalid RateLimitRequest JSON"),
        (
            r#"{"domain":"edge","descriptors":"x"}"#,
            "invalid RateLimitRequest JSON",
        ),
        (r#"{"domain":"edge","bogus":1}"#, "unknown field `bogus`"),
        (
            r#"{"domain":"","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
            "rate limit domain must not be empty",
        ),
        (
            r#"{"domain":"edge","descriptors":[]}"#,
            "rate limit descriptor list must not be empty",
        ),
        (
            r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"a"}],"limit":{"requestsPerUnit":1,"unit":"UNKNOWN"}}]}"#,
            "limit override has unit UNKNOWN",
        ),
    ];
    for (body, reason) in cases {
        let r = post_json(server.http_addr, "/json", body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(r.body.starts_with("bad request: "), "{}", r.body);
        assert!(r.body.contains(reason), "{body}: {}", r.body);
    }
    // Nothing was counted for user "a".
    let r = post_json(
        server.http_addr,
        "/json",
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
    )
    .await;
    assert!(r.body.contains(r#""limitRemaining":1"#), "{}", r.body);
    server.shutdown().await;
}

#[tokio::test]
async fn rlconfig_lists_one_line_per_rule() {
    let server = start(LimiterOptions::default()).await;
    let r = get(server.http_addr, "/rlconfig").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        "edge.user: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n\
         edge.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
         edge.shadow: unit=HOUR requests_per_unit=1, shadow_mode: true, quota_mode: false\n"
    );
    let health = get(server.http_addr, "/healthcheck").await;
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_count_a_known_sequence_exactly() {
    let rules = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 20}\n";
    let server = TestServer::start(
        index(&[("edge.yaml", rules)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_040))),
        LimiterOptions::default(),
    )
    .await;
    let mut client = server.client().await;
    for _ in 0..25 {
        crate::support::grpc::ask(
            &mut client,
            crate::support::grpc::request("edge", &[&[("user", "alice")]]),
        )
        .await;
    }
    crate::support::grpc::ask(
        &mut client,
        crate::support::grpc::request("nowhere", &[&[("k", "v")]]),
    )
    .await;
    let answer = get(server.http_addr, "/metrics").await;
    assert_eq!(answer.status, 200);
    assert!(answer.headers.contains("text/plain"), "{}", answer.headers);
    for line in [
        "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key=\"user\"} 25",
        "ratelimit_service_rate_limit_within_limit{domain=\"edge\",key=\"user\"} 20",
        "ratelimit_service_rate_limit_over_limit{domain=\"edge\",key=\"user\"} 5",
        "ratelimit_service_rate_limit_near_limit{domain=\"edge\",key=\"user\"} 4",
        "ratelimit_service_rate_limit_domain_not_found{domain=\"nowhere\"} 1",
        "ratelimit_server_should_rate_limit_total_requests 26",
        "ratelimit_server_should_rate_limit_response_time_seconds_count 26",
        "ratelimit_server_should_rate_limit_in_flight 0",
    ] {
        assert!(
            answer.body.lines().any(|l| l == line),
            "missing `{line}` in:\n{}",
            answer.body
        );
    }
    server.shutdown().await;
}
