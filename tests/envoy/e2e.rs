//! End to end with a real Envoy in front: HTTP requests go through Envoy's
//! `envoy.filters.http.ratelimit` filter (configured by `e2e/envoy.yaml`),
//! which asks an in-process floodgate serving `examples/config` on the real
//! system clock. Covers the per-user limit and Envoy's X-RateLimit headers,
//! fail-open while floodgate is down, and recovery on the same port, with
//! the embedded store and with Redis (whose counters survive the restart).
//!
//! The user limit is 5 per calendar minute. A scenario never waits for a
//! window: it runs and, if the system clock crossed a minute boundary while
//! it ran, runs again with fresh user ids (a run takes a few seconds, so two
//! crossings in a row cannot happen).

use crate::support::backends::{connected, redis_config};
use crate::support::envoy::{Envoy, HttpResponse};
use crate::support::grpc::TestServer;
use crate::support::poll_until_async;
use crate::support::redis::RedisServer;
use floodgate::Clock as _;
use floodgate::LimiterOptions;
use floodgate::SystemClock;
use floodgate::{Index, LoadOptions, load_dir};
use floodgate::{MemoryStore, RedisMode, StoreKind};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// `user` requests per minute in examples/config/edge.yaml.
const USER_LIMIT: u64 = 5;

/// Envoy's counter of requests let through because the rate-limit service
/// failed (`failure_mode_deny: false`).
const FAILURE_MODE_ALLOWED: &str = "cluster.upstream.ratelimit.failure_mode_allowed";

/// Longest wait for Envoy to notice floodgate going away or coming back.
const SETTLE_WITHIN: Duration = Duration::from_secs(10);

fn rules() -> Index {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
    load_dir(&dir, &LoadOptions::default()).expect("examples/config is valid")
}

/// Where the counters live.
enum Counters {
    Memory,
    Redis(RedisServer),
}

impl Counters {
    async fn store(&self) -> StoreKind {
        match self {
            Self::Memory => StoreKind::Memory(MemoryStore::new()),
            Self::Redis(redis) => connected(redis_config(RedisMode::Single, redis.addr())).await,
        }
    }
}

/// A floodgate on the real clock, on `at` or a free port.
async fn floodgate(counters: &Counters, at: Option<SocketAddr>) -> TestServer {
    let (index, store, clock) = (rules(), counters.store().await, Arc::new(SystemClock));
    let options = LimiterOptions::default();
    match at {
        Some(addr) => TestServer::start_on(addr, index, store, clock, options).await,
        None => TestServer::start(index, store, clock, options).await,
    }
}

/// The calendar minute floodgate's windows are aligned to.
fn minute() -> u64 {
    SystemClock.now().as_secs() / 60
}

/// `n` requests from `user`, one after the other.
async fn burst(envoy: &Envoy, user: &str, n: u64) -> Vec<HttpResponse> {
    let mut responses = Vec::new();
    for _ in 0..n {
        responses.push(envoy.get("/", &[("x-user-id", user)]).await);
    }
    responses
}

/// Asks until floodgate's answer is visible (Envoy adds X-RateLimit
/// headers), each time as a new user so no counter of the scenario moves.
async fn wait_until_limited(envoy: &Envoy, tag: &str) {
    let mut probe = 0_u64;
    let answered = poll_until_async(SETTLE_WITHIN, Duration::from_millis(20), || {
        probe += 1;
        let user = format!("probe-{tag}-{probe}");
        async move {
            envoy
                .get("/", &[("x-user-id", &user)])
                .await
                .header("x-ratelimit-limit")
                .is_some()
                .then_some(true)
        }
    })
    .await;
    assert!(
        answered,
        "floodgate never answered through envoy; envoy log:\n{}",
        envoy.log()
    );
}

/// Asks as `user` until Envoy lets the request through although `user` is
/// over the limit: floodgate is unreachable and Envoy fails open.
async fn wait_until_failing_open(envoy: &Envoy, user: &str) -> HttpResponse {
    let last = std::cell::RefCell::new(None);
    let open = poll_until_async(SETTLE_WITHIN, Duration::from_millis(20), || {
        let last = &last;
        async move {
            let response = envoy.get("/", &[("x-user-id", user)]).await;
            let open = response.status == 200;
            *last.borrow_mut() = Some(response);
            open.then_some(true)
        }
    })
    .await;
    let response = last.into_inner().expect("asked at least once");
    assert!(
        open,
        "envoy did not fail open; last status {}; envoy log:\n{}",
        response.status,
        envoy.log()
    );
    response
}

fn header<'a>(response: &'a HttpResponse, name: &str) -> &'a str {
    response
        .header(name)
        .unwrap_or_else(|| panic!("no {name} header in {response:?}"))
}

/// The first `USER_LIMIT` answers are 200 and count down, the next is 429;
/// every one carries Envoy's draft-03 X-RateLimit headers for the user
/// limit (the one closest to running out).
fn assert_limited_burst(responses: &[HttpResponse]) {
    for (i, response) in (0_u64..).zip(responses) {
        let expected_status = if i < USER_LIMIT { 200 } else { 429 };
        assert_eq!(
            response.status, expected_status,
            "request {i}: {response:?}"
        );
        let limit = header(response, "x-ratelimit-limit");
        assert!(
            limit.starts_with("5, ") && limit.contains("5;w=60;name=\"per_user\""),
            "request {i}: x-ratelimit-limit {limit}"
        );
        // The other descriptors Envoy sends reached floodgate too.
        assert!(
            limit.contains("1000;w=1") && limit.contains("10000;w=1"),
            "request {i}: x-ratelimit-limit {limit}"
        );
        let remaining: u64 = header(response, "x-ratelimit-remaining").parse().unwrap();
        assert_eq!(
            remaining,
            USER_LIMIT.saturating_sub(i + 1),
            "request {i}: {response:?}"
        );
        let reset: u64 = header(response, "x-ratelimit-reset").parse().unwrap();
        assert!((1..=60).contains(&reset), "request {i}: reset {reset}");
        assert_eq!(
            response.header("x-envoy-ratelimited").is_some(),
            i >= USER_LIMIT,
            "request {i}: {response:?}"
        );
    }
}

/// The whole story through Envoy: limit, fail open while floodgate is down,
/// limit again once it is back on the same port.
async fn limits_fails_open_and_recovers(counters: Counters) {
    let mut server = floodgate(&counters, None).await;
    let grpc_addr = server.grpc_addr;
    let envoy = Envoy::start(grpc_addr.port()).await;
    let survives_restart = matches!(counters, Counters::Redis(_));

    for attempt in 0..3 {
        let window = minute();
        let user = format!("alice-{attempt}");
        let first = burst(&envoy, &user, USER_LIMIT + 1).await;
        let other = envoy
            .get("/", &[("x-user-id", &format!("bob-{attempt}"))])
            .await;

        server.shutdown().await;
        let allowed_before = envoy.counter(FAILURE_MODE_ALLOWED).await;
        let open = wait_until_failing_open(&envoy, &user).await;
        let allowed_after = envoy.counter(FAILURE_MODE_ALLOWED).await;

        server = floodgate(&counters, Some(grpc_addr)).await;
        wait_until_limited(&envoy, &attempt.to_string()).await;
        let again = envoy.get("/", &[("x-user-id", &user)]).await;
        let fresh = burst(&envoy, &format!("carol-{attempt}"), USER_LIMIT + 1).await;

        if minute() != window {
            // A window boundary fell inside the run; counts are not comparable.
            continue;
        }
        assert_limited_burst(&first);
        assert_eq!(other.status, 200, "{other:?}");
        assert_eq!(header(&other, "x-ratelimit-remaining"), "4");

        assert!(
            open.header("x-ratelimit-limit").is_none(),
            "no answer from floodgate while it is down: {open:?}"
        );
        assert!(
            allowed_after > allowed_before,
            "envoy counted no fail-open decision ({allowed_before} -> {allowed_after})"
        );

        if survives_restart {
            assert_eq!(again.status, 429, "redis kept the count: {again:?}");
            assert_eq!(header(&again, "x-ratelimit-remaining"), "0");
        } else {
            assert_eq!(again.status, 200, "memory counters start over: {again:?}");
            assert_eq!(header(&again, "x-ratelimit-remaining"), "4");
        }
        assert_limited_burst(&fresh);
        server.shutdown().await;
        return;
    }
    panic!("three runs in a row crossed a minute boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_fails_open_and_recovers_with_the_memory_store() {
    limits_fails_open_and_recovers(Counters::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_fails_open_and_recovers_with_redis_keeping_counts() {
    limits_fails_open_and_recovers(Counters::Redis(RedisServer::start())).await;
}

/// The reference's header settings through a real Envoy: the upstream
/// sees the most constrained descriptor's figures as request headers
/// (`LIMIT_REQUEST_HEADERS_ENABLED`, pull request #1168; the upstream echoes
/// them back), and the client sees a pair per limited descriptor
/// (`LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED`, pull request #1190).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_settings_reach_the_upstream_and_the_client() {
    let options = LimiterOptions {
        all_descriptors_headers: true,
        request_headers: Some(floodgate::HeaderNames::default()),
        ..LimiterOptions::default()
    };
    let server = TestServer::start(
        rules(),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        options,
    )
    .await;
    let echo = "                          response_headers_to_add:
                            - header: { key: x-seen-limit, value: \"%REQ(ratelimit-limit)%\" }
                            - header: { key: x-seen-remaining, value: \"%REQ(ratelimit-remaining)%\" }
                            - header: { key: x-seen-reset, value: \"%REQ(ratelimit-reset)%\" }
                          direct_response:
";
    let envoy = Envoy::start_edited(server.grpc_addr.port(), |yaml| {
        assert!(yaml.contains("                          direct_response:\n"));
        yaml.replace("                          direct_response:\n", echo)
    })
    .await;
    wait_until_limited(&envoy, "headers").await;
    let response = envoy.get("/", &[("x-user-id", "headers-user")]).await;
    assert_eq!(response.status, 200, "{response:?}");
    // The user's 5 a minute is the most constrained of the three
    // descriptors Envoy sends (1,000 and 10,000 a second for the others).
    assert_eq!(header(&response, "x-seen-limit"), "5");
    assert_eq!(header(&response, "x-seen-remaining"), "4");
    let reset: u64 = header(&response, "x-seen-reset").parse().unwrap();
    assert!((1..=60).contains(&reset), "{reset}");
    assert_eq!(header(&response, "ratelimit-limit-minutes"), "5");
    assert_eq!(header(&response, "ratelimit-remaining-minutes"), "4");
    assert!(
        response.header("ratelimit-limit-seconds").is_some(),
        "{response:?}"
    );
    drop(envoy);
    server.shutdown().await;
}

/// `GRPC_UDS`: floodgate serves gRPC on a unix socket, and Envoy reaches
/// it there (its cluster address a `pipe`): Envoy's rate-limit headers
/// appear only when floodgate answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reaches_floodgate_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rls.sock");
    let process =
        crate::support::floodgate::Floodgate::start(&[("GRPC_UDS", socket.display().to_string())])
            .await;
    assert!(socket.exists(), "no socket at {}", socket.display());
    // A placeholder port, replaced by the socket's path.
    const PLACEHOLDER: u16 = 9;
    let pipe = format!("pipe: {{ path: {} }}", socket.display());
    let envoy = Envoy::start_edited(PLACEHOLDER, |yaml| {
        let tcp = format!("socket_address: {{ address: 127.0.0.1, port_value: {PLACEHOLDER} }}");
        assert!(yaml.contains(&tcp));
        yaml.replace(&tcp, &pipe)
    })
    .await;
    wait_until_limited(&envoy, "uds").await;
    drop(envoy);
    process.stop().await;
}
