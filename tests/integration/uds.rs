//! `GRPC_UDS` served to every gRPC stack: a client that sends the
//! `:authority` the gRPC core library (grpcio, C++, Ruby, PHP) sends for
//! `unix:/path` (the path, `/` written `%2F`), and one that sends an empty
//! one, are answered. The client here writes HTTP/2 frames itself, since
//! neither the `http` crate nor h2's client can build that authority.

use crate::support::floodgate::Floodgate;
use crate::support::grpc::request;
use crate::support::h2raw::{call, exchange};
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use prost::Message as _;
use tokio::net::UnixStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_authority_a_grpc_client_sends_on_a_unix_socket_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rls.sock");
    let server = Floodgate::start(&[("GRPC_UDS", socket.display().to_string())]).await;
    // As grpcio 1.85 writes `unix:/tmp/x/rls.sock`: the path without its
    // first `/`, each other `/` as `%2F`.
    let core = socket
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F");
    // A sliding log of 10,000 a minute: no window turns under the test.
    let limited = request("edge", &[&[("log", "uds")]]).encode_to_vec();
    let rls = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let mut calls = Vec::new();
    for (stream, authority) in [(1, core.as_str()), (3, ""), (5, "localhost")] {
        calls.extend(call(stream, rls, authority, &limited));
    }
    // Health, with the core library's authority (an empty request).
    calls.extend(call(7, "/grpc.health.v1.Health/Check", &core, &[]));
    let conn = UnixStream::connect(&socket).await.unwrap();
    let answers = exchange(conn, &[1, 3, 5, 7], calls).await;
    let mut remaining = Vec::new();
    for stream in [1, 3, 5] {
        let answer = &answers[&stream];
        assert_eq!(
            answer.header("grpc-status"),
            Some("0"),
            "stream {stream}: {answer:?}"
        );
        let response = RateLimitResponse::decode(answer.message()).unwrap();
        assert_eq!(response.overall_code, 1, "stream {stream}: {response:?}");
        remaining.push(response.statuses[0].limit_remaining);
    }
    remaining.sort_unstable();
    assert_eq!(remaining, [9_997, 9_998, 9_999]);
    // grpc.health.v1.HealthCheckResponse { status: SERVING (1) }.
    let health = &answers[&7];
    assert_eq!(health.header("grpc-status"), Some("0"), "{health:?}");
    assert_eq!(health.message(), [0x08, 0x01]);
    server.stop().await;
}
