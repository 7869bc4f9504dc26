//! Redis-specific behaviour through a served floodgate: key layout and
//! expiry, round trips, several instances sharing one Redis, Redis going away
//! and coming back, Sentinel failover, and the local over-limit cache.

use crate::support::backends::{connected, redis_config};
use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::redis::RedisServer;
use floodgate::{FailureMode, LimiterOptions};
use floodgate::{ManualClock, SystemClock, UnixMillis};
use floodgate::{RedisConfig, RedisMode, RedisStore, StoreKind};
use std::sync::Arc;
use std::time::Duration;

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: hundred
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: five
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: api
    rate_limits:
      - {unit: second, requests_per_unit: 1000, algorithm: sliding_window}
      - {unit: second, unit_multiplier: 10, requests_per_unit: 5000, algorithm: sliding_window}
      - {unit: second, unit_multiplier: 15, requests_per_unit: 7000, algorithm: sliding_window}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: paced
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 5}
  - key: logged
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_log}
";

const T0: u64 = 1_700_000_080;

async fn serve(store: StoreKind, options: LimiterOptions) -> TestServer {
    TestServer::start(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        options,
    )
    .await
}

/// floodgate on the standalone `redis`, default options.
async fn serve_on(redis: &RedisServer) -> TestServer {
    serve(
        connected(redis_config(RedisMode::Single, redis.addr())).await,
        LimiterOptions::default(),
    )
    .await
}

/// EVALSHA calls a Redis has served (INFO commandstats).
pub(crate) fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(['=', ',']).nth(1))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_carry_prefix_hash_tag_window_and_expiry() {
    let redis = RedisServer::start();
    let config = RedisConfig {
        key_prefix: "fg:".into(),
        expiration_jitter_max_secs: 5,
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    let mut client = server.client().await;
    ask(
        &mut client,
        request("edge", &[&[("tenant", "acme"), ("user", "a_b")]]),
    )
    .await;
    let keys = redis.cli(&["--raw", "KEYS", "*"]).unwrap();
    let start = T0 - T0 % 60;
    assert_eq!(
        keys.trim(),
        format!("fg:{{edge|tenant=acme|user=a_b}}f60:{start}")
    );
    let ttl: u64 = redis
        .cli(&["TTL", keys.trim()])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((55..=65).contains(&ttl), "ttl {ttl}");
    server.shutdown().await;
}

/// Milliseconds Redis keeps `key` (PTTL).
fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cli(&["PTTL", key]).unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_states_and_logs_outlive_their_time_by_the_clock_skew() {
    // Redis expires keys by its own clock. An instance whose clock is
    // behind the writer's still needs a TAT or a log entry after the
    // writer's clock has passed it: each key lives 2 s (the skew sliding
    // windows allow) past what it holds.
    let redis = RedisServer::start();
    let server = serve_on(&redis).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        let r = ask(
            &mut client,
            request("edge", &[&[("paced", "a")], &[("logged", "a")]]),
        )
        .await;
        assert_eq!(r.overall_code, OK);
    }
    let gcra = "{edge|paced=a}g100000:5";
    let log = "{edge|logged=a}l";
    // Three cells of 100 ms: the TAT is 300 ms ahead; the log's window 1 s.
    let (gcra_ttl, log_ttl) = (pttl(&redis, gcra), pttl(&redis, log));
    assert!(
        (2_000..=2_300).contains(&gcra_ttl),
        "GCRA state expiry {gcra_ttl} ms"
    );
    assert!(
        (2_000..=3_000).contains(&log_ttl),
        "log expiry {log_ttl} ms"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_call_per_request_and_none_for_unlimited_requests() {
    let redis = RedisServer::start();
    let server = serve_on(&redis).await;
    let mut client = server.client().await;
    let before = evalsha_calls(&redis);
    ask(
        &mut client,
        request(
            "edge",
            &[
                &[("user", "a")],
                &[("user", "b")],
                &[("hundred", "x")],
                &[("nomatch", "x")],
            ],
        ),
    )
    .await;
    // Three limited descriptors, one batch script call on standalone Redis.
    assert_eq!(evalsha_calls(&redis) - before, 1);
    let r = ask(
        &mut client,
        request("edge", &[&[("user", "a")], &[("user", "b")]]),
    )
    .await;
    assert_eq!(
        r.statuses
            .iter()
            .map(|s| s.limit_remaining)
            .collect::<Vec<_>>(),
        vec![1, 1],
        "each descriptor counted once by the batch call"
    );
    assert_eq!(evalsha_calls(&redis) - before, 2);
    ask(&mut client, request("edge", &[&[("nomatch", "x")]])).await;
    assert_eq!(
        evalsha_calls(&redis) - before,
        2,
        "nothing limited, no call"
    );
    server.shutdown().await;
}

/// The in-flight gauge of a served floodgate.
fn in_flight(server: &TestServer) -> u64 {
    server
        .limiter
        .metrics()
        .render(None)
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_server_should_rate_limit_in_flight "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_behind_a_call_share_the_next_one_and_count_exactly() {
    let redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_secs(20),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    let client = server.client().await;
    // Alone on an idle server, a request is one call of its own.
    let before = evalsha_calls(&redis);
    ask(&mut client.clone(), request("edge", &[&[("five", "solo")]])).await;
    assert_eq!(evalsha_calls(&redis) - before, 1);

    // Redis frozen: the first calls hang, every other request queues.
    let before = evalsha_calls(&redis);
    redis.pause();
    let n = 200;
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .should_rate_limit(request("edge", &[&[("hundred", "hot")]]))
                    .await
                    .map(|r| r.into_inner().overall_code)
            })
        })
        .collect();
    let queued =
        crate::support::poll_until(Duration::from_secs(10), Duration::from_millis(10), || {
            (in_flight(&server) == n).then_some(true)
        });
    redis.resume();
    assert!(queued, "{} of {n} requests in flight", in_flight(&server));
    let mut codes = Vec::new();
    for call in calls {
        codes.push(call.await.unwrap().expect("answered"));
    }
    // Exactly the limit admitted: sharing a call never over-admits.
    assert_eq!(codes.iter().filter(|&&c| c == OK).count(), 100);
    assert_eq!(codes.iter().filter(|&&c| c == OVER_LIMIT).count(), 100);
    // Two lanes' first calls, then the queue in calls of at most 128.
    let calls = evalsha_calls(&redis) - before;
    assert!(calls <= 6, "{calls} script calls for {n} requests");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_abandoned_while_queued_counts_nothing() {
    use floodgate::{Descriptor, Request};
    let redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_secs(20),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    let one = |value: &str| Request {
        domain: "edge".into(),
        descriptors: vec![Descriptor::from_pairs([("hundred", value)])],
        hits_addend: 0,
    };
    redis.pause();
    // A call in flight on each of the two connections (requests go to the
    // lanes in runs of 32: the 64 fill both; what does not fit in the
    // first call of a lane queues)…
    let busy: Vec<_> = (0..64)
        .map(|_| {
            let limiter = server.limiter.clone();
            let request = one("busy");
            tokio::spawn(async move { limiter.should_rate_limit(&request).await })
        })
        .collect();
    let both_sent =
        crate::support::poll_until(Duration::from_secs(10), Duration::from_millis(10), || {
            (in_flight_calls(&redis) >= 2).then_some(true)
        });
    // …so these queue behind them, and their callers give up.
    for _ in 0..4 {
        let gave_up = server
            .limiter
            .should_rate_limit_within(&one("gone"), Some(Duration::from_millis(50)))
            .await;
        assert!(gave_up.is_err(), "answered while Redis was frozen");
    }
    redis.resume();
    assert!(both_sent, "the first calls never reached Redis");
    for call in busy {
        call.await.unwrap().expect("answered once Redis is back");
    }
    let after = server
        .limiter
        .should_rate_limit(&one("gone"))
        .await
        .expect("answered");
    assert_eq!(
        after.statuses.first().map(|s| s.limit_remaining),
        Some(99),
        "only the last request counted"
    );
    server.shutdown().await;
}

/// `REDIS_TIMEOUT` bounds every request, the ones queued behind a hung
/// call included (the lane enforces deadlines; there is no timer per
/// request): all of them come back as a store timeout while Redis is still
/// frozen, none waits for it to return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_timeout_answers_requests_queued_behind_a_hung_call() {
    use floodgate::LimitError;
    use floodgate::StoreError;
    use floodgate::{Descriptor, Request};
    let redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(300),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    redis.pause();
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let limiter = server.limiter.clone();
            let request = Request {
                domain: "edge".into(),
                descriptors: vec![Descriptor::from_pairs([("hundred", format!("q{i}"))])],
                hits_addend: 0,
            };
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(20), limiter.should_rate_limit(&request))
                    .await
            })
        })
        .collect();
    let mut timed_out = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(Err(LimitError::Store(StoreError::Timeout))) => timed_out += 1,
            other => panic!("expected the store timeout, got {other:?}"),
        }
    }
    redis.resume();
    assert_eq!(timed_out, 100);
    server.shutdown().await;
}

/// Connections to a (frozen) Redis with bytes it has not read yet: calls
/// sent and waiting, read from the kernel's socket table (`/proc/net/tcp`:
/// local port, state 01 established, `tx_queue:rx_queue` in hex).
fn in_flight_calls(server: &RedisServer) -> usize {
    let port: u16 = server
        .addr()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let local = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1).is_some_and(|a| a.ends_with(&local))
                && fields.get(3) == Some(&"01")
                && fields
                    .get(4)
                    .and_then(|q| q.split_once(':'))
                    .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
                    .is_some_and(|rx| rx > 0)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_windows_are_one_script_call_over_per_second_buckets() {
    let redis = RedisServer::start();
    let server = serve_on(&redis).await;
    let mut client = server.client().await;
    let before = evalsha_calls(&redis);
    for _ in 0..5 {
        let r = ask(&mut client, request("edge", &[&[("api", "k1")]])).await;
        assert_eq!(r.overall_code, OK);
    }
    assert_eq!(
        evalsha_calls(&redis) - before,
        5,
        "one script call per request"
    );
    let keys = redis.cli(&["--raw", "KEYS", "*"]).unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys, vec![format!("{{edge|api=k1}}s1:{T0}").as_str()]);
    let ttl: u64 = redis
        .cli(&["TTL", keys[0]])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Longest window (15 s) + the 2 s read ahead + one bucket.
    assert!(
        (16..=18).contains(&ttl),
        "bucket expiry covers the longest window and the read-ahead: {ttl}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_global_limit() {
    let redis = RedisServer::start();
    let a = serve_on(&redis).await;
    let b = serve_on(&redis).await;
    let channels = [a.channel().await, b.channel().await];
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..500 {
        let mut client = floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(
            channels[i % 2].clone(),
        );
        calls.spawn(async move {
            ask(&mut client, request("edge", &[&[("hundred", "global")]]))
                .await
                .overall_code
        });
    }
    let mut ok = 0;
    while let Some(code) = calls.join_next().await {
        ok += usize::from(code.unwrap() == OK);
    }
    assert_eq!(ok, 100);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_threads_racing_on_a_limit_of_five() {
    let redis = RedisServer::start();
    let addr = redis.addr();
    let limiter_store = connected(redis_config(RedisMode::Single, addr)).await;
    let server = serve(limiter_store, LimiterOptions::default()).await;
    let grpc = server.grpc_addr;
    // Ten OS threads, each with its own runtime and connection: the
    // check-then-act race of GET-then-INCR limiters.
    let admitted: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..10)
            .map(|_| {
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    rt.block_on(async move {
                        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
                            .unwrap()
                            .connect()
                            .await
                            .unwrap();
                        let mut client = floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
                        usize::from(ask(&mut client, request("edge", &[&[("five", "race")]])).await.overall_code == OK)
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 5);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_loss_is_unavailable_then_recovers_without_restart() {
    let mut redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    let mut client = server.client().await;
    let r = ask(&mut client, request("edge", &[&[("user", "x")]])).await;
    assert_eq!(r.overall_code, OK);

    redis.stop();
    // The answer comes back (the store deadline cuts the wait); the outer
    // timeout only keeps a regression from hanging the suite.
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        client.should_rate_limit(request("edge", &[&[("user", "x")]])),
    )
    .await
    .expect("a request while redis is down must not hang")
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert_eq!(err.message(), "rate limit store unavailable");

    redis.restart(&[]);
    crate::support::wait_until(
        "recovery after redis restart",
        Duration::from_secs(15),
        || {
            let mut client = client.clone();
            async move {
                client
                    .should_rate_limit(request("edge", &[&[("user", "y")]]))
                    .await
                    .is_ok_and(|r| r.into_inner().overall_code == OK)
            }
        },
    )
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_modes_answer_allow_or_deny_when_redis_is_down() {
    let mut redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let store = connected(config).await;
    let allow = serve(
        store.clone(),
        LimiterOptions {
            failure_mode: FailureMode::Allow,
            ..LimiterOptions::default()
        },
    )
    .await;
    let deny = serve(
        store,
        LimiterOptions {
            failure_mode: FailureMode::Deny,
            ..LimiterOptions::default()
        },
    )
    .await;
    redis.stop();
    let r = ask(
        &mut allow.client().await,
        request("edge", &[&[("user", "x")]]),
    )
    .await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 3));
    let r = ask(
        &mut deny.client().await,
        request("edge", &[&[("user", "x")]]),
    )
    .await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    allow.shutdown().await;
    deny.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_serving_until_redis_is_reachable() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let port = crate::support::free_port();
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(200),
        ..redis_config(RedisMode::Single, format!("127.0.0.1:{port}"))
    };
    let store = StoreKind::Redis {
        main: RedisStore::new(config),
        per_second: None,
    };
    let server = TestServer::start(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(SystemClock),
        LimiterOptions::default(),
    )
    .await;
    let mut health = HealthClient::new(server.channel().await);
    let status = |health: &mut HealthClient<tonic::transport::Channel>| {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest {
                    service: "ratelimit".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .status
        }
    };
    assert_eq!(status(&mut health).await, ServingStatus::NotServing as i32);
    let err = server
        .client()
        .await
        .should_rate_limit(request("edge", &[&[("user", "x")]]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);

    // Bring Redis up on the port floodgate keeps retrying.
    let mut redis = RedisServer::start_on(port);
    crate::support::wait_until(
        "health SERVING once redis is up",
        Duration::from_secs(15),
        || {
            let mut health = health.clone();
            async move { status(&mut health).await == ServingStatus::Serving as i32 }
        },
    )
    .await;
    let r = ask(
        &mut server.client().await,
        request("edge", &[&[("user", "x")]]),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    redis.stop();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cache_answers_known_over_limit_counters_without_redis() {
    let redis = RedisServer::start();
    let server = serve(
        connected(redis_config(RedisMode::Single, redis.addr())).await,
        LimiterOptions {
            local_cache_bytes: 1 << 20,
            ..LimiterOptions::default()
        },
    )
    .await;
    let mut client = server.client().await;
    for _ in 0..4 {
        ask(&mut client, request("edge", &[&[("user", "hot")]])).await;
    }
    let before = evalsha_calls(&redis);
    for _ in 0..10 {
        let r = ask(&mut client, request("edge", &[&[("user", "hot")]])).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OVER_LIMIT, 0)
        );
    }
    assert_eq!(
        evalsha_calls(&redis),
        before,
        "cached over-limit answers reached redis"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_mode_follows_the_master_through_a_failover() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let sentinel_dir = tempfile::tempdir().unwrap();
    let conf = sentinel_dir.path().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "sentinel monitor mymaster 127.0.0.1 {} 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
            master.port
        ),
    )
    .unwrap();
    let sentinel = RedisServer::start_sentinel(&conf);
    crate::support::wait_until("replica in sync", Duration::from_secs(15), || {
        let info = replica.cli(&["INFO", "replication"]).unwrap_or_default();
        async move { info.contains("master_link_status:up") }
    })
    .await;

    let config = RedisConfig {
        timeout: Duration::from_millis(500),
        ..redis_config(RedisMode::Sentinel, format!("mymaster,{}", sentinel.addr()))
    };
    let store = StoreKind::Redis {
        main: RedisStore::new(config),
        per_second: None,
    };
    let server = TestServer::start(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(SystemClock),
        LimiterOptions::default(),
    )
    .await;
    let client = server.client().await;
    crate::support::wait_until(
        "first answer through sentinel",
        Duration::from_secs(15),
        || {
            let mut client = client.clone();
            async move {
                client
                    .should_rate_limit(request("edge", &[&[("hundred", "s")]]))
                    .await
                    .is_ok()
            }
        },
    )
    .await;

    sentinel.cli(&["SENTINEL", "FAILOVER", "mymaster"]).unwrap();
    crate::support::wait_until("replica promoted", Duration::from_secs(15), || {
        let info = replica.cli(&["INFO", "replication"]).unwrap_or_default();
        async move { info.contains("role:master") }
    })
    .await;
    // Writes must reach the new master: its EVALSHA count starts moving.
    let new_master = &replica;
    crate::support::wait_until(
        "answers from the new master",
        Duration::from_secs(15),
        || {
            let mut client = client.clone();
            let calls_before = evalsha_calls(new_master);
            async move {
                let ok = client
                    .should_rate_limit(request("edge", &[&[("hundred", "s")]]))
                    .await
                    .is_ok();
                ok && evalsha_calls(new_master) > calls_before
            }
        },
    )
    .await;
    server.shutdown().await;
    drop((sentinel, master));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_scripts_are_reloaded_and_each_hit_counts_once() {
    let redis = RedisServer::start();
    let server = serve_on(&redis).await;
    let mut client = server.client().await;
    let r = ask(
        &mut client,
        request("edge", &[&[("user", "s")], &[("api", "s")]]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    redis.cli(&["SCRIPT", "FLUSH"]).unwrap();
    let r = ask(
        &mut client,
        request("edge", &[&[("user", "s")], &[("api", "s")]]),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "counted exactly once after NOSCRIPT"
    );
    assert_eq!(r.statuses[1].limit_remaining, 998);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_reloads_flushed_scripts_on_every_node() {
    let cluster = tokio::task::spawn_blocking(|| crate::support::redis::RedisCluster::start(3))
        .await
        .unwrap();
    let server = serve(
        connected(redis_config(RedisMode::Cluster, cluster.seeds())).await,
        LimiterOptions::default(),
    )
    .await;
    let mut client = server.client().await;
    let users: Vec<String> = (0..6).map(|i| format!("u{i}")).collect();
    let descriptors: Vec<[(&str, &str); 1]> =
        users.iter().map(|u| [("user", u.as_str())]).collect();
    let all: Vec<&[(&str, &str)]> = descriptors.iter().map(|d| &d[..]).collect();
    ask(&mut client, request("edge", &all)).await;
    for node in &cluster.nodes {
        node.cli(&["SCRIPT", "FLUSH"]).unwrap();
    }
    let r = ask(&mut client, request("edge", &all)).await;
    assert!(r.statuses.iter().all(|s| s.limit_remaining == 1), "{r:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_a_client_certificate() {
    let pki = crate::support::tls::redis_pki();
    let redis = RedisServer::start_tls(pki.path(), true);
    let tls = floodgate::RedisTls {
        ca_cert: Some(pki.path().join("ca.pem")),
        client_cert: Some(pki.path().join("client.pem")),
        client_key: Some(pki.path().join("client.key")),
        skip_hostname_verification: false,
    };
    let config = RedisConfig {
        tls: Some(tls.clone()),
        ..redis_config(RedisMode::Single, format!("localhost:{}", redis.port))
    };
    let server = serve(connected(config).await, LimiterOptions::default()).await;
    let mut client = server.client().await;
    for remaining in [2, 1, 0] {
        let r = ask(&mut client, request("edge", &[&[("user", "tls")]])).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, remaining)
        );
    }
    assert_eq!(evalsha_calls(&redis), 3, "the hits reached the TLS Redis");
    server.shutdown().await;

    // Without the client certificate the server refuses the handshake.
    let no_client_cert = RedisConfig {
        tls: Some(floodgate::RedisTls {
            client_cert: None,
            client_key: None,
            ..tls
        }),
        connect_timeout: Duration::from_millis(500),
        ..redis_config(RedisMode::Single, format!("localhost:{}", redis.port))
    };
    assert!(RedisStore::new(no_client_cert).connect().await.is_err());
    // A plaintext client cannot talk to the TLS port.
    let plaintext = RedisConfig {
        connect_timeout: Duration::from_millis(500),
        ..redis_config(RedisMode::Single, format!("127.0.0.1:{}", redis.port))
    };
    assert!(RedisStore::new(plaintext).connect().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_hostname_checks_can_be_skipped_but_not_the_ca() {
    let pki = crate::support::tls::redis_pki();
    let redis = RedisServer::start_tls(pki.path(), false);
    let by_ip = |skip: bool| RedisConfig {
        tls: Some(floodgate::RedisTls {
            ca_cert: Some(pki.path().join("ca.pem")),
            skip_hostname_verification: skip,
            ..floodgate::RedisTls::default()
        }),
        connect_timeout: Duration::from_millis(500),
        ..redis_config(RedisMode::Single, format!("127.0.0.1:{}", redis.port))
    };
    // The certificate names localhost, not 127.0.0.1.
    assert!(RedisStore::new(by_ip(false)).connect().await.is_err());
    RedisStore::new(by_ip(true))
        .connect()
        .await
        .expect("hostname check skipped");
    // Another CA is never trusted.
    let other = crate::support::tls::redis_pki();
    let wrong_ca = RedisConfig {
        tls: Some(floodgate::RedisTls {
            ca_cert: Some(other.path().join("ca.pem")),
            ..floodgate::RedisTls::default()
        }),
        connect_timeout: Duration::from_millis(500),
        ..redis_config(RedisMode::Single, format!("localhost:{}", redis.port))
    };
    assert!(RedisStore::new(wrong_ca).connect().await.is_err());
}

/// A Redis that stops answering (SIGSTOP) with a long `REDIS_TIMEOUT`: the
/// caller's `grpc-timeout` bounds the wait, and the caller gets floodgate's
/// failure-policy answer, not its own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_deadline_is_answered_by_the_failure_policy() {
    let redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_secs(60),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let store = connected(config).await;
    let error = serve(store.clone(), LimiterOptions::default()).await;
    let allow = serve(
        store,
        LimiterOptions {
            failure_mode: FailureMode::Allow,
            ..LimiterOptions::default()
        },
    )
    .await;
    let (mut error_client, mut allow_client) = (error.client().await, allow.client().await);
    redis.pause();
    let with_deadline = || {
        let mut r = tonic::Request::new(request("edge", &[&[("user", "slow")]]));
        r.set_timeout(Duration::from_millis(500));
        r
    };
    let err = error_client
        .should_rate_limit(with_deadline())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    let r = allow_client
        .should_rate_limit(with_deadline())
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 3));
    redis.resume();
    let r = ask(&mut error_client, request("edge", &[&[("user", "fast")]])).await;
    assert_eq!(r.overall_code, OK);
    error.shutdown().await;
    allow.shutdown().await;
}

/// A request that arrives before the store's first connection waits for
/// it (within its deadline) instead of failing at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_before_the_first_connection_wait_for_it() {
    let port = crate::support::free_port();
    let config = RedisConfig {
        timeout: Duration::from_secs(20),
        ..redis_config(RedisMode::Single, format!("127.0.0.1:{port}"))
    };
    let store = StoreKind::Redis {
        main: RedisStore::new(config),
        per_second: None,
    };
    let server = serve(store, LimiterOptions::default()).await;
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        let mut r = tonic::Request::new(request("edge", &[&[("user", "early")]]));
        r.set_timeout(Duration::from_secs(15));
        client.should_rate_limit(r).await
    });
    // The call is in flight (or queued) before Redis exists.
    tokio::task::yield_now().await;
    let redis = tokio::task::spawn_blocking(move || RedisServer::start_on(port))
        .await
        .unwrap();
    let r = call.await.unwrap().unwrap().into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    assert!(
        redis
            .cli(&["--raw", "KEYS", "*"])
            .unwrap()
            .contains("early")
    );
    server.shutdown().await;
}

/// A server on `store` whose health follows the store when `follow` is on
/// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
async fn serve_health(store: StoreKind, follow: bool) -> TestServer {
    TestServer::start_with(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
        floodgate::ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            health_follows_store: follow,
            ..floodgate::ServeOptions::default()
        },
    )
    .await
}

async fn healthy(server: &TestServer) -> bool {
    crate::support::http::get(server.http_addr, "/healthcheck")
        .await
        .status
        == 200
}

/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: health turns NOT_SERVING when
/// Redis stops answering, and SERVING again when it is back; without it,
/// health follows only the first connect (the reference's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_a_redis_lost_and_back_when_asked() {
    let mut redis = RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let following = serve_health(connected(config.clone()).await, true).await;
    let first_only = serve_health(connected(config).await, false).await;
    crate::support::wait_until("both healthy", Duration::from_secs(10), || async {
        healthy(&following).await && healthy(&first_only).await
    })
    .await;

    redis.stop();
    crate::support::wait_until(
        "NOT_SERVING without redis",
        Duration::from_secs(15),
        || async { !healthy(&following).await },
    )
    .await;
    assert!(
        healthy(&first_only).await,
        "without the setting, health follows the first connect only"
    );

    redis.restart(&[]);
    crate::support::wait_until(
        "SERVING with redis back",
        Duration::from_secs(15),
        || async { healthy(&following).await },
    )
    .await;
    following.shutdown().await;
    first_only.shutdown().await;
}
