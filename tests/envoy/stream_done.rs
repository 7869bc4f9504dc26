//! Limits that need Envoy's stream-done call, through a real Envoy 1.40
//! configured by `examples/stream-done/envoy.yaml` in front of a test
//! upstream, with floodgate serving `examples/stream-done/rules` on a
//! manual clock:
//!
//! - concurrency: the upstream's own count of requests in flight never
//!   exceeds the limit; after the load every slot is free; Envoy SIGKILLed
//!   with slots held: they stay held until their window ends, then free;
//! - costs after the response: a budget checked on arrival and charged the
//!   cost the upstream reports, so floodgate's counter is the sum of the
//!   reported costs.

use crate::support::envoy::Envoy;
use crate::support::grpc::TestServer;
use crate::support::poll_until_async;
use floodgate::algorithm::{FixedWindow, Spec};
use floodgate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use floodgate::{Batch, Clock as _, CounterId, Op, Store as _};
use floodgate::{
    LimiterOptions, LoadOptions, ManualClock, MemoryStore, StoreKind, UnixMillis, load_dir,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::Notify;

/// Slots of `tenant` in examples/stream-done/rules/app.yaml.
const SLOTS: u64 = 3;
/// The budget's units per hour there.
const BUDGET: u64 = 100;

/// The test upstream: answers each request after the time its `x-hold-ms`
/// header asks (or, with `x-hold: gate`, once the gate opens), echoing
/// `x-want-cost` as `x-cost`; counts requests in flight and their most.
struct Upstream {
    port: u16,
    in_flight: Arc<AtomicU64>,
    most: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    gate: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (in_flight, most, served): (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>) =
            (Arc::default(), Arc::default(), Arc::default());
        let gate = Arc::new(Notify::new());
        let state = (
            Arc::clone(&in_flight),
            Arc::clone(&most),
            Arc::clone(&served),
            Arc::clone(&gate),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (in_flight, most, served, gate) = state.clone();
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    // Keep-alive: one request after another, up to 1000.
                    for _ in 0..1_000 {
                        let mut headers = Vec::new();
                        loop {
                            let mut line = String::new();
                            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let line = line.trim_end().to_owned();
                            if line.is_empty() {
                                break;
                            }
                            headers.push(line.to_ascii_lowercase());
                        }
                        let header = |name: &str| {
                            headers.iter().find_map(|h| {
                                h.strip_prefix(name)
                                    .and_then(|rest| rest.strip_prefix(':'))
                                    .map(|v| v.trim().to_owned())
                            })
                        };
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        if header("x-hold").as_deref() == Some("gate") {
                            gate.notified().await;
                        } else {
                            let ms = header("x-hold-ms")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        let cost = header("x-want-cost").unwrap_or_else(|| "0".to_owned());
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        served.fetch_add(1, Ordering::SeqCst);
                        let response = format!(
                            "HTTP/1.1 200 OK\r\nx-cost: {cost}\r\ncontent-length: 3\r\n\r\nok\n"
                        );
                        if stream
                            .get_mut()
                            .write_all(response.as_bytes())
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            port,
            in_flight,
            most,
            served,
            gate,
            task,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// floodgate on the example's rules, the embedded store and `clock`.
async fn floodgate(clock: &ManualClock) -> TestServer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/stream-done/rules");
    let index = load_dir(&dir, &LoadOptions::default()).expect("the example's rules are valid");
    TestServer::start(
        index,
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(clock.clone()),
        LimiterOptions::default(),
    )
    .await
}

async fn envoy(server: &TestServer, upstream: &Upstream) -> Envoy {
    Envoy::start_from(
        "../examples/stream-done/envoy.yaml",
        server.grpc_addr.port(),
        &[("APP_PORT", &upstream.port.to_string())],
    )
    .await
}

/// What floodgate says of `key=value` now, counting nothing: (code,
/// remaining).
async fn read(server: &TestServer, key: &str, value: &str) -> (i32, u32) {
    let mut client = server.client().await;
    let response = client
        .should_rate_limit(RateLimitRequest {
            domain: "app".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.to_owned(),
                    value: value.to_owned(),
                }],
                hits_addend: Some(0),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner();
    (response.overall_code, response.statuses[0].limit_remaining)
}

/// Polls until floodgate reports `remaining` for `key=value`.
async fn settles(server: &TestServer, key: &str, value: &str, remaining: u32) -> bool {
    poll_until_async(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { (read(server, key, value).await.1 == remaining).then_some(true) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_never_exceed_the_slots() {
    let clock = ManualClock::new(UnixMillis::from_secs(1_700_000_000));
    let server = floodgate(&clock).await;
    let upstream = Upstream::start().await;
    let envoy = Arc::new(envoy(&server, &upstream).await);
    // 8 callers, 60 requests, each held 5 to 60 ms by the upstream.
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..8u64 {
        let envoy = Arc::clone(&envoy);
        callers.spawn(async move {
            let mut codes = Vec::new();
            for n in 0..8u64 {
                let hold = 5 + (caller * 7 + n * 13) % 56;
                let response = envoy
                    .get("/work", &[("x-hold-ms", &hold.to_string())])
                    .await;
                codes.push(response.status);
            }
            codes
        });
    }
    let mut codes = Vec::new();
    while let Some(done) = callers.join_next().await {
        codes.extend(done.unwrap());
    }
    let admitted = codes.iter().filter(|&&c| c == 200).count();
    let refused = codes.iter().filter(|&&c| c == 429).count();
    assert_eq!(
        admitted + refused,
        codes.len(),
        "only 200 and 429: {codes:?}"
    );
    assert!(
        admitted >= 3 && refused > 0,
        "{admitted} admitted, {refused} refused"
    );
    assert_eq!(upstream.served.load(Ordering::SeqCst), admitted as u64);
    let most = upstream.most.load(Ordering::SeqCst);
    assert!(most <= SLOTS, "the upstream saw {most} requests at once");
    // Every stream has ended: every slot comes back (the releases follow
    // the responses).
    assert!(
        settles(&server, "tenant", "acme", 3).await,
        "{:?}",
        read(&server, "tenant", "acme").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_of_a_killed_envoy_come_back_after_their_window() {
    let clock = ManualClock::new(UnixMillis::from_secs(1_700_000_000));
    let server = floodgate(&clock).await;
    let upstream = Upstream::start().await;
    let mut envoy = envoy(&server, &upstream).await;
    let listen = envoy.listen_addr;
    // Three requests held at the upstream: every slot taken.
    let held: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(async move {
                crate::support::envoy::http_get(listen, "/work", &[("x-hold", "gate")]).await
            })
        })
        .collect();
    let in_flight = Arc::clone(&upstream.in_flight);
    let all_held = poll_until_async(Duration::from_secs(10), Duration::from_millis(10), || {
        let n = in_flight.load(Ordering::SeqCst);
        async move { (n == 3).then_some(true) }
    })
    .await;
    assert!(all_held);
    assert_eq!(envoy.get("/work", &[]).await.status, 429);
    // Envoy dies: no stream-done call will ever come.
    envoy.stop();
    for request in held {
        assert!(
            request.await.unwrap().is_err(),
            "the connection died with Envoy"
        );
    }
    upstream.gate.notify_waiters();
    assert_eq!(read(&server, "tenant", "acme").await, (2, 0), "still held");
    clock.advance(Duration::from_secs(59));
    assert_eq!(
        read(&server, "tenant", "acme").await,
        (2, 0),
        "held for the whole window"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        read(&server, "tenant", "acme").await,
        (1, 3),
        "free a window after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_reported_after_the_response_are_charged() {
    let clock = ManualClock::new(UnixMillis::from_secs(1_700_000_000));
    let server = floodgate(&clock).await;
    let upstream = Upstream::start().await;
    let envoy = envoy(&server, &upstream).await;
    let mut charged = 0u64;
    let mut refused = 0;
    for n in 0..12u64 {
        let cost = 5 + (n * 17) % 31;
        let response = envoy
            .get("/llm", &[("x-want-cost", &cost.to_string())])
            .await;
        if charged > BUDGET {
            // Spent: refused on arrival, charged nothing.
            assert_eq!(response.status, 429, "request {n} after {charged} spent");
            refused += 1;
            continue;
        }
        assert_eq!(response.status, 200, "request {n} with {charged} spent");
        assert_eq!(response.header("x-cost"), Some(cost.to_string().as_str()));
        charged += cost;
        // The charge is a stream-done call, sent after the response: wait
        // for it to land before the next request.
        let want = u32::try_from(BUDGET.saturating_sub(charged)).unwrap();
        assert!(
            settles(&server, "budget", "team-a", want).await,
            "charge of {cost} after {n}"
        );
    }
    assert!(refused > 0, "the budget ran out");
    // floodgate's counter is the sum of the reported costs: past the
    // budget, read as over with nothing left; in the store, exactly.
    assert_eq!(read(&server, "budget", "team-a").await, (2, 0));
    let batch = Batch {
        ops: vec![Op {
            id: CounterId::new("app", [("budget", "team-a")]),
            spec: Spec::FixedWindow {
                window: FixedWindow::new(3_600),
                limit: BUDGET,
            },
            hits: 0,
            lease: None,
        }],
        stop_when_over: false,
    };
    let counted = server
        .limiter
        .store()
        .peek(&batch, clock.now())
        .await
        .unwrap();
    assert_eq!(counted[0].before, charged);
}
