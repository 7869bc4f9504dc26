//! A test OpenTelemetry collector: receives OTLP trace exports over gRPC (a
//! tonic `TraceService`) or over HTTP (protobuf POSTed to `/v1/traces`, an
//! axum route) on a free loopback port, and keeps every span with its
//! resource and the request headers. Stopped when dropped.

use super::poll_until_async;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use parking_lot::Mutex;
use prost::Message as _;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One received span, flattened: ids in lowercase hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP `SpanKind` number (2 server, 3 client).
    pub kind: i32,
    pub attributes: HashMap<String, String>,
    pub resource: HashMap<String, String>,
    /// OTLP status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Headers (HTTP) or metadata (gRPC) of every export, lowercase names.
    headers: Vec<HashMap<String, String>>,
}

/// A running receiver.
pub struct OtlpReceiver {
    /// The collector's base URL, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    token: CancellationToken,
}

impl OtlpReceiver {
    /// A gRPC collector (`TraceService/Export`).
    pub async fn grpc() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let token = CancellationToken::new();
        let service = TraceServiceServer::new(GrpcSink(received.clone()));
        let stop = token.clone().cancelled_owned();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop,
                ),
        );
        Self::running(addr, received, token)
    }

    /// An HTTP collector (`POST /v1/traces`, `application/x-protobuf`).
    pub async fn http() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let token = CancellationToken::new();
        let sink = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                    };
                    let headers = headers
                        .iter()
                        .filter_map(|(k, v)| {
                            Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))
                        })
                        .collect();
                    record(&sink, headers, &request);
                    (
                        axum::http::StatusCode::OK,
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                },
            ),
        );
        let stop = token.clone().cancelled_owned();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
        });
        Self::running(addr, received, token)
    }

    fn running(addr: SocketAddr, received: Arc<Mutex<Received>>, token: CancellationToken) -> Self {
        Self {
            endpoint: format!("http://{addr}"),
            received,
            token,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().spans.clone()
    }

    /// The headers of every export received so far.
    pub fn headers(&self) -> Vec<HashMap<String, String>> {
        self.received.lock().headers.clone()
    }

    /// Waits up to `within` until `done` holds for the spans received; the
    /// spans then (panics with what arrived otherwise).
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let ok = poll_until_async(within, Duration::from_millis(20), || {
            let ready = done(&self.spans());
            async move { ready.then_some(true) }
        })
        .await;
        assert!(ok, "spans never arrived; received: {:#?}", self.spans());
        self.spans()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

struct GrpcSink(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        record(&self.0, headers, request.get_ref());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn record(
    sink: &Mutex<Received>,
    headers: HashMap<String, String>,
    request: &ExportTraceServiceRequest,
) {
    let mut received = sink.lock();
    received.headers.push(headers);
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                received.spans.push(ReceivedSpan {
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    resource: resource.clone(),
                    status_code: span.status.as_ref().map_or(0, |s| s.code),
                });
            }
        }
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
