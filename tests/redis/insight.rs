//! Operator views against a served floodgate: `POST /explain` for every kind
//! of match and outcome (and that it counts nothing: the `/json` call after
//! each explanation gets exactly the status it predicted), the offline
//! `floodgate explain`, `GET /top` on a known mix, and candidate
//! (`shadow_mode`) limits next to enforced ones, on the embedded store, a
//! standalone Redis and a Redis Cluster.

use crate::support::backends::{Backend, cluster, connected, memory, redis_config, standalone};
use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::http::{get, post_json};
use crate::support::redis::RedisServer;
use floodgate::LimiterOptions;
use floodgate::RedisMode;
use floodgate::{ManualClock, UnixMillis};
use serde_json::{Value, json};
use std::process::Command;
use std::sync::Arc;

const RULES: &str = r"
domain: ops
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 5}
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 7}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 9}
    descriptors:
      - key: team
        rate_limit: {unit: minute, requests_per_unit: 8}
  - key: free
    rate_limit: {name: free_tier, unit: minute, requests_per_unit: 3}
  - key: paid
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: free_tier}]}
  - key: internal
    rate_limit: {unlimited: true}
  - key: shady
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: candidate
    rate_limits:
      - {unit: minute, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 10, shadow_mode: true}
  - key: fw
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: minute, requests_per_unit: 4}
  - key: sw
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: sliding_window}
      - {unit: minute, requests_per_unit: 4, algorithm: sliding_window}
  - key: sl
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: sliding_log}
      - {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
  - key: gc
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: gcra}
      - {unit: minute, requests_per_unit: 4, algorithm: gcra}
";

const T0: u64 = 1_700_000_030;

/// One explanation case: the request body, and per descriptor the expected
/// step matches, rule and outcome; `before` is how many times the request is
/// sent to `/json` first.
struct Case {
    name: &'static str,
    body: Value,
    expected: Vec<(Vec<&'static str>, Option<&'static str>, &'static str)>,
    before: usize,
}

fn one(entries: &[(&str, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect();
    json!({"domain": "ops", "descriptors": [{"entries": entries}]})
}

fn cases() -> Vec<Case> {
    let limited = "limited";
    vec![
        Case {
            name: "exact",
            body: one(&[("plan", "gold")]),
            expected: vec![(vec!["exact"], Some("ops.plan_gold"), limited)],
            before: 0,
        },
        Case {
            name: "wildcard",
            body: one(&[("path", "/api/users")]),
            expected: vec![(vec!["wildcard"], Some("ops.path_/api/*"), limited)],
            before: 0,
        },
        Case {
            name: "key-only default",
            body: one(&[("user", "alice")]),
            expected: vec![(vec!["default"], Some("ops.user"), limited)],
            before: 1,
        },
        Case {
            // `tenant=acme` has no child `team`; the walk does not go back
            // to the key-only `tenant` node, which has one.
            name: "no backtracking",
            body: one(&[("tenant", "acme"), ("team", "t")]),
            expected: vec![(vec!["exact", "none"], None, "no_rule")],
            before: 0,
        },
        Case {
            name: "deeper than the rule",
            body: one(&[("user", "alice"), ("device", "phone")]),
            expected: vec![(vec!["default", "none"], None, "no_rule")],
            before: 0,
        },
        Case {
            name: "shallower than the rule",
            body: one(&[("tenant", "acme")]),
            expected: vec![(vec!["exact"], None, "no_rule")],
            before: 0,
        },
        Case {
            name: "a limit at both depths",
            body: one(&[("tenant", "other"), ("team", "t")]),
            expected: vec![(vec!["default", "default"], Some("ops.tenant.team"), limited)],
            before: 0,
        },
        Case {
            name: "unknown domain",
            body: json!({"domain": "nowhere", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}),
            expected: vec![(vec!["none"], None, "unknown_domain")],
            before: 0,
        },
        Case {
            name: "replaced",
            body: json!({"domain": "ops", "descriptors": [
                {"entries": [{"key": "free", "value": "x"}]},
                {"entries": [{"key": "paid", "value": "y"}]},
            ]}),
            expected: vec![
                (vec!["default"], Some("ops.free"), "replaced"),
                (vec!["default"], Some("ops.paid"), limited),
            ],
            before: 0,
        },
        Case {
            name: "unlimited",
            body: one(&[("internal", "x")]),
            expected: vec![(vec!["default"], Some("ops.internal"), "unlimited")],
            before: 0,
        },
        Case {
            name: "override",
            body: json!({"domain": "ops", "descriptors": [{"entries": [{"key": "user", "value": "bob"}],
                "limit": {"requestsPerUnit": 42, "unit": "HOUR"}}]}),
            expected: vec![(vec!["default"], None, "override")],
            before: 0,
        },
        Case {
            // The second hit of a shadow rule of 1/min: over, let through.
            name: "shadow rule",
            body: json!({"domain": "ops", "descriptors": [{"entries": [{"key": "shady", "value": "s"}], "hitsAddend": 2}]}),
            expected: vec![(vec!["default"], Some("ops.shady"), "shadow")],
            before: 0,
        },
        Case {
            // 11 hits: within the enforced 100, over the candidate 10.
            name: "candidate limit",
            body: json!({"domain": "ops", "descriptors": [{"entries": [{"key": "candidate", "value": "c"}], "hitsAddend": 11}]}),
            expected: vec![(vec!["default"], Some("ops.candidate"), "shadow")],
            before: 0,
        },
        Case {
            name: "fixed windows",
            body: one(&[("fw", "a")]),
            expected: vec![(vec!["default"], Some("ops.fw"), limited)],
            before: 2,
        },
        Case {
            name: "sliding windows",
            body: one(&[("sw", "a")]),
            expected: vec![(vec!["default"], Some("ops.sw"), limited)],
            before: 2,
        },
        Case {
            name: "sliding logs",
            body: one(&[("sl", "a")]),
            expected: vec![(vec!["default"], Some("ops.sl"), limited)],
            before: 2,
        },
        Case {
            name: "gcra",
            body: one(&[("gc", "a")]),
            expected: vec![(vec!["default"], Some("ops.gc"), limited)],
            before: 2,
        },
    ]
}

/// Checks steps, rule and outcome of an explanation against a case.
fn check_shape(case: &Case, explanation: &Value) {
    let descriptors = explanation["descriptors"].as_array().unwrap();
    assert_eq!(descriptors.len(), case.expected.len(), "{}", case.name);
    for (got, (steps, rule, outcome)) in descriptors.iter().zip(&case.expected) {
        let matched: Vec<&str> = got["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["matched"].as_str().unwrap())
            .collect();
        assert_eq!(&matched, steps, "{}: {got}", case.name);
        assert_eq!(got["rule"].as_str(), *rule, "{}: {got}", case.name);
        assert_eq!(got["outcome"], *outcome, "{}: {got}", case.name);
    }
}

async fn explain_cases_on(backend: Backend) {
    let server = TestServer::start(
        index(&[("ops.yaml", RULES)]),
        backend.store.clone(),
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .await;
    let addr = server.http_addr;
    for case in cases() {
        let body = case.body.to_string();
        for _ in 0..case.before {
            post_json(addr, "/json", &body).await;
        }
        let answer = post_json(addr, "/explain", &body).await;
        assert_eq!(answer.status, 200, "{}: {}", case.name, answer.body);
        let explanation: Value = serde_json::from_str(&answer.body).unwrap();
        check_shape(&case, &explanation);
        // Twice: explaining counted nothing.
        let again: Value =
            serde_json::from_str(&post_json(addr, "/explain", &body).await.body).unwrap();
        assert_eq!(again, explanation, "{}", case.name);
        // The next real call gets exactly the predicted statuses.
        let decided: Value =
            serde_json::from_str(&post_json(addr, "/json", &body).await.body).unwrap();
        assert_eq!(
            decided["overallCode"], explanation["overallCode"],
            "{}",
            case.name
        );
        for (i, descriptor) in explanation["descriptors"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let status = decided["statuses"].get(i).cloned().unwrap_or(json!({}));
            assert_eq!(descriptor["status"], status, "{}: {descriptor}", case.name);
        }
        if case.name.ends_with("windows") || case.name.ends_with("logs") || case.name == "gcra" {
            let windows = explanation["descriptors"][0]["windows"].as_array().unwrap();
            assert_eq!(windows.len(), 2, "{}", case.name);
            for w in windows {
                // Two hits counted before, nothing by the explanation.
                assert_eq!(w["count"], 2, "{}: {w}", case.name);
            }
            assert_eq!(windows[0]["remaining"], 0, "{}", case.name);
            assert_eq!(windows[1]["remaining"], 2, "{}", case.name);
        }
    }
    let replaced = post_json(addr, "/explain", &cases()[8].body.to_string()).await;
    let replaced: Value = serde_json::from_str(&replaced.body).unwrap();
    assert_eq!(replaced["descriptors"][0]["replacedBy"], "ops.paid");
    let unlimited = post_json(addr, "/explain", &one(&[("internal", "x")]).to_string()).await;
    assert!(unlimited.body.contains("\"limitRemaining\":4294967295"));
    let wildcard = post_json(addr, "/explain", &one(&[("path", "/api/x")]).to_string()).await;
    assert!(wildcard.body.contains("\"pattern\":\"/api/*\""));
    let bad = post_json(addr, "/explain", "{\"domain\":").await;
    assert_eq!(bad.status, 400);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_every_case_on_the_memory_store() {
    explain_cases_on(memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_every_case_on_redis() {
    explain_cases_on(standalone().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_every_case_on_a_redis_cluster() {
    explain_cases_on(cluster().await).await;
}

#[test]
fn explain_offline_with_empty_counters() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.yaml"), RULES).unwrap();
    for case in cases() {
        let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("explain")
            .arg("--config-dir")
            .arg(dir.path())
            .arg(case.body.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {stdout} {}",
            case.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let explanation: Value = serde_json::from_str(&stdout).unwrap();
        check_shape(&case, &explanation);
        for descriptor in explanation["descriptors"].as_array().unwrap() {
            for window in descriptor["windows"].as_array().unwrap() {
                assert_eq!(window["count"], 0, "{}: empty counters", case.name);
            }
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["explain", "--config-dir"])
        .arg(dir.path())
        .arg("{not json")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad request"));
    let no_dir = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["explain", "--config-dir", "/nonexistent/floodgate-rules"])
        .arg(cases()[0].body.to_string())
        .output()
        .unwrap();
    assert_eq!(no_dir.status.code(), Some(1));
}

const MIX: &str = r"
domain: mix
descriptors:
  - key: user
    value: hot
    rate_limit: {unit: minute, requests_per_unit: 5000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bot
    rate_limit: {unit: minute, requests_per_unit: 4}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_puts_the_hot_descriptor_first_and_lists_exactly_the_limited_ones() {
    let server = TestServer::start(
        index(&[("mix.yaml", MIX)]),
        memory().await.store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .await;
    let mut client = server.client().await;
    // 200 others with 5 hits each: 180 users (within 10/min) and 20 bots
    // (over 4/min on their fifth hit); the hot user 1,000 times.
    let others: Vec<(&str, String)> = (0..200)
        .map(|i| {
            if i < 180 {
                ("user", format!("u{i}"))
            } else {
                ("bot", format!("b{i}"))
            }
        })
        .collect();
    for round in 0..5 {
        for (key, value) in &others {
            ask(&mut client, request("mix", &[&[(key, value.as_str())]])).await;
        }
        for _ in 0..200 {
            let answer = ask(&mut client, request("mix", &[&[("user", "hot")]])).await;
            assert_eq!(answer.overall_code, 1, "round {round}");
        }
    }
    // A descriptor no rule matches is counted too. 40 hits: more than any
    // other but the hot one can count, its error included (5 + 2,040 / 64),
    // so it is listed whichever recording thread's shard took them (a
    // query merges the shards, and one hit ranked below items whose
    // merged counts carry another shard's smallest count).
    for _ in 0..40 {
        ask(&mut client, request("mix", &[&[("nomatch", "x")]])).await;
    }
    let all = get(server.http_addr, "/top?domain=mix&n=64").await.body;
    assert!(all.contains(r#"{"key":"nomatch","value":"x"}"#), "{all}");
    let hits = get(server.http_addr, "/top?domain=mix&by=hits&window=1m&n=5").await;
    assert_eq!(hits.status, 200, "{}", hits.body);
    let hits: Value = serde_json::from_str(&hits.body).unwrap();
    assert_eq!(
        (
            hits["domain"].as_str(),
            hits["by"].as_str(),
            hits["window"].as_str()
        ),
        (Some("mix"), Some("hits"), Some("1m"))
    );
    let first = &hits["items"][0];
    assert_eq!(first["entries"], json!([{"key": "user", "value": "hot"}]));
    let (count, error) = (
        first["count"].as_u64().unwrap(),
        first["error"].as_u64().unwrap(),
    );
    assert!(count >= 1_000 && count - error <= 1_000, "{first}");
    // The summary's bound: N / K with N = 2,040 hits and K = 64.
    assert!(error <= 2_040 / 64, "{first}");
    assert_eq!(hits["items"].as_array().unwrap().len(), 5);

    let over = get(
        server.http_addr,
        "/top?domain=mix&by=over_limit&window=1h&n=64",
    )
    .await;
    let over: Value = serde_json::from_str(&over.body).unwrap();
    let mut limited: Vec<String> = over["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(
                (i["count"].as_u64(), i["error"].as_u64()),
                (Some(1), Some(0)),
                "{i}"
            );
            format!(
                "{}={}",
                i["entries"][0]["key"].as_str().unwrap(),
                i["entries"][0]["value"].as_str().unwrap()
            )
        })
        .collect();
    limited.sort();
    let mut expected: Vec<String> = (180..200).map(|i| format!("bot=b{i}")).collect();
    expected.sort();
    assert_eq!(limited, expected);

    assert_eq!(
        get(server.http_addr, "/top?domain=nowhere").await.status,
        404
    );
    assert_eq!(
        get(server.http_addr, "/top?domain=mix&by=most")
            .await
            .status,
        400
    );
    let domains = get(server.http_addr, "/top").await;
    assert_eq!(domains.body, r#"{"domains":["mix"]}"#);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_an_answer_from_the_local_cache() {
    let server = TestServer::start(
        index(&[("ops.yaml", RULES)]),
        memory().await.store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions {
            local_cache_bytes: 1 << 20,
            ..LimiterOptions::default()
        },
    )
    .await;
    let body = one(&[("user", "zed")]).to_string();
    for _ in 0..6 {
        post_json(server.http_addr, "/json", &body).await;
    }
    let explained: Value =
        serde_json::from_str(&post_json(server.http_addr, "/explain", &body).await.body).unwrap();
    assert_eq!(
        explained["descriptors"][0]["outcome"], "cached",
        "{explained}"
    );
    assert_eq!(explained["overallCode"], "OVER_LIMIT");
    let decided: Value =
        serde_json::from_str(&post_json(server.http_addr, "/json", &body).await.body).unwrap();
    assert_eq!(
        explained["descriptors"][0]["status"],
        decided["statuses"][0]
    );
    server.shutdown().await;
}

/// An enforced 100/min next to a shadow 10/min on one descriptor: 50 calls
/// are all OK, and the shadow limit's 40 would-be denials are counted (in
/// the rule's `shadow_mode` stat and in the over-limit top list).
/// With `stop_when_over` (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) too: a
/// candidate over its limit never stops the enforced one from counting.
async fn candidate_limit_counts_would_be_denials(backend: Backend, stop_when_over: bool) {
    let server = TestServer::start(
        index(&[("ops.yaml", RULES)]),
        backend.store.clone(),
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions {
            stop_when_over,
            ..LimiterOptions::default()
        },
    )
    .await;
    let mut client = server.client().await;
    for call in 0..50 {
        let answer = ask(&mut client, request("ops", &[&[("candidate", "team-a")]])).await;
        assert_eq!(answer.overall_code, 1, "call {call} is OK");
        let status = &answer.statuses[0];
        assert_eq!(
            status.limit_remaining,
            100 - call - 1,
            "the enforced limit answers"
        );
        assert_eq!(
            status.current_limit.as_ref().unwrap().requests_per_unit,
            100
        );
    }
    let counters = server
        .limiter
        .metrics()
        .rule_counters("ops.candidate")
        .unwrap();
    let shadowed = counters
        .shadow_mode
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(shadowed, 40);
    assert_eq!(
        counters
            .over_limit
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let metrics = get(server.http_addr, "/metrics").await.body;
    assert!(
        metrics.contains(
            r#"ratelimit_service_rate_limit_shadow_mode{domain="ops",key="candidate"} 40"#
        ),
        "{metrics}"
    );
    let over = get(server.http_addr, "/top?domain=ops&by=over_limit")
        .await
        .body;
    let over: Value = serde_json::from_str(&over).unwrap();
    assert_eq!(over["items"][0]["count"], 40, "{over}");
    // /explain shows the candidate over its limit, the enforced one not.
    let body = one(&[("candidate", "team-a")]).to_string();
    let explained: Value =
        serde_json::from_str(&post_json(server.http_addr, "/explain", &body).await.body).unwrap();
    let windows = &explained["descriptors"][0]["windows"];
    assert_eq!(windows[0]["shadowMode"], false);
    assert_eq!(
        (
            windows[0]["count"].as_u64(),
            windows[0]["overLimit"].as_bool()
        ),
        (Some(50), Some(false))
    );
    assert_eq!(windows[1]["shadowMode"], true);
    assert_eq!(
        (
            windows[1]["count"].as_u64(),
            windows[1]["overLimit"].as_bool()
        ),
        (Some(50), Some(true))
    );
    assert_eq!(explained["descriptors"][0]["outcome"], "shadow");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_limit_on_the_memory_store() {
    candidate_limit_counts_would_be_denials(memory().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_limit_with_stop_increment_on_the_memory_store() {
    candidate_limit_counts_would_be_denials(memory().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_limit_with_stop_increment_on_redis() {
    candidate_limit_counts_would_be_denials(standalone().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_limit_on_redis() {
    candidate_limit_counts_would_be_denials(standalone().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_answers_503_when_the_store_cannot_be_read() {
    let mut redis = RedisServer::start();
    let store = connected(redis_config(RedisMode::Single, redis.addr())).await;
    let server = TestServer::start(
        index(&[("ops.yaml", RULES)]),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .await;
    redis.stop();
    let answer = post_json(
        server.http_addr,
        "/explain",
        &one(&[("user", "a")]).to_string(),
    )
    .await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    server.shutdown().await;
}

/// On Redis (standalone and Cluster) too, `/explain` predicts exactly what
/// the next decision answers: random requests (distinct descriptors; see
/// the README for a descriptor named twice) over every kind of rule above,
/// random clock steps.
fn explain_predicts_the_decision_on(backend: impl std::future::Future<Output = Backend>) {
    use floodgate::Limiter;
    use floodgate::{Descriptor, Request};
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    const KEYS: [&str; 11] = [
        "user",
        "plan",
        "path",
        "free",
        "paid",
        "internal",
        "shady",
        "candidate",
        "fw",
        "sw",
        "sl",
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backend = rt.block_on(backend);
    let steps = proptest::collection::vec(
        (
            0u64..2_500,
            proptest::sample::subsequence((0..KEYS.len() + 1).collect::<Vec<_>>(), 1..4),
            0u64..3,
        ),
        1..20,
    );
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&steps, |steps| {
        // Each case far from the others in time, so counters never meet.
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let clock = Arc::new(ManualClock::new(UnixMillis::from_secs(
            T0 + n * 10 * 86_400,
        )));
        let limiter = Limiter::new(
            Arc::new(arc_swap::ArcSwap::from_pointee(index(&[(
                "ops.yaml", RULES,
            )]))),
            backend.store.clone(),
            clock.clone(),
            LimiterOptions::default(),
        );
        for (advance, keys, hits) in steps {
            clock.advance(std::time::Duration::from_millis(advance));
            let descriptors = keys
                .iter()
                .map(|&k| {
                    let key = KEYS.get(k).copied().unwrap_or("gc");
                    let value = if key == "path" { "/api/p" } else { "v" };
                    let mut d = Descriptor::from_pairs([(key, value)]);
                    d.hits_addend = Some(hits);
                    d
                })
                .collect();
            let request = Request {
                domain: "ops".into(),
                descriptors,
                hits_addend: 0,
            };
            let explained = rt.block_on(limiter.explain(&request)).unwrap();
            let decided = rt.block_on(limiter.should_rate_limit(&request)).unwrap();
            let predicted: Vec<_> = explained
                .descriptors
                .into_iter()
                .map(|d| d.status)
                .collect();
            if predicted != decided.statuses || explained.overall_code != decided.overall_code {
                return Err(TestCaseError::fail(format!(
                    "{request:?}: explained {predicted:?}, decided {:?}",
                    decided.statuses
                )));
            }
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}

#[test]
fn explain_predicts_the_decision_on_redis() {
    explain_predicts_the_decision_on(standalone());
}

#[test]
fn explain_predicts_the_decision_on_a_redis_cluster() {
    explain_predicts_the_decision_on(cluster());
}
