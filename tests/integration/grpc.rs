//! The gRPC surface end to end: a real tonic client against a served
//! floodgate on the embedded store with a manual clock.

use crate::support::grpc::{TestServer, ask, index, request};
use floodgate::LimiterOptions;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
  - key: fifty
    rate_limit: {unit: hour, requests_per_unit: 50}
";

async fn start(options: LimiterOptions) -> (TestServer, ManualClock) {
    let clock = ManualClock::new(UnixMillis::from_secs(1_700_000_080));
    let server = TestServer::start(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(clock.clone()),
        options,
    )
    .await;
    (server, clock)
}

#[tokio::test]
async fn limits_then_resets_at_the_window_edge() {
    let (server, clock) = start(LimiterOptions::default()).await;
    let mut client = server.client().await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = ask(&mut client, request("edge", &[&[("user", "alice")]])).await;
        seen.push((r.overall_code, r.statuses[0].limit_remaining));
    }
    assert_eq!(seen, vec![(OK, 2), (OK, 1), (OK, 0), (OVER_LIMIT, 0)]);

    let r = ask(&mut client, request("edge", &[&[("user", "alice")]])).await;
    let status = &r.statuses[0];
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit, limit.unit),
        ("per_user", 3, 2)
    );
    assert_eq!(status.duration_until_reset.unwrap().seconds, 20);

    // Another user is unaffected; the next minute starts afresh.
    let r = ask(&mut client, request("edge", &[&[("user", "bob")]])).await;
    assert_eq!(r.overall_code, OK);
    clock.advance(Duration::from_secs(20));
    let r = ask(&mut client, request("edge", &[&[("user", "alice")]])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    server.shutdown().await;
}

#[tokio::test]
async fn concurrent_calls_admit_exactly_the_limit() {
    let (server, _) = start(LimiterOptions::default()).await;
    let channel = server.channel().await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let mut client =
            floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(
                channel.clone(),
            );
        calls.spawn(async move { ask(&mut client, request("edge", &[&[("fifty", "x")]])).await });
    }
    let mut ok = 0;
    let mut over = 0;
    while let Some(result) = calls.join_next().await {
        match result.unwrap().overall_code {
            OK => ok += 1,
            OVER_LIMIT => over += 1,
            other => panic!("unexpected code {other}"),
        }
    }
    assert_eq!((ok, over), (50, 150));
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_domain_and_unmatched_descriptor_are_ok_without_limit() {
    let (server, _) = start(LimiterOptions::default()).await;
    let mut client = server.client().await;
    let r = ask(&mut client, request("nowhere", &[&[("user", "a")]])).await;
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none());
    let r = ask(
        &mut client,
        request("edge", &[&[("other", "a")], &[("user", "a"), ("x", "y")]]),
    )
    .await;
    assert_eq!(r.statuses.len(), 2);
    assert!(
        r.statuses
            .iter()
            .all(|s| s.code == OK && s.current_limit.is_none())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_are_invalid_argument_and_count_nothing() {
    let (server, _) = start(LimiterOptions::default()).await;
    let mut client = server.client().await;

    let err = client
        .should_rate_limit(request("", &[&[("user", "a")]]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.message(), "rate limit domain must not be empty");

    let err = client
        .should_rate_limit(request("edge", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "rate limit descriptor list must not be empty"
    );

    let many: Vec<&[(&str, &str)]> = vec![&[("user", "a")]; 65];
    let err = client
        .should_rate_limit(request("edge", &many))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "request has 65 descriptors, more than the limit of 64"
    );

    let mut unknown_unit = request("edge", &[&[("user", "a")]]);
    unknown_unit.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    let err = client.should_rate_limit(unknown_unit).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("unit UNKNOWN"), "{}", err.message());

    // None of the rejected requests counted a hit for user "a".
    let r = ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    server.shutdown().await;
}

#[tokio::test]
async fn override_and_per_descriptor_hits_addend() {
    let (server, _) = start(LimiterOptions::default()).await;
    let mut client = server.client().await;
    let mut req = request("edge", &[&[("anything", "x")]]);
    req.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 10,
        unit: 3, // HOUR
    });
    req.descriptors[0].hits_addend = Some(4);
    let r = ask(&mut client, req.clone()).await;
    assert_eq!(r.statuses[0].limit_remaining, 6);
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().unit, 3);
    req.descriptors[0].hits_addend = Some(0);
    let r = ask(&mut client, req).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 6));
    server.shutdown().await;
}

#[tokio::test]
async fn response_headers_when_enabled() {
    let (server, _) = start(LimiterOptions {
        response_headers: Some(floodgate::HeaderNames::default()),
        ..LimiterOptions::default()
    })
    .await;
    let mut client = server.client().await;
    let r = ask(&mut client, request("edge", &[&[("user", "h")]])).await;
    let headers: Vec<(&str, &str)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("RateLimit-Limit", "3"),
            ("RateLimit-Remaining", "2"),
            ("RateLimit-Reset", "20")
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let (server, _) = start(LimiterOptions::default()).await;
    let channel = server.channel().await;
    let health = HealthClient::new(channel.clone());
    // Health turns SERVING once a background task has seen the store ready,
    // which can be just after the listener accepts: wait for it, bounded.
    for service in ["", "ratelimit"] {
        let serving = crate::support::poll_until_async(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis(10),
            || {
                let mut health = health.clone();
                async move {
                    let status = health
                        .check(HealthCheckRequest {
                            service: service.to_owned(),
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .status;
                    (status == ServingStatus::Serving as i32).then_some(true)
                }
            },
        )
        .await;
        assert!(serving, "service '{service}' never SERVING");
    }

    let mut reflection = ServerReflectionClient::new(channel);
    let ask_list = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = reflection
        .server_reflection_info(tokio_stream::iter(vec![ask_list]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reflection reply");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"envoy.service.ratelimit.v3.RateLimitService".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"envoy.service.rate_limit_quota.v3.RateLimitQuotaService".to_owned()),
        "{names:?}"
    );

    // HTTP health on the HTTP port.
    let mut stream = tokio::net::TcpStream::connect(server.http_addr)
        .await
        .unwrap();
    stream
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("OK"), "{response}");
    server.shutdown().await;
}

/// A served floodgate with `serve` options, on the embedded store.
async fn start_serving(serve: floodgate::ServeOptions) -> TestServer {
    TestServer::start_with(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_080))),
        LimiterOptions::default(),
        serve,
    )
    .await
}

/// A raw HTTP/2 connection to `addr` and the task driving it (it ends
/// when the connection closes).
async fn h2_connect(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    (send, tokio::spawn(connection))
}

fn rls_call() -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri("http://localhost/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// The call's gRPC message: a 5-byte prefix, then the protobuf.
fn rls_message(user: &str) -> bytes::Bytes {
    use prost::Message as _;
    let body = request("edge", &[&[("user", user)]]).encode_to_vec();
    let mut framed = vec![0_u8];
    framed.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&body);
    framed.into()
}

/// `GRPC_MAX_CONNECTION_AGE`: past the age the server sends GOAWAY (new
/// calls on the connection are refused), a call in flight still finishes
/// within the grace, and then the connection closes. A server without an
/// age keeps the same kind of connection open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_connection_gets_goaway_and_its_calls_in_flight_finish() {
    let aging = start_serving(floodgate::ServeOptions {
        shutdown_grace: Duration::from_secs(5),
        max_connection_age: Some(Duration::from_secs(1)),
        max_connection_age_grace: Some(Duration::from_secs(30)),
        ..floodgate::ServeOptions::default()
    })
    .await;
    let steady = start_serving(floodgate::ServeOptions {
        shutdown_grace: Duration::from_secs(5),
        ..floodgate::ServeOptions::default()
    })
    .await;
    let (mut send, driver) = h2_connect(aging.grpc_addr).await;
    let (_steady_send, steady_driver) = h2_connect(steady.grpc_addr).await;

    // A call in flight: headers sent, its message not yet.
    send = send.ready().await.unwrap();
    let (response, mut body) = send.send_request(rls_call(), false).unwrap();

    // GOAWAY arrives after the age: new streams on the connection fail.
    let refused = crate::support::poll_until_async(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || {
            let mut send = send.clone();
            async move {
                match send.send_request(rls_call(), true).map(|_| ()) {
                    Err(err) if err.is_go_away() => Some(true),
                    _ => None,
                }
            }
        },
    )
    .await;
    assert!(refused, "no GOAWAY within 15 s of a 1 s age");

    // The call in flight finishes, answered.
    body.send_data(rls_message("in-flight"), true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.into_body();
    while let Some(chunk) = stream.data().await {
        chunk.unwrap();
    }
    let trailers = stream.trailers().await.unwrap().unwrap();
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");

    // Then the connection closes; the one to the server without an age
    // stays open.
    let closed = tokio::time::timeout(Duration::from_secs(15), driver).await;
    let Ok(Ok(ended)) = closed else {
        panic!("the aged connection did not close: {closed:?}");
    };
    if let Err(err) = ended {
        assert_eq!(err.reason(), Some(h2::Reason::NO_ERROR), "{err}");
    }
    assert!(
        !steady_driver.is_finished(),
        "a connection without an age closed"
    );
    steady_driver.abort();
    aging.shutdown().await;
    steady.shutdown().await;
}

/// `GRPC_MAX_CONNECTION_AGE_GRACE`: a call still in flight a grace after
/// the GOAWAY does not hold the connection open; it is closed, and the call
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_grace_is_cut_with_its_connection() {
    let server = start_serving(floodgate::ServeOptions {
        shutdown_grace: Duration::from_secs(5),
        max_connection_age: Some(Duration::from_secs(1)),
        max_connection_age_grace: Some(Duration::from_secs(1)),
        ..floodgate::ServeOptions::default()
    })
    .await;
    let (send, driver) = h2_connect(server.grpc_addr).await;
    let mut send = send.ready().await.unwrap();
    // Headers sent, the message never: the call stays in flight.
    let (response, _body) = send.send_request(rls_call(), false).unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(15), driver).await;
    assert!(
        matches!(closed, Ok(Ok(_))),
        "the connection outlived its age and grace: {closed:?}"
    );
    let answered = tokio::time::timeout(Duration::from_secs(5), response).await;
    assert!(
        matches!(answered, Ok(Err(_))),
        "the call past the grace was not cut: {answered:?}"
    );
    server.shutdown().await;
}

/// `GRPC_MAX_CONCURRENT_STREAMS`: what the server advertises in its HTTP/2
/// settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_bound_is_advertised() {
    let server = start_serving(floodgate::ServeOptions {
        shutdown_grace: Duration::from_secs(5),
        max_concurrent_per_connection: 7,
        ..floodgate::ServeOptions::default()
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(server.grpc_addr)
        .await
        .unwrap();
    let (_send, mut connection) = h2::client::handshake(tcp).await.unwrap();
    // The server's SETTINGS arrive as the connection is driven.
    let mut advertised = connection.max_concurrent_send_streams();
    for _ in 0..100 {
        if advertised == 7 {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(20), &mut connection).await;
        advertised = connection.max_concurrent_send_streams();
    }
    assert_eq!(advertised, 7);
    drop(connection);
    server.shutdown().await;
}
