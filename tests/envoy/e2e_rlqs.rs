//! End to end with two real Envoy 1.40 processes running the
//! `rate_limit_quota` filter (`e2e/envoy-rlqs.yaml`: buckets keyed on the
//! `x-user-id` header, `no_assignment_behavior` ALLOW_ALL) against one
//! in-process floodgate on the real clock.
//!
//! A rule of 60 per minute per user. One user's traffic goes through both
//! Envoys at many times the limit for 30 s: the requests admitted (HTTP
//! 200) stay within the README's bound, burst + rate x t plus what ALLOW_ALL
//! let through before each Envoy's first assignment (and 2 for the fill
//! fraction Envoy keeps when an assignment changes), and above 70 % of
//! burst + rate x t. A second user, through one Envoy, is limited on its
//! own. Then floodgate stops: once the assignments' TTL has run out, both
//! Envoys fall back to ALLOW_ALL; it restarts on the same port: assignments
//! (and 429s) resume.

use crate::support::envoy::Envoy;
use crate::support::grpc::{TestServer, index};
use crate::support::poll_until_async;
use floodgate::LimiterOptions;
use floodgate::RlqsOptions;
use floodgate::ServeOptions;
use floodgate::SystemClock;
use floodgate::{MemoryStore, StoreKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 60}
";

/// The rule: 60 at once, 1 per second.
const BURST: f64 = 60.0;
const RATE_PER_SEC: f64 = 1.0;

/// Traffic time, the pause between two rounds of requests, and how many
/// requests for the first user each Envoy gets at once per round: up to 40
/// per second per Envoy, 80 times the limit (a loaded machine sends fewer,
/// still many times the limit).
const TRAFFIC_FOR: Duration = Duration::from_secs(30);
const ROUND_EVERY: Duration = Duration::from_millis(100);
const ALICE_AT_ONCE: usize = 4;
/// The second user's requests per round, through the second Envoy only.
const BOB_AT_ONCE: usize = 3;

/// Assignments live 8 s without a refresh (floodgate refreshes every
/// report, 5 s apart).
const TTL: Duration = Duration::from_secs(8);

/// Longest wait for a fallback or a resumption (a TTL, a report interval
/// and slack).
const SETTLE_WITHIN: Duration = Duration::from_secs(40);

async fn floodgate(at: Option<SocketAddr>) -> TestServer {
    let serve = ServeOptions {
        shutdown_grace: Duration::from_secs(2),
        rlqs: RlqsOptions {
            assignment_ttl: TTL,
            ..RlqsOptions::default()
        },
        ..ServeOptions::default()
    };
    let (index, store, clock, options) = (
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions::default(),
    );
    match at {
        Some(addr) => TestServer::start_on_with(addr, index, store, clock, options, serve).await,
        None => TestServer::start_with(index, store, clock, options, serve).await,
    }
}

/// Token-bucket assignments floodgate has pushed so far.
fn buckets_pushed(server: &TestServer) -> u64 {
    let text = server.limiter.metrics().render(None);
    text.lines()
        .find_map(|line| {
            line.strip_prefix("ratelimit_rlqs_assignments_pushed_total{strategy=\"token_bucket\"} ")
        })
        .map_or(0, |n| n.parse().unwrap())
}

async fn status(envoy: &Envoy, user: &str) -> u16 {
    envoy.get("/", &[("x-user-id", user)]).await.status
}

/// More requests than any bucket of the rule holds (60) plus what it can
/// refill while they run.
const BURST_REQUESTS: usize = 80;

/// Sends BURST_REQUESTS for `user` through `envoy`, ten at a time; the
/// number answered 200.
async fn burst(envoy: &Envoy, user: &str) -> usize {
    let mut ok = 0;
    for _ in 0..BURST_REQUESTS / 10 {
        let statuses = futures_util::future::join_all((0..10).map(|_| status(envoy, user))).await;
        ok += statuses.iter().filter(|&&s| s == 200).count();
    }
    ok
}

/// Bursts through `envoy` every 200 ms until `done(admitted)`; false if
/// that never happens within SETTLE_WITHIN.
async fn until_burst(envoy: &Envoy, user: &str, done: impl Fn(usize) -> bool) -> bool {
    let done = &done;
    poll_until_async(SETTLE_WITHIN, Duration::from_millis(200), || async move {
        done(burst(envoy, user).await).then_some(true)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_share_one_global_limit_fall_back_and_resume() {
    let server = floodgate(None).await;
    let grpc_addr = server.grpc_addr;
    let port = grpc_addr.port();
    let one = Envoy::start_from("envoy-rlqs.yaml", port, &[("CLIENT_ID", "envoy-1")]).await;
    let two = Envoy::start_from("envoy-rlqs.yaml", port, &[("CLIENT_ID", "envoy-2")]).await;

    // The first request of each Envoy and user goes through on ALLOW_ALL
    // and is reported at once; wait until each has its first assignment.
    let started = Instant::now();
    let mut alice_ok = 0_u64;
    let mut bob_ok = 0_u64;
    for (envoy, user) in [(&one, "alice"), (&two, "alice"), (&two, "bob")] {
        let pushed = buckets_pushed(&server);
        let ok = status(envoy, user).await == 200;
        if user == "alice" {
            alice_ok += u64::from(ok);
        } else {
            bob_ok += u64::from(ok);
        }
        let assigned = poll_until_async(SETTLE_WITHIN, Duration::from_millis(10), || {
            let more = buckets_pushed(&server) > pushed;
            async move { more.then_some(true) }
        })
        .await;
        assert!(
            assigned,
            "no assignment for {user}; floodgate metrics:\n{}\nenvoy log:\n{}",
            server.limiter.metrics().render(None),
            envoy.log()
        );
    }
    // What ALLOW_ALL let through before the first assignments: at most
    // the one request per Envoy and user sent before it.
    let (alice_unassigned, bob_unassigned) = (2.0, 1.0);
    // The one thing outside the bound (docs/rlqs.md): Envoy keeps a
    // bucket's fill fraction when its assignment changes, so a share that
    // grows gains that fraction of its growth. Under this load a bucket
    // holds at most about one of its ~30 tokens, and a share moves by a few
    // tokens per report: well under 2 over the 6 reports of the traffic.
    let regrant_gain = 2.0;

    let mut tick = tokio::time::interval(ROUND_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut alice_denied = 0_u64;
    let mut bob_denied = 0_u64;
    let mut rounds = 0_u64;
    // Rounds every 100 ms for 30 s (at most 300): each sends ALICE_AT_ONCE
    // requests for alice through each Envoy and BOB_AT_ONCE for bob, at once.
    for _ in 0..TRAFFIC_FOR.as_millis() / ROUND_EVERY.as_millis() {
        if started.elapsed() >= TRAFFIC_FOR {
            break;
        }
        tick.tick().await;
        let alice = (0..ALICE_AT_ONCE).flat_map(|_| [status(&one, "alice"), status(&two, "alice")]);
        let bob = (0..BOB_AT_ONCE).map(|_| status(&two, "bob"));
        let (alice, bob) = tokio::join!(
            futures_util::future::join_all(alice),
            futures_util::future::join_all(bob)
        );
        rounds += 1;
        for s in alice {
            assert!(s == 200 || s == 429, "unexpected status {s}");
            alice_ok += u64::from(s == 200);
            alice_denied += u64::from(s == 429);
        }
        for s in bob {
            assert!(s == 200 || s == 429, "unexpected status {s}");
            bob_ok += u64::from(s == 200);
            bob_denied += u64::from(s == 429);
        }
    }
    let t = started.elapsed().as_secs_f64();
    let allowed = BURST + RATE_PER_SEC * t;
    tracing::info!(
        alice_ok,
        alice_denied,
        bob_ok,
        bob_denied,
        rounds,
        t,
        bound = allowed,
        "e2e rlqs counts"
    );
    #[allow(clippy::cast_precision_loss)]
    let (alice, bob) = (alice_ok as f64, bob_ok as f64);
    assert!(
        alice <= allowed + alice_unassigned + regrant_gain,
        "alice admitted {alice} in {t:.1} s through two Envoys; bound {allowed:.1} + {alice_unassigned} + {regrant_gain}"
    );
    assert!(
        alice >= 0.7 * allowed,
        "alice admitted only {alice} of {allowed:.1} in {t:.1} s ({alice_denied} denied, {rounds} rounds)"
    );
    assert!(alice_denied > 0, "many times the limit was never denied");
    // bob's budget is his own: alice's traffic took none of it.
    assert!(
        bob <= allowed + bob_unassigned + regrant_gain,
        "bob admitted {bob} in {t:.1} s"
    );
    assert!(
        bob >= 0.7 * allowed,
        "bob admitted only {bob} of {allowed:.1} ({bob_denied} denied, {rounds} rounds)"
    );
    assert!(bob_denied > 0, "bob was never denied");

    // floodgate stops: the assignments expire after their TTL and both
    // Envoys fall back to ALLOW_ALL: a whole burst, more than any bucket
    // holds, goes through.
    server.shutdown().await;
    for envoy in [&one, &two] {
        assert!(
            until_burst(envoy, "alice", |ok| ok == BURST_REQUESTS).await,
            "envoy never fell back to ALLOW_ALL; log:\n{}",
            envoy.log()
        );
    }

    // floodgate is back on the same port: the Envoys reconnect with their
    // next report (every 5 s), get assignments again, and deny again.
    let server = floodgate(Some(grpc_addr)).await;
    for envoy in [&one, &two] {
        assert!(
            until_burst(envoy, "alice", |ok| ok < BURST_REQUESTS).await,
            "no assignment after floodgate came back; log:\n{}",
            envoy.log()
        );
    }
    assert!(buckets_pushed(&server) >= 2);
    server.shutdown().await;
}
