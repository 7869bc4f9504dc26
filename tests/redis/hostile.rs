//! Nothing a caller sends can hurt floodgate: arbitrary bytes as gRPC
//! messages, as `/json` bodies and on every port are refused (gRPC
//! INVALID_ARGUMENT, HTTP 400, or a closed connection) and the next valid
//! call is answered correctly; oversized messages and `hits_addend` are
//! refused before anything is counted; and the process that once grew to
//! gigabytes on one request stays small and stops on SIGTERM.

use crate::support::floodgate::{Floodgate, RULES, raw_http};
use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::http::post_json;
use crate::support::redis::RedisServer;
use floodgate::LimiterOptions;
use floodgate::SystemClock;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use floodgate::{MemoryStore, StoreKind};
use prost::Message as _;
use prost::bytes::{Buf as _, BufMut as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Cases per kind of garbage: enough to cover lengths and field shapes,
/// few enough to stay fast.
const CASES: usize = 200;

/// A small deterministic generator: the same bytes every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let len = self.below(max);
        (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
    }

    /// A valid request's encoding with a few bytes changed, cut or added:
    /// garbage that gets deep into the decoder.
    fn mutated(&mut self, valid: &[u8]) -> Vec<u8> {
        let mut out = valid.to_vec();
        for _ in 0..=self.below(4) {
            match self.below(3) {
                0 if !out.is_empty() => {
                    let at = usize::try_from(self.below(out.len() as u64)).unwrap();
                    out[at] = self.next().to_le_bytes()[0];
                }
                1 => out.truncate(usize::try_from(self.below(out.len() as u64 + 1)).unwrap()),
                _ => out.extend(self.bytes(16)),
            }
        }
        out
    }
}

/// Sends raw bytes as the gRPC message and returns the raw answer.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Self;
    type Decoder = Self;
    fn encoder(&mut self) -> Self {
        Self
    }
    fn decoder(&mut self) -> Self {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

async fn raw_call(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    body: Vec<u8>,
) -> Result<RateLimitResponse, tonic::Status> {
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let reply = grpc
        .unary(tonic::Request::new(body), path, RawCodec)
        .await?
        .into_inner();
    Ok(RateLimitResponse::decode(reply.as_slice()).expect("floodgate answers a valid response"))
}

async fn memory_server() -> TestServer {
    TestServer::start(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions::default(),
    )
    .await
}

/// The server still decides correctly: a fresh user gets 3, then 2 left.
async fn still_answers(server: &TestServer, user: &str) {
    let mut client = server.client().await;
    for remaining in [2, 1] {
        let r = ask(&mut client, request("edge", &[&[("user", user)]])).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (1, remaining)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbitrary_grpc_messages_are_invalid_arguments() {
    let server = memory_server().await;
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    let valid = request("edge", &[&[("user", "fuzz"), ("user", "x")]]).encode_to_vec();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in 0..CASES {
        let body = if case % 2 == 0 {
            rng.bytes(600)
        } else {
            rng.mutated(&valid)
        };
        match raw_call(&mut grpc, body.clone()).await {
            // Bytes that happen to decode as a request are answered.
            Ok(response) => assert!(response.overall_code <= 2, "{response:?}"),
            Err(status) => assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "case {case}, {body:?}: {status:?}"
            ),
        }
    }
    // Over MAX_REQUEST_BYTES: refused before decoding.
    let huge = RateLimitRequest {
        domain: "d".repeat(2 << 20),
        ..request("edge", &[&[("user", "big")]])
    };
    let status = raw_call(&mut grpc, huge.encode_to_vec()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    still_answers(&server, "after-grpc-garbage").await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_refuse_before_counting() {
    let server = memory_server().await;
    let mut client = server.client().await;
    let too_many_hits = RateLimitRequest {
        hits_addend: 1_000_000_001,
        ..request("edge", &[&[("user", "bounded")]])
    };
    let status = client.should_rate_limit(too_many_hits).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("hits_addend"), "{status:?}");
    let long_domain = request(&"d".repeat(257), &[&[("user", "bounded")]]);
    let status = client.should_rate_limit(long_domain).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Nothing was counted for `bounded`.
    let r = ask(&mut client, request("edge", &[&[("user", "bounded")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    let r = post_json(
        server.http_addr,
        "/json",
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"bounded"}],"hitsAddend":"2147483648"}]}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("hits_addend"), "{r:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbitrary_json_bodies_are_bad_requests() {
    let server = memory_server().await;
    let valid = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"j"}],"hitsAddend":"1"}]}"#;
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for case in 0..CASES {
        let bytes = if case % 2 == 0 {
            rng.bytes(300)
        } else {
            rng.mutated(valid.as_bytes())
        };
        let status = raw_http(server.http_addr, "POST", "/json", &bytes).await;
        assert!(
            matches!(status, Some(200 | 400 | 429)),
            "case {case}, {bytes:?}: {status:?}"
        );
    }
    let huge = format!(r#"{{"domain":"{}","descriptors":[]}}"#, "d".repeat(2 << 20));
    let status = raw_http(server.http_addr, "POST", "/json", huge.as_bytes()).await;
    assert_eq!(status, Some(400));
    still_answers(&server, "after-json-garbage").await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbitrary_bytes_on_every_port_close_or_refuse() {
    let server = memory_server().await;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for case in 0..CASES / 4 {
        for addr in [server.grpc_addr, server.http_addr] {
            let bytes = rng.bytes(2_000);
            garbage(addr, &bytes).await;
            let _ = case;
        }
    }
    still_answers(&server, "after-port-garbage").await;
    let r = crate::support::http::get(server.http_addr, "/healthcheck").await;
    assert_eq!(r.status, 200);
    server.shutdown().await;
}

/// Writes `bytes` to `addr` and reads whatever comes back, within a bound.
async fn garbage(addr: SocketAddr, bytes: &[u8]) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
}

/// Stays under this RSS however hostile the requests below are: the 16 MiB
/// store budget plus the process's own (debug build, buffers of 128 KiB
/// messages, the allocator's retained pages).
const RSS_BOUND_KIB: u64 = 120 * 1024;

/// One call with a deadline: the answer must come within it.
async fn call(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut call = tonic::Request::new(request);
    call.set_timeout(Duration::from_secs(5));
    client
        .should_rate_limit(call)
        .await
        .map(tonic::Response::into_inner)
}

/// Sends `make(0..calls)` on four lanes over two connections, each lane
/// one call at a time, in order within the lane; every answer must be OK.
async fn every_call_ok(
    server: &Floodgate,
    calls: usize,
    make: impl Fn(usize) -> RateLimitRequest + Clone + Send + 'static,
) {
    const LANES: usize = 4;
    let clients = [server.client().await, server.client().await];
    let mut lanes = Vec::with_capacity(LANES);
    for lane in 0..LANES {
        let (mut client, make) = (clients[lane % 2].clone(), make.clone());
        lanes.push(tokio::spawn(async move {
            for i in (lane..calls).step_by(LANES) {
                let code = call(&mut client, make(i)).await.unwrap().overall_code;
                assert_eq!(code, 1, "call {i}");
            }
        }));
    }
    for lane in lanes {
        lane.await.unwrap();
    }
}

fn year_override(requests_per_unit: u32) -> Option<RateLimitOverride> {
    Some(RateLimitOverride {
        requests_per_unit,
        unit: 6, // YEAR
    })
}

/// The issue's case 1: a sliding log of 10 000/min on Redis with
/// stop-increment, one call with hitsAddend 2^31, then the largest allowed
/// hits: refused at once, RSS stays small, garbage on the metrics port is
/// refused too, and SIGTERM stops the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_hits_on_a_redis_sliding_log_are_refused_cheaply() {
    let redis = RedisServer::start();
    let server = Floodgate::start(&[
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_URL", redis.addr()),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true".to_owned()),
    ])
    .await;
    let mut client = server.client().await;
    let mut huge = request("edge", &[&[("log", "one")]]);
    huge.descriptors[0].hits_addend = Some(1 << 31);
    let status = call(&mut client, huge).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let mut big = request("edge", &[&[("log", "one")], &[("user", "u")]]);
    big.descriptors[0].hits_addend = Some(1_000_000_000);
    assert_eq!(call(&mut client, big).await.unwrap().overall_code, 2);
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    for _ in 0..20 {
        garbage(server.metrics, &rng.bytes(1_000)).await;
    }
    assert_eq!(
        raw_http(server.metrics, "GET", "/metrics", b"").await,
        Some(200)
    );
    let rss = server.rss_kib();
    assert!(rss < RSS_BOUND_KIB, "RSS {rss} KiB");
    server.stop().await;
}

/// The issue's case 2 on the embedded store under a 16 MiB budget: 2 000
/// calls of 32 entries of 4 KiB with a YEAR override, then 1 000 000
/// distinct small descriptors with overrides (64 per call) beside one hot
/// descriptor. RSS stays under the bound, the hot descriptor's count is
/// exact, cold ones were evicted, and SIGTERM stops the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_stays_within_its_budget() {
    let server = Floodgate::start(&[
        ("BACKEND_TYPE", "memory".to_owned()),
        ("MEMORY_STORE_MAX_BYTES", (16 << 20).to_string()),
    ])
    .await;
    // Four calls in flight (two connections): the server's two workers
    // both busy, as under real load, and the test takes half the time.
    every_call_ok(&server, 2_000, |i| {
        let entries: Vec<(String, String)> = (0..32)
            .map(|k| (format!("k{k}"), format!("{i}-{}", "v".repeat(4_000))))
            .collect();
        let pairs: Vec<(&str, &str)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut req = request("edge", &[&pairs]);
        req.descriptors[0].limit = year_override(1_000);
        req
    })
    .await;
    let rss = server.rss_kib();
    assert!(rss < RSS_BOUND_KIB, "RSS {rss} KiB after large descriptors");
    let per_call = 63;
    let calls = 1_000_000 / per_call + 1;
    every_call_ok(&server, calls, move |c| {
        let values: Vec<String> = (0..per_call)
            .map(|d| format!("{}", c * per_call + d))
            .collect();
        let mut descriptors: Vec<Vec<(&str, &str)>> = vec![vec![("hot", "h")]];
        descriptors.extend(values.iter().map(|v| vec![("cold", v.as_str())]));
        let slices: Vec<&[(&str, &str)]> = descriptors.iter().map(Vec::as_slice).collect();
        let mut req = request("edge", &slices);
        for d in &mut req.descriptors {
            d.limit = year_override(10_000_000);
        }
        req
    })
    .await;
    let mut client = server.client().await;
    let mut check = request("edge", &[&[("hot", "h")], &[("cold", "0")]]);
    for d in &mut check.descriptors {
        d.limit = year_override(10_000_000);
        d.hits_addend = Some(0);
    }
    let r = call(&mut client, check).await.unwrap();
    let calls = u32::try_from(calls).unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining,
        10_000_000 - calls,
        "hot count exact"
    );
    assert_eq!(
        r.statuses[1].limit_remaining, 10_000_000,
        "the first cold one was evicted"
    );
    let metrics = raw_http_body(server.metrics, "/metrics").await;
    let evictions: u64 = metric(&metrics, "ratelimit_memory_store_evictions_total");
    let bytes: u64 = metric(&metrics, "ratelimit_memory_store_bytes");
    assert!(evictions > 900_000, "{evictions}");
    assert!(bytes <= 16 << 20, "{bytes}");
    let rss = server.rss_kib();
    assert!(
        rss < RSS_BOUND_KIB,
        "RSS {rss} KiB after a million descriptors"
    );
    server.stop().await;
}

async fn raw_http_body(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}
