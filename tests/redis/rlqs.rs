//! The Rate Limit Quota Service over real gRPC streams, with a test client
//! playing Envoy (tests/support/rlqs.rs) and floodgate on a manual clock:
//! first report, periodic reports, TTLs, the split between Envoys, abandon
//! after idleness, reconnects, bad input, and two instances sharing one
//! Redis splitting one budget.

use crate::support::backends::{connected, redis_config};
use crate::support::grpc::{TestServer, index};
use crate::support::http;
use crate::support::redis::RedisServer;
use crate::support::rlqs::{Answer, Assigned, RlqsClient, usage};
use floodgate::LimiterOptions;
use floodgate::RlqsOptions;
use floodgate::ServeOptions;
use floodgate::StreamBounds;
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, RedisMode, StoreKind};
use std::sync::Arc;
use std::time::Duration;

/// Per user 60/min; unlimited, 0, shadow, GCRA, nested and shared rules.
const RULES: &str = include_str!("../fixtures/rlqs/edge.yaml");

const TTL: Duration = Duration::from_secs(12);
const IDLE: Duration = Duration::from_secs(30);
const FIVE_SECONDS: Duration = Duration::from_secs(5);

fn options() -> RlqsOptions {
    RlqsOptions {
        assignment_ttl: TTL,
        idle_timeout: IDLE,
        bounds: StreamBounds {
            max_entries: 3,
            max_entry_bytes: 64,
            max_domain_bytes: 16,
            max_buckets: 100,
        },
        ..RlqsOptions::default()
    }
}

fn clock() -> ManualClock {
    ManualClock::new(UnixMillis::from_secs(1_700_000_000))
}

async fn server(store: StoreKind, clock: &ManualClock, rlqs: RlqsOptions) -> TestServer {
    TestServer::start_with(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(clock.clone()),
        LimiterOptions::default(),
        ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            rlqs,
            ..ServeOptions::default()
        },
    )
    .await
}

async fn memory_server(clock: &ManualClock) -> TestServer {
    server(StoreKind::Memory(MemoryStore::new()), clock, options()).await
}

fn only(answers: &[Answer]) -> Assigned {
    assert_eq!(answers.len(), 1, "{answers:?}");
    answers[0].assigned
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = p
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// The rule: 60 per minute, 60 at once.
fn assert_within_rule(assigned: &[Assigned]) {
    let rate: f64 = assigned.iter().map(Assigned::rate).sum();
    let tokens: u32 = assigned.iter().map(Assigned::tokens).sum();
    assert!(rate <= 1.0, "rates add up to {rate} > 1/s: {assigned:?}");
    assert!(tokens <= 60, "sizes add up to {tokens} > 60: {assigned:?}");
}

#[tokio::test]
async fn first_report_gets_assignments_with_a_ttl_for_every_kind_of_rule() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, None).await;
    let answers = envoy
        .ask(
            "edge",
            &[
                usage(&[("user", "alice")], 1, 0),
                usage(&[("vip", "v")], 1, 0),
                usage(&[("banned", "b")], 1, 0),
                usage(&[("trial", "t")], 1, 0),
            ],
        )
        .await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    for answer in &answers {
        assert_eq!(answer.ttl_ms, 12_000, "{answer:?}");
    }
    let by_bucket = |p: &[(&str, &str)]| {
        answers
            .iter()
            .find(|a| a.bucket == pairs(p))
            .unwrap()
            .assigned
    };
    assert_eq!(by_bucket(&[("vip", "v")]), Assigned::AllowAll);
    assert_eq!(by_bucket(&[("banned", "b")]), Assigned::DenyAll);
    assert_eq!(
        by_bucket(&[("trial", "t")]),
        Assigned::AllowAll,
        "shadow never denies"
    );
    // Alone on the bucket: all but the spare slot (97.5 %) of 60/min.
    let alice = by_bucket(&[("user", "alice")]);
    assert_eq!(alice.tokens(), 58);
    assert!(alice.rate() > 0.97 && alice.rate() <= 0.975, "{alice:?}");

    // A bucket id matches as its pairs in key order: {user, plan}.
    let nested = envoy
        .ask("edge", &[usage(&[("user", "bob"), ("plan", "free")], 1, 0)])
        .await;
    assert!(
        (only(&nested).rate() - 0.975).abs() < 0.01,
        "3600/hour: {nested:?}"
    );
    // No rule, or a domain without rules: ALLOW_ALL.
    let unmatched = envoy.ask("edge", &[usage(&[("color", "red")], 1, 0)]).await;
    assert_eq!(only(&unmatched), Assigned::AllowAll);

    let metrics = http::get(server.http_addr, "/metrics").await.body;
    assert!(metrics.contains("ratelimit_rlqs_streams 1\n"), "{metrics}");
    assert!(
        metrics.contains("ratelimit_rlqs_reports_total 6\n"),
        "{metrics}"
    );
    assert!(metrics.contains("ratelimit_rlqs_buckets 6\n"), "{metrics}");
    assert!(
        metrics.contains("ratelimit_rlqs_assignments_pushed_total{strategy=\"token_bucket\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratelimit_rlqs_granted_tokens_per_second 1.9"),
        "{metrics}"
    );
    // The operator view of a blanket decision says why.
    let view = http::get(server.http_addr, "/rlqs?domain=edge&bucket=vip=v").await;
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["reason"], "unlimited", "{json}");
    assert_eq!(json["blanket"]["strategy"], "allow_all", "{json}");
    assert_eq!(json["members"].as_array().unwrap().len(), 0, "{json}");
    drop(envoy);
    server.shutdown().await;
}

#[tokio::test]
async fn unmatched_buckets_can_be_denied() {
    let clock = clock();
    let rlqs = RlqsOptions {
        unmatched: floodgate::Unmatched::DenyAll,
        ..options()
    };
    let server = server(StoreKind::Memory(MemoryStore::new()), &clock, rlqs).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, None).await;
    let answers = envoy
        .ask("elsewhere", &[usage(&[("user", "a")], 1, 0)])
        .await;
    assert_eq!(only(&answers), Assigned::DenyAll);
    drop(envoy);
    server.shutdown().await;
}

#[tokio::test]
async fn periodic_reports_push_changes_only_and_refresh_before_the_ttl() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, None).await;
    let alice: &[(&str, &str)] = &[("user", "alice")];
    let first = only(&envoy.ask("edge", &[usage(alice, 1, 0)]).await);
    // Alone, the split does not move with demand: nothing to push.
    clock.advance(FIVE_SECONDS);
    let nothing = envoy.ask_or_nothing("edge", &[usage(alice, 40, 200)]).await;
    assert!(nothing.is_empty(), "{nothing:?}");
    // Half the TTL after the push, the same assignment is sent again so it
    // never expires while the stream lives.
    clock.advance(Duration::from_secs(2));
    let refreshed = envoy.ask("edge", &[usage(alice, 5, 5)]).await;
    assert_eq!(only(&refreshed), first);
    assert_eq!(refreshed[0].ttl_ms, 12_000);
    // Shutdown ends the stream (OK, so the Envoy reconnects) instead of
    // waiting for it.
    server.shutdown().await;
    assert!(matches!(envoy.try_next().await, Ok(None)));
}

#[tokio::test]
async fn envoys_split_the_budget_by_demand_and_a_newcomer_gets_a_share_at_once() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut a = RlqsClient::connect(server.grpc_addr, Some("envoy-a")).await;
    let mut b = RlqsClient::connect(server.grpc_addr, Some("envoy-b")).await;
    let user: &[(&str, &str)] = &[("user", "u")];

    let a1 = only(&a.ask("edge", &[usage(user, 1, 0)]).await);
    let b1 = only(&b.ask("edge", &[usage(user, 1, 0)]).await);
    // The newcomer gets the spare slot at once: 2.5 % of 60 is one token.
    assert_eq!(b1.tokens(), 1, "{b1:?}");
    assert_within_rule(&[a1, b1]);

    // Both report every 5 s; a has three times b's demand.
    let mut last = (a1, b1);
    for _ in 0..3 {
        clock.advance(FIVE_SECONDS);
        if let [answer] = a
            .ask_or_nothing("edge", &[usage(user, 30, 120)])
            .await
            .as_slice()
        {
            last.0 = answer.assigned;
        }
        assert_within_rule(&[last.0, last.1]);
        if let [answer] = b
            .ask_or_nothing("edge", &[usage(user, 10, 40)])
            .await
            .as_slice()
        {
            last.1 = answer.assigned;
        }
        assert_within_rule(&[last.0, last.1]);
    }
    let (a_now, b_now) = last;
    // Floor 5 % / 3 each, the rest 3:1: a 72.9 %, b 25.4 %.
    assert!(a_now.rate() > 0.72 && a_now.rate() < 0.73, "{a_now:?}");
    assert!(b_now.rate() > 0.25 && b_now.rate() < 0.26, "{b_now:?}");
    assert_eq!((a_now.tokens(), b_now.tokens()), (43, 15));

    // The operator view shows both members.
    let view = http::get(server.http_addr, "/rlqs?domain=edge&bucket=user=u").await;
    assert_eq!(view.status, 200, "{}", view.body);
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["rule"], "edge.user");
    assert_eq!(json["members"].as_array().unwrap().len(), 2, "{json}");
    assert_eq!(json["members"][0]["member"], "client:envoy-a");
    assert_eq!(json["members"][0]["demand_per_sec"], 30.0);
    assert_eq!(json["members"][1]["assignment"]["max_tokens"], 15);
    let bad = http::get(server.http_addr, "/rlqs?domain=edge&bucket=user").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    drop((a, b));
    server.shutdown().await;
}

#[tokio::test]
async fn idle_buckets_are_abandoned_and_release_their_share() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut a = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    let mut b = RlqsClient::connect(server.grpc_addr, Some("b")).await;
    let user: &[(&str, &str)] = &[("user", "idle")];
    only(&a.ask("edge", &[usage(user, 1, 0)]).await);
    only(&b.ask("edge", &[usage(user, 1, 0)]).await);
    // a goes quiet: still reports the bucket (as Envoy does), with zeros.
    for _ in 0..5 {
        clock.advance(FIVE_SECONDS);
        a.ask_or_nothing("edge", &[usage(user, 0, 0)]).await;
        b.ask_or_nothing("edge", &[usage(user, 3, 0)]).await;
    }
    clock.advance(FIVE_SECONDS);
    clock.advance(Duration::from_secs(1));
    let gone = a.ask_or_nothing("edge", &[usage(user, 0, 0)]).await;
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].assigned, Assigned::Abandon);
    let view = http::get(server.http_addr, "/rlqs?domain=edge&bucket=user=idle").await;
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 1, "{json}");
    // b now holds (almost) the whole budget after its next report.
    clock.advance(FIVE_SECONDS);
    let b_now = b.ask_or_nothing("edge", &[usage(user, 3, 0)]).await;
    assert_eq!(b_now[0].assigned.tokens(), 58, "{b_now:?}");
    let metrics = http::get(server.http_addr, "/metrics").await.body;
    assert!(
        metrics.contains("ratelimit_rlqs_abandoned_total 1\n"),
        "{metrics}"
    );
    // a's withdrawn bucket no longer counts in the granted rate: only b's.
    assert!(
        metrics.contains("ratelimit_rlqs_granted_tokens_per_second 0.975\n"),
        "{metrics}"
    );
    drop((a, b));
    server.shutdown().await;
}

#[tokio::test]
async fn a_reconnecting_envoy_keeps_its_place_in_the_split() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut a = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    let mut b = RlqsClient::connect(server.grpc_addr, Some("b")).await;
    let user: &[(&str, &str)] = &[("user", "r")];
    a.ask("edge", &[usage(user, 1, 0)]).await;
    b.ask("edge", &[usage(user, 1, 0)]).await;
    let mut a_last = Assigned::AllowAll;
    for _ in 0..2 {
        clock.advance(FIVE_SECONDS);
        if let [answer] = a
            .ask_or_nothing("edge", &[usage(user, 10, 0)])
            .await
            .as_slice()
        {
            a_last = answer.assigned;
        }
        b.ask_or_nothing("edge", &[usage(user, 10, 0)]).await;
    }
    drop(a);
    clock.advance(FIVE_SECONDS);
    let mut again = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    // A new stream pushes at once; the share is the one a held: the
    // registry kept a's last report (10 requests in the 5 s since are the
    // same 2/s) and its grant, and counts two members, not three.
    let first = only(&again.ask("edge", &[usage(user, 10, 0)]).await);
    assert_eq!(first, a_last);
    let view = http::get(server.http_addr, "/rlqs?domain=edge&bucket=user=r").await;
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 2, "{json}");
    // Without a client id, every stream is a member of its own.
    let mut anonymous = RlqsClient::connect(server.grpc_addr, None).await;
    anonymous.ask("edge", &[usage(user, 1, 0)]).await;
    drop(anonymous);
    let mut anonymous = RlqsClient::connect(server.grpc_addr, None).await;
    anonymous.ask("edge", &[usage(user, 1, 0)]).await;
    let view = http::get(server.http_addr, "/rlqs?domain=edge&bucket=user=r").await;
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 4, "{json}");
    drop((again, b, anonymous));
    server.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_refused_and_the_others_go_on() {
    let clock = clock();
    let mut rlqs = options();
    rlqs.bounds.max_buckets = 4;
    let server = server(StoreKind::Memory(MemoryStore::new()), &clock, rlqs).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, None).await;
    let mut other = RlqsClient::connect(server.grpc_addr, None).await;
    // Too many entries (bound 3), an entry too long (64 bytes): DENY_ALL,
    // and the stream answers the valid bucket of the same report.
    let long = "x".repeat(65);
    let answers = envoy
        .ask(
            "edge",
            &[
                usage(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")], 1, 0),
                usage(&[("user", &long)], 1, 0),
                usage(&[("user", "ok")], 1, 0),
            ],
        )
        .await;
    assert_eq!(answers.len(), 3, "{answers:?}");
    let ok = answers
        .iter()
        .find(|a| a.bucket == pairs(&[("user", "ok")]))
        .unwrap();
    assert_eq!(ok.assigned.tokens(), 58);
    assert_eq!(
        answers
            .iter()
            .filter(|a| a.assigned == Assigned::DenyAll)
            .count(),
        2
    );
    // A flood of distinct buckets: past 4 per stream, DENY_ALL, untracked.
    for i in 0..6 {
        let name = format!("flood-{i}");
        let answer = envoy.ask("edge", &[usage(&[("user", &name)], 1, 0)]).await;
        // One tracked already ("ok"): three more fit.
        assert_eq!(only(&answer) != Assigned::DenyAll, i < 3, "{i}: {answer:?}");
    }
    let metrics = http::get(server.http_addr, "/metrics").await.body;
    assert!(
        metrics.contains("ratelimit_rlqs_refused_total{reason=\"bad_bucket\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratelimit_rlqs_refused_total{reason=\"too_many_buckets\"} 3\n"),
        "{metrics}"
    );
    // The known bucket still reports and is answered.
    clock.advance(Duration::from_secs(6));
    let known = envoy.ask("edge", &[usage(&[("user", "ok")], 1, 0)]).await;
    assert_eq!(only(&known).tokens(), 58);

    // Changing the domain ends that stream with INVALID_ARGUMENT...
    envoy
        .report("other", &[usage(&[("user", "ok")], 1, 0)])
        .await;
    let status = envoy.try_next().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "domain changed on the stream from 'edge'; open a new stream for another domain"
    );
    // ...and so does a first report without one, or one too long.
    let mut empty = RlqsClient::connect(server.grpc_addr, None).await;
    empty.report("", &[usage(&[("user", "a")], 1, 0)]).await;
    let status = empty.try_next().await.unwrap_err();
    assert_eq!(
        status.message(),
        "rate limit quota domain must not be empty"
    );
    let mut long_domain = RlqsClient::connect(server.grpc_addr, None).await;
    long_domain
        .report("a-domain-of-many-bytes", &[usage(&[("user", "a")], 1, 0)])
        .await;
    let status = long_domain.try_next().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Another stream is unaffected.
    let fine = other.ask("edge", &[usage(&[("vip", "x")], 1, 0)]).await;
    assert_eq!(only(&fine), Assigned::AllowAll);
    drop((envoy, other, empty, long_domain));
    server.shutdown().await;
}

/// Two instances on one store: a on the first, b on the second, the same
/// bucket. Reports alternate every 5 s; the assignments in force never add
/// up to more than the rule, and both converge to their demand's share.
async fn two_instances_split_one_budget(first: StoreKind, second: StoreKind) {
    let clock = clock();
    let one = server(first, &clock, options()).await;
    let two = server(second, &clock, options()).await;
    let mut a = RlqsClient::connect(one.grpc_addr, Some("a")).await;
    let mut b = RlqsClient::connect(two.grpc_addr, Some("b")).await;
    let user: &[(&str, &str)] = &[("user", "shared")];
    let mut in_force = (
        only(&a.ask("edge", &[usage(user, 1, 0)]).await),
        only(&b.ask("edge", &[usage(user, 1, 0)]).await),
    );
    assert_within_rule(&[in_force.0, in_force.1]);
    assert!(in_force.1.tokens() >= 1, "the newcomer has a share at once");
    for _ in 0..3 {
        clock.advance(FIVE_SECONDS);
        if let [answer] = a
            .ask_or_nothing("edge", &[usage(user, 50, 50)])
            .await
            .as_slice()
        {
            in_force.0 = answer.assigned;
        }
        assert_within_rule(&[in_force.0, in_force.1]);
        if let [answer] = b
            .ask_or_nothing("edge", &[usage(user, 50, 50)])
            .await
            .as_slice()
        {
            in_force.1 = answer.assigned;
        }
        assert_within_rule(&[in_force.0, in_force.1]);
    }
    assert_eq!(in_force.0, in_force.1, "equal demand, equal shares");
    assert_eq!(in_force.0.tokens(), 29);
    // Either instance shows both members.
    let view = http::get(two.http_addr, "/rlqs?domain=edge&bucket=user=shared").await;
    let json: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 2, "{json}");
    drop((a, b));
    one.shutdown().await;
    two.shutdown().await;
}

#[tokio::test]
async fn two_instances_on_one_redis_split_one_budget() {
    let redis = RedisServer::start();
    let store = || connected(redis_config(RedisMode::Single, redis.addr()));
    two_instances_split_one_budget(store().await, store().await).await;
}

#[tokio::test]
async fn two_instances_on_one_redis_cluster_split_one_budget() {
    let cluster = tokio::task::spawn_blocking(crate::support::redis::shared_cluster)
        .await
        .unwrap();
    // The two instances share one prefix, apart from other tests' keys.
    let config = floodgate::RedisConfig {
        key_prefix: "rlqs_split_".to_owned(),
        ..redis_config(RedisMode::Cluster, cluster.seeds())
    };
    let store = || connected(config.clone());
    two_instances_split_one_budget(store().await, store().await).await;
}

#[tokio::test]
async fn memory_and_redis_registries_grant_the_same() {
    // The Lua script and the Rust registry compute the same shares.
    let redis = RedisServer::start();
    let clock = clock();
    let memory = server(StoreKind::Memory(MemoryStore::new()), &clock, options()).await;
    let shared = server(
        connected(redis_config(RedisMode::Single, redis.addr())).await,
        &clock,
        options(),
    )
    .await;
    let demands = [(1_u64, 7_u64), (13, 0), (250, 3_000), (0, 0), (9, 9)];
    let mut on_memory = Vec::new();
    let mut on_redis = Vec::new();
    for (server, out) in [(&memory, &mut on_memory), (&shared, &mut on_redis)] {
        let mut clients = Vec::new();
        for i in 0..demands.len() {
            clients.push(RlqsClient::connect(server.grpc_addr, Some(&format!("m{i}"))).await);
        }
        for (client, (allowed, denied)) in clients.iter_mut().zip(demands) {
            let answer = client
                .ask("edge", &[usage(&[("user", "x")], allowed, denied)])
                .await;
            out.push(only(&answer));
        }
    }
    assert_eq!(on_memory, on_redis);
    memory.shutdown().await;
    shared.shutdown().await;
}

#[tokio::test]
async fn a_failing_store_makes_no_new_assignments_and_recovers() {
    let mut redis = RedisServer::start();
    let clock = clock();
    let mut config = redis_config(RedisMode::Single, redis.addr());
    config.timeout = Duration::from_millis(300);
    let server = server(connected(config).await, &clock, options()).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    let user: &[(&str, &str)] = &[("user", "s")];
    assert_eq!(
        only(&envoy.ask("edge", &[usage(user, 1, 0)]).await).tokens(),
        58
    );
    redis.stop();
    // Blanket answers need no store and still come; the split bucket gets
    // nothing new (its assignment in force lasts until its TTL).
    clock.advance(Duration::from_secs(7));
    let answers = envoy
        .ask("edge", &[usage(user, 5, 0), usage(&[("vip", "v")], 1, 0)])
        .await;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].assigned, Assigned::AllowAll);
    let metrics = http::get(server.http_addr, "/metrics").await.body;
    assert!(
        metrics.contains("ratelimit_rlqs_store_errors_total 1\n"),
        "{metrics}"
    );
    // Redis is back: the next report is answered again.
    redis.restart(&[]);
    let mut back = Vec::new();
    for _ in 0..50 {
        clock.advance(Duration::from_secs(7));
        back = envoy.ask_or_nothing("edge", &[usage(user, 5, 0)]).await;
        if !back.is_empty() {
            break;
        }
    }
    assert_eq!(only(&back).tokens(), 58, "{back:?}");
    drop(envoy);
    server.shutdown().await;
}

#[tokio::test]
async fn rlqs_is_served_over_the_same_tls() {
    use crate::support::tls::{Ca, write};
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server ca");
    let pem = ca.server();
    let clock = clock();
    let server = TestServer::start_with(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(clock.clone()),
        LimiterOptions::default(),
        ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            tls: Some(floodgate::TlsOptions {
                cert: write(dir.path(), "tls.crt", &pem.cert),
                key: write(dir.path(), "tls.key", &pem.key),
                client_ca: None,
                client_san: None,
            }),
            rlqs: options(),
            ..ServeOptions::default()
        },
    )
    .await;
    let channel = Channel::from_shared(format!("https://{}", server.grpc_addr))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .domain_name("localhost")
                .ca_certificate(Certificate::from_pem(ca.cert_pem())),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut envoy = RlqsClient::over(channel, None).await;
    let answers = envoy.ask("edge", &[usage(&[("user", "t")], 1, 0)]).await;
    assert_eq!(only(&answers).tokens(), 58);
    drop(envoy);
    server.shutdown().await;
}

/// The Redis script and the embedded registry are one algorithm: random
/// reports (members, request counts, leaves, time steps) get the same
/// grants from both, and the grants held never exceed the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_script_and_the_memory_registry_agree_on_random_reports() {
    use floodgate::CounterId;
    use floodgate::algorithm::quota_split::UNITS;
    use floodgate::{DemandRegistry, DemandReport};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let redis = RedisServer::start();
    let on_redis = connected(redis_config(RedisMode::Single, redis.addr())).await;
    let stale = Duration::from_secs(20);
    let step = (
        0_usize..6,
        0_u64..500,
        proptest::bool::weighted(0.1),
        0_u64..9_000,
    );
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&proptest::collection::vec(step, 1..40), |steps| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let memory = MemoryStore::new();
        let id = CounterId::new("edge", [("user", format!("case-{n}").as_str())]);
        let mut now = UnixMillis::from_secs(1_700_000_000);
        // Each member's grant and when it was given: a grant older than
        // `stale` is no longer in force (its assignment expired before).
        let mut held = [(0_u64, UnixMillis(0)); 6];
        for (member, requests, leave, advance_ms) in steps {
            now = UnixMillis(now.0 + advance_ms);
            let name = format!("m{member}");
            let report = [DemandReport {
                id: id.clone(),
                requests,
                leave,
            }];
            let (from_memory, from_redis) = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    (
                        memory
                            .report_demand(&name, &report, now, stale)
                            .await
                            .unwrap(),
                        on_redis
                            .report_demand(&name, &report, now, stale)
                            .await
                            .unwrap(),
                    )
                })
            });
            prop_assert_eq!(&from_memory, &from_redis);
            held[member] = (from_memory[0].units, now);
            let in_force: u64 = held
                .iter()
                .filter(|(_, at)| at.0 + 20_000 > now.0)
                .map(|(units, _)| units)
                .sum();
            prop_assert!(in_force <= UNITS, "{:?}", held);
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}

/// Script calls Redis has run so far (EVALSHA and EVAL).
fn script_calls(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]).unwrap();
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn one_report_is_one_script_call_whatever_its_buckets() {
    let redis = RedisServer::start();
    let clock = clock();
    let store = connected(redis_config(RedisMode::Single, redis.addr())).await;
    let server = server(store, &clock, options()).await;
    let mut envoy = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    envoy.ask("edge", &[usage(&[("user", "warm")], 1, 0)]).await;
    let before = script_calls(&redis);
    let answers = envoy
        .ask(
            "edge",
            &[
                usage(&[("user", "x")], 1, 0),
                usage(&[("user", "y")], 1, 0),
                usage(&[("user", "z")], 1, 0),
                usage(&[("vip", "v")], 1, 0),
            ],
        )
        .await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(script_calls(&redis) - before, 1);
    drop(envoy);
    server.shutdown().await;
}

/// The README's cost of a shift: traffic moving from one Envoy to another
/// reaches its new share by the receiving Envoy's second report after the
/// move (two report intervals), as the other gives its share back at its
/// own report in between.
#[tokio::test]
async fn a_traffic_shift_reaches_the_new_split_within_two_reports() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let mut a = RlqsClient::connect(server.grpc_addr, Some("a")).await;
    let mut b = RlqsClient::connect(server.grpc_addr, Some("b")).await;
    let user: &[(&str, &str)] = &[("user", "shift")];
    a.ask("edge", &[usage(user, 1, 0)]).await;
    b.ask("edge", &[usage(user, 1, 0)]).await;
    let mut b_now = Assigned::AllowAll;
    // Steady: a carries the traffic (30/s), b almost none (1/s).
    for _ in 0..2 {
        clock.advance(FIVE_SECONDS);
        a.ask_or_nothing("edge", &[usage(user, 30, 120)]).await;
        if let [answer] = b
            .ask_or_nothing("edge", &[usage(user, 5, 0)])
            .await
            .as_slice()
        {
            b_now = answer.assigned;
        }
    }
    assert!(b_now.rate() < 0.06, "{b_now:?}");
    // The traffic moves to b. b reports first: its share can only grow
    // into the room a has left.
    clock.advance(FIVE_SECONDS);
    let first = b.ask_or_nothing("edge", &[usage(user, 30, 120)]).await;
    assert!(first.is_empty() || only(&first).rate() < 0.1, "{first:?}");
    a.ask_or_nothing("edge", &[usage(user, 0, 0)]).await;
    // b's second report after the move: the new split.
    clock.advance(FIVE_SECONDS);
    let second = b.ask_or_nothing("edge", &[usage(user, 30, 120)]).await;
    let b_new = only(&second);
    assert!(b_new.rate() > 0.96, "{b_new:?}");
    assert_eq!(b_new.tokens(), 58);
    drop((a, b));
    server.shutdown().await;
}

#[tokio::test]
async fn a_newcomer_finding_no_room_is_denied_until_the_others_give_some_back() {
    let clock = clock();
    let server = memory_server(&clock).await;
    let user: &[(&str, &str)] = &[("user", "crowd")];
    let mut envoys = Vec::new();
    for name in ["a", "b", "c"] {
        envoys.push(RlqsClient::connect(server.grpc_addr, Some(name)).await);
    }
    let mut first = Vec::new();
    for envoy in &mut envoys {
        first.push(only(&envoy.ask("edge", &[usage(user, 1, 0)]).await));
    }
    // a alone took 97.5 %, b the spare slot, nothing is left for c.
    assert_eq!(first[0].tokens(), 58);
    assert_eq!(first[1].tokens(), 1);
    assert_eq!(first[2], Assigned::DenyAll);
    // a's next report gives room back; c's next report takes some.
    clock.advance(FIVE_SECONDS);
    envoys[0].ask_or_nothing("edge", &[usage(user, 5, 0)]).await;
    let c = envoys[2].ask_or_nothing("edge", &[usage(user, 5, 0)]).await;
    assert!(only(&c).tokens() >= 1, "{c:?}");
    drop(envoys);
    server.shutdown().await;
}
