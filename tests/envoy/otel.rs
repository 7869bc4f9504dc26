//! Tracing end to end: floodgate exports a span per `ShouldRateLimit` call
//! and a child span per store round trip to a test OTLP collector
//! (`support::otlp`), over gRPC and over HTTP, joining the caller's trace
//! from W3C `traceparent` or B3 headers; the binary reads the reference's
//! `TRACING_*` and the standard `OTEL_EXPORTER_OTLP_*` variables, samples
//! parent-based, flushes on SIGTERM, and keeps answering when the collector
//! is down. Behind a real Envoy tracing with OpenTelemetry, floodgate's span
//! is the child of Envoy's rate-limit call span.

use crate::support::backends::{connected, redis_config};
use crate::support::envoy::Envoy;
use crate::support::floodgate::Floodgate;
use crate::support::grpc::{TestServer, index, request};
use crate::support::otlp::{OtlpReceiver, ReceivedSpan};
use crate::support::redis::RedisServer;
use floodgate::LimiterOptions;
use floodgate::ServeOptions;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::{ExportProtocol, MEMORY_STORE_SPAN, REDIS_STORE_SPAN, Tracing, TracingSettings};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, RedisMode, StoreKind};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// Bound on every wait for spans: batches leave every 50 ms in these tests.
const ARRIVE_WITHIN: Duration = Duration::from_secs(20);

const CALL_SPAN: &str = "ShouldRateLimit Execution";
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const STATUS_ERROR: i32 = 2;

fn settings(protocol: ExportProtocol, endpoint: String) -> TracingSettings {
    TracingSettings {
        protocol,
        endpoint,
        headers: vec![("x-tenant".into(), "acme".into())],
        service_name: "floodgate-test".into(),
        service_namespace: "edge-ns".into(),
        service_instance_id: Some("instance-7".into()),
        sampling_rate: 1.0,
        export_interval: Duration::from_millis(50),
    }
}

async fn traced_server(tracing: &Tracing) -> TestServer {
    let store = StoreKind::Memory(MemoryStore::new());
    traced_server_on(tracing, store, MEMORY_STORE_SPAN).await
}

async fn traced_server_on(
    tracing: &Tracing,
    store: StoreKind,
    store_span: &'static str,
) -> TestServer {
    TestServer::start_with(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_080))),
        LimiterOptions::default(),
        ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            tracer: Some(tracing.request_tracer(store_span)),
            ..ServeOptions::default()
        },
    )
    .await
}

/// One call carrying `headers`; the gRPC status code (0 for OK).
async fn call_with(
    client: &mut RateLimitServiceClient<Channel>,
    body: RateLimitRequest,
    headers: &[(&'static str, &str)],
) -> tonic::Code {
    let mut call = tonic::Request::new(body);
    for (name, value) in headers {
        call.metadata_mut().insert(*name, value.parse().unwrap());
    }
    match client.should_rate_limit(call).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

fn of_trace<'a>(spans: &'a [ReceivedSpan], trace: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id == trace).collect()
}

/// The call span and the store span of `trace`, checked to be linked: the
/// call's parent is `caller_span`, the store span's parent is the call.
fn linked<'a>(
    spans: &'a [ReceivedSpan],
    trace: &str,
    caller_span: &str,
) -> (&'a ReceivedSpan, &'a ReceivedSpan) {
    linked_via(spans, trace, caller_span, "Memory Store Execution")
}

fn linked_via<'a>(
    spans: &'a [ReceivedSpan],
    trace: &str,
    caller_span: &str,
    store_span: &str,
) -> (&'a ReceivedSpan, &'a ReceivedSpan) {
    let mine = of_trace(spans, trace);
    assert_eq!(mine.len(), 2, "{trace}: {mine:#?}");
    let call = *mine.iter().find(|s| s.name == CALL_SPAN).unwrap();
    let store = *mine.iter().find(|s| s.name != CALL_SPAN).unwrap();
    assert_eq!(call.parent_span_id, caller_span, "{call:#?}");
    assert_eq!(call.kind, SERVER);
    assert_eq!(store.parent_span_id, call.span_id, "{store:#?}");
    assert_eq!(store.kind, CLIENT);
    assert_eq!(store.name, store_span);
    (call, store)
}

const W3C_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const B3_TRACE: &str = "80f198ee56343ba864fe8b2a57d3eff7";
const B3_MULTI_TRACE: &str = "463ac35c9f6413ad48485a3953bb6124";
const PARENT: &str = "00f067aa0ba902b7";
/// A sampled caller in B3 multi-header form.
const B3_MULTI: [(&str, &str); 3] = [
    ("x-b3-traceid", B3_MULTI_TRACE),
    ("x-b3-spanid", PARENT),
    ("x-b3-sampled", "1"),
];

#[tokio::test]
async fn grpc_export_joins_the_callers_trace_from_w3c_and_b3_headers() {
    let collector = OtlpReceiver::grpc().await;
    let tracing =
        Tracing::start(&settings(ExportProtocol::Grpc, collector.endpoint.clone())).unwrap();
    let server = traced_server(&tracing).await;
    let mut client = server.client().await;
    let edge = |user: &str| request("edge", &[&[("user", user)]]);

    let traceparent = format!("00-{W3C_TRACE}-{PARENT}-01");
    let code = call_with(&mut client, edge("w3c"), &[("traceparent", &traceparent)]).await;
    assert_eq!(code, tonic::Code::Ok);
    let b3 = format!("{B3_TRACE}-{PARENT}-1");
    // The same user again: over the limit.
    call_with(&mut client, edge("w3c"), &[("b3", &b3)]).await;
    call_with(&mut client, edge("multi"), &B3_MULTI).await;

    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| {
            [W3C_TRACE, B3_TRACE, B3_MULTI_TRACE]
                .iter()
                .all(|t| of_trace(spans, t).len() == 2)
        })
        .await;
    let (w3c, _) = linked(&spans, W3C_TRACE, PARENT);
    assert_eq!(w3c.attributes["domain"], "edge");
    assert_eq!(w3c.attributes["rl.overall_code"], "OK");
    assert_eq!(w3c.attributes["rpc.method"], "ShouldRateLimit");
    assert_eq!(w3c.attributes["rl.descriptors"], "1");
    let (b3, _) = linked(&spans, B3_TRACE, PARENT);
    assert_eq!(b3.attributes["rl.overall_code"], "OVER_LIMIT");
    linked(&spans, B3_MULTI_TRACE, PARENT);
    for span in &spans {
        assert_eq!(span.resource["service.name"], "floodgate-test");
        assert_eq!(span.resource["service.namespace"], "edge-ns");
        assert_eq!(span.resource["service.instance.id"], "instance-7");
    }
    assert!(
        collector
            .headers()
            .iter()
            .all(|h| h.get("x-tenant").map(String::as_str) == Some("acme")),
        "{:?}",
        collector.headers()
    );

    // A caller without a trace starts one; a refused call is an error span
    // with no store span (nothing was counted).
    let before = collector.spans().len();
    let refused = format!("00-{}-{PARENT}-01", "1".repeat(32));
    let code = call_with(
        &mut client,
        request("", &[&[("user", "x")]]),
        &[("traceparent", &refused)],
    )
    .await;
    assert_eq!(code, tonic::Code::InvalidArgument);
    call_with(&mut client, edge("root"), &[]).await;
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| spans.len() >= before + 3)
        .await;
    let refused_spans = of_trace(&spans, &"1".repeat(32));
    assert_eq!(refused_spans.len(), 1, "{refused_spans:#?}");
    assert_eq!(refused_spans[0].status_code, STATUS_ERROR);
    assert_eq!(refused_spans[0].attributes["rpc.grpc.status_code"], "3");
    let root = spans[before..]
        .iter()
        .find(|s| s.name == CALL_SPAN && s.parent_span_id.is_empty())
        .unwrap_or_else(|| panic!("no root call span: {spans:#?}"));
    linked(&spans, &root.trace_id, "");

    server.shutdown().await;
    tracing.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_redis_round_trip_is_a_child_span() {
    let mut redis = RedisServer::start();
    let store = connected(redis_config(RedisMode::Single, redis.addr())).await;
    let collector = OtlpReceiver::http().await;
    let endpoint = format!("{}/v1/traces", collector.endpoint);
    let tracing = Tracing::start(&settings(ExportProtocol::Http, endpoint)).unwrap();
    let server = traced_server_on(&tracing, store, REDIS_STORE_SPAN).await;
    let mut client = server.client().await;
    let traceparent = format!("00-{W3C_TRACE}-{PARENT}-01");
    let code = call_with(
        &mut client,
        request("edge", &[&[("user", "redis")], &[("user", "redis2")]]),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(code, tonic::Code::Ok);
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| of_trace(spans, W3C_TRACE).len() == 2)
        .await;
    // Two descriptors, one round trip: one store span.
    let (call, store) = linked_via(&spans, W3C_TRACE, PARENT, "Redis Pipeline Execution");
    assert_eq!(call.attributes["rl.descriptors"], "2");
    assert_ne!(store.status_code, STATUS_ERROR);

    // Redis gone: both spans say so, the call with the status answered.
    redis.stop();
    let failing = format!("00-{B3_TRACE}-{PARENT}-01");
    let code = call_with(
        &mut client,
        request("edge", &[&[("user", "redis")]]),
        &[("traceparent", &failing)],
    )
    .await;
    assert_eq!(code, tonic::Code::Unavailable);
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| of_trace(spans, B3_TRACE).len() == 2)
        .await;
    let (call, store) = linked_via(&spans, B3_TRACE, PARENT, "Redis Pipeline Execution");
    assert_eq!(call.status_code, STATUS_ERROR);
    assert_eq!(call.attributes["rpc.grpc.status_code"], "14");
    assert_eq!(store.status_code, STATUS_ERROR);
    server.shutdown().await;
    tracing.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_never_fails_a_call() {
    // A collector that accepts and hangs up at once: every export fails,
    // in the background; each attempt is counted.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!(
        "http://127.0.0.1:{}/v1/traces",
        listener.local_addr().unwrap().port()
    );
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = attempts.clone();
    let hangup = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    let tracing = Tracing::start(&settings(ExportProtocol::Http, endpoint)).unwrap();
    let server = traced_server(&tracing).await;
    let mut client = server.client().await;
    for n in 0..50 {
        let traceparent = format!("00-{W3C_TRACE}-{PARENT}-01");
        let code = call_with(
            &mut client,
            request("edge", &[&[("user", &format!("u{n}"))]]),
            &[("traceparent", &traceparent)],
        )
        .await;
        assert_eq!(code, tonic::Code::Ok, "call {n}");
    }
    // The spans were sent (and failed) while every call above answered.
    let exported =
        crate::support::poll_until_async(ARRIVE_WITHIN, Duration::from_millis(50), || {
            let tried = attempts.load(std::sync::atomic::Ordering::SeqCst) > 0;
            async move { tried.then_some(true) }
        })
        .await;
    assert!(exported, "no export was attempted");
    let code = call_with(
        &mut client,
        request("edge", &[&[("user", "after")]]),
        &[("traceparent", &format!("00-{W3C_TRACE}-{PARENT}-01"))],
    )
    .await;
    assert_eq!(code, tonic::Code::Ok, "a call after failed exports");
    server.shutdown().await;
    // Shutting down tries a last export, which fails; it still ends.
    let stopped = tokio::time::timeout(Duration::from_secs(60), tracing.shutdown()).await;
    assert!(stopped.is_ok(), "tracing shutdown hung on a dead collector");
    hangup.abort();
}

/// The binary with Envoy Gateway's tracing variables, exporting over HTTP
/// (the default protocol) to `collector`, plus `extra`.
async fn traced_binary(collector: &OtlpReceiver, extra: &[(&str, &str)]) -> Floodgate {
    let mut env: Vec<(&str, String)> = vec![
        ("TRACING_ENABLED", "true".into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.clone()),
        ("TRACING_SERVICE_NAMESPACE", "gateway".into()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme%20corp".into()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    Floodgate::start(&env).await
}

#[tokio::test]
async fn the_binary_samples_by_parent_and_rate_and_exports_over_http() {
    let collector = OtlpReceiver::http().await;
    let floodgate = traced_binary(
        &collector,
        &[
            ("TRACING_SAMPLING_RATE", "0"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await;
    let mut client = floodgate.client().await;
    let edge = |user: &str| request("edge", &[&[("user", user)]]);
    // Rate 0: a new trace is not sampled, nor is a caller's unsampled one;
    // a caller's sampled trace is (parent-based).
    let unsampled = format!("00-{W3C_TRACE}-{PARENT}-00");
    call_with(&mut client, edge("a"), &[]).await;
    call_with(&mut client, edge("b"), &[("traceparent", &unsampled)]).await;
    call_with(&mut client, edge("c"), &B3_MULTI).await;
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| {
            of_trace(spans, B3_MULTI_TRACE).len() == 2
        })
        .await;
    // Spans are exported in the order they end: had either earlier call
    // been sampled, its spans would be here too.
    assert!(
        spans.iter().all(|s| s.trace_id == B3_MULTI_TRACE),
        "{spans:#?}"
    );
    let (call, _) = linked(&spans, B3_MULTI_TRACE, PARENT);
    assert_eq!(call.resource["service.name"], "RateLimit");
    assert_eq!(call.resource["service.namespace"], "gateway");
    let instance = &call.resource["service.instance.id"];
    let groups: Vec<usize> = instance.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "a random UUID: {instance}");
    assert_eq!(
        collector.headers()[0].get("x-tenant").map(String::as_str),
        Some("acme corp")
    );
    assert_eq!(
        collector.headers()[0]
            .get("content-type")
            .map(String::as_str),
        Some("application/x-protobuf")
    );
    drop(client);
    floodgate.stop().await;
}

// The collector runs on this test's runtime: it must answer the export
// made at shutdown while `Floodgate::stop` waits (on the runtime).
#[tokio::test]
async fn the_binary_exports_over_grpc_and_flushes_on_sigterm() {
    let collector = OtlpReceiver::grpc().await;
    let grpc_authority = collector.endpoint.trim_start_matches("http://").to_owned();
    // Batches would wait ten minutes: only the flush at shutdown sends them.
    let floodgate = traced_binary(
        &collector,
        &[
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            // host:port without a scheme: plaintext because insecure.
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                grpc_authority.as_str(),
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true"),
            ("TRACING_SERVICE_NAME", "edge-limits"),
            ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await;
    let mut client = floodgate.client().await;
    let traceparent = format!("00-{W3C_TRACE}-{PARENT}-01");
    let code = call_with(
        &mut client,
        request("edge", &[&[("user", "flushed")]]),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(code, tonic::Code::Ok);
    drop(client);
    floodgate.stop().await;
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| of_trace(spans, W3C_TRACE).len() == 2)
        .await;
    let (call, _) = linked(&spans, W3C_TRACE, PARENT);
    assert_eq!(call.resource["service.name"], "edge-limits");
    assert_eq!(call.resource["service.instance.id"], "pod-1");
    assert_eq!(
        collector.headers()[0].get("x-tenant").map(String::as_str),
        Some("acme corp")
    );
}

/// `e2e/envoy.yaml` with Envoy's OpenTelemetry tracer on the `edge`
/// listener, sampling every request and exporting to the collector on
/// `otlp_port` (gRPC), flushing often.
fn with_envoy_tracing(config: &str, otlp_port: u16) -> String {
    let anchor = "                stat_prefix: edge\n";
    assert!(config.contains(anchor), "e2e/envoy.yaml changed shape");
    let tracing = "                stat_prefix: edge
                tracing:
                  random_sampling: { value: 100 }
                  provider:
                    name: envoy.tracers.opentelemetry
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                      service_name: edge-proxy
                      grpc_service:
                        envoy_grpc: { cluster_name: otel }
                        timeout: 2s
";
    format!(
        "{}
    - name: otel
      type: STATIC
      connect_timeout: 1s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {{}}
      load_assignment:
        cluster_name: otel
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {{ address: 127.0.0.1, port_value: {otlp_port} }}

layered_runtime:
  layers:
    - name: flush_often
      static_layer:
        tracing.opentelemetry.flush_interval_ms: 100
        tracing.opentelemetry.min_flush_spans: 1
",
        config.replacen(anchor, tracing, 1).trim_end()
    )
}

#[tokio::test]
async fn behind_envoy_the_call_span_is_a_child_of_envoys_rate_limit_span() {
    let collector = OtlpReceiver::grpc().await;
    let tracing =
        Tracing::start(&settings(ExportProtocol::Grpc, collector.endpoint.clone())).unwrap();
    let server = traced_server(&tracing).await;
    let otlp_port: u16 = collector
        .endpoint
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let envoy = Envoy::start_edited(server.grpc_addr.port(), |config| {
        with_envoy_tracing(&config, otlp_port)
    })
    .await;
    let response = envoy.get("/", &[("x-user-id", "traced")]).await;
    assert_eq!(response.status, 200, "envoy log:\n{}", envoy.log());

    // floodgate's call span, and Envoy's spans of the same trace.
    let is_envoy =
        |s: &ReceivedSpan| s.resource.get("service.name").map(String::as_str) == Some("edge-proxy");
    let spans = collector
        .wait_for(ARRIVE_WITHIN, |spans| {
            spans.iter().filter(|s| s.name == CALL_SPAN).any(|call| {
                spans
                    .iter()
                    .any(|s| is_envoy(s) && s.span_id == call.parent_span_id)
            })
        })
        .await;
    let call = spans.iter().find(|s| s.name == CALL_SPAN).unwrap();
    let parent = spans
        .iter()
        .find(|s| s.span_id == call.parent_span_id)
        .unwrap();
    assert!(is_envoy(parent), "{parent:#?}");
    assert_eq!(parent.trace_id, call.trace_id);
    assert_eq!(
        parent.name,
        "async envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit egress"
    );
    // floodgate's own spans: the call and its store round trip.
    let ours: Vec<ReceivedSpan> = spans.iter().filter(|s| !is_envoy(s)).cloned().collect();
    linked(&ours, &call.trace_id, &call.parent_span_id);
    drop(envoy);
    server.shutdown().await;
    tracing.shutdown().await.unwrap();
}

#[test]
fn an_https_collector_is_a_startup_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .env_clear()
        .env("TRACING_ENABLED", "true")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("OTEL_EXPORTER_OTLP_ENDPOINT='https://collector:4318' is not an http:// URL"),
        "{stderr}"
    );
}
