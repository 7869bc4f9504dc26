//! OpenTelemetry traces over OTLP (`TRACING_ENABLED`): one span per
//! `ShouldRateLimit` call, joining the caller's trace (W3C `traceparent` or
//! B3 headers, see `propagation.rs`), with a child span for its store round
//! trip, exported in batches from a background thread over OTLP/HTTP
//! (protobuf) or OTLP/gRPC.
//!
//! Cost: with tracing off nothing here runs on the request path; the gRPC
//! service holds no [`RequestTracer`] and never reads a header, and the
//! store wrapper is one relaxed atomic load returning the store's own
//! future. With tracing
//! on, a call costs two spans; export never blocks a request: spans go to a
//! bounded queue (dropped when full) that a dedicated thread drains, so a
//! dead or slow collector never slows or fails a call.
//!
//! Must not touch the rules, the store or the wire types of the RLS API.

mod propagation;

use futures_util::future::Either;
use opentelemetry::trace::{
    FutureExt as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator as _, RandomIdGenerator, Sampler,
    SdkTracer, SdkTracerProvider,
};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Service name when `TRACING_SERVICE_NAME` is not set (the reference's).
pub(crate) const DEFAULT_SERVICE_NAME: &str = "RateLimit";

/// Name of the store round-trip span on the embedded store.
pub const MEMORY_STORE_SPAN: &str = "Memory Store Execution";

/// Name of the store round-trip span on Redis (the reference's).
pub const REDIS_STORE_SPAN: &str = "Redis Pipeline Execution";
/// The span of a memcached store round trip (the reference's name).
pub const MEMCACHE_STORE_SPAN: &str = "Memcached Fetch Execution";

/// Longest wait for the last export at shutdown.
const FLUSH_WITHIN: Duration = Duration::from_secs(10);

/// Name of the span of one `ShouldRateLimit` call (the reference's).
pub(crate) const CALL_SPAN: &str = "ShouldRateLimit Execution";

/// How spans leave the process (`TRACING_EXPORTER_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportProtocol {
    /// OTLP/HTTP: protobuf bodies POSTed to `<endpoint>/v1/traces`.
    Http,
    /// OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
    Grpc,
}

impl ExportProtocol {
    /// Name as written in `TRACING_EXPORTER_PROTOCOL`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Grpc => "grpc",
        }
    }
}

/// Resolved tracing settings (`TRACING_*`, `OTEL_EXPORTER_OTLP_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// Transport to the collector.
    pub protocol: ExportProtocol,
    /// Where spans go: the full URL of the traces endpoint for HTTP
    /// (`…/v1/traces`), the collector's `http://host:port` for gRPC.
    pub endpoint: String,
    /// Extra headers (HTTP) or metadata (gRPC) on every export.
    pub headers: Vec<(String, String)>,
    /// Resource attribute `service.name`.
    pub service_name: String,
    /// Resource attribute `service.namespace`.
    pub service_namespace: String,
    /// Resource attribute `service.instance.id`; a random UUID when `None`.
    pub service_instance_id: Option<String>,
    /// Share of new traces sampled (parent-based: a caller's decision wins);
    /// 1 or more samples all, 0 or less none.
    pub sampling_rate: f64,
    /// Longest time a finished span waits before its batch is exported
    /// (`OTEL_BSP_SCHEDULE_DELAY`).
    pub export_interval: Duration,
}

/// Why tracing could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// The OTLP exporter could not be built (bad endpoint, bad header).
    #[error("cannot build the OTLP {protocol} span exporter")]
    Exporter {
        /// `http` or `grpc`.
        protocol: &'static str,
        /// Cause.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// A header is not valid gRPC metadata.
    #[error("invalid OTLP header '{name}'")]
    Header {
        /// The header's name.
        name: String,
    },
    /// Spans still queued could not be exported on shutdown.
    #[error("cannot flush the remaining spans")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
    /// The flushing thread did not finish.
    #[error("the span flush did not finish")]
    Join(#[source] tokio::task::JoinError),
}

/// The running exporter: owns the background batch thread. [`Tracing::shutdown`]
/// exports what is still queued.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Starts exporting per `settings`. Call inside the Tokio runtime: the
    /// gRPC channel's connection task runs on it. Nothing connects yet; a
    /// collector that is down only costs the dropped batches.
    ///
    /// # Errors
    ///
    /// [`TracingError`] when the exporter cannot be built from `settings`.
    pub fn start(settings: &TracingSettings) -> Result<Self, TracingError> {
        let protocol = settings.protocol.as_str();
        let exporter_error = |source| TracingError::Exporter { protocol, source };
        let exporter = match settings.protocol {
            ExportProtocol::Http => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .with_headers(settings.headers.iter().cloned().collect())
                .build()
                .map_err(exporter_error)?,
            ExportProtocol::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (name, value) in &settings.headers {
                    let header = || TracingError::Header { name: name.clone() };
                    let key = tonic::metadata::MetadataKey::from_bytes(
                        name.to_ascii_lowercase().as_bytes(),
                    )
                    .map_err(|_| header())?;
                    metadata.insert(key, value.parse().map_err(|_| header())?);
                }
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(settings.endpoint.clone())
                    .with_metadata(metadata)
                    .build()
                    .map_err(exporter_error)?
            }
        };
        let instance_id = settings
            .service_instance_id
            .clone()
            .unwrap_or_else(random_uuid);
        let resource = Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attributes([
                KeyValue::new("service.namespace", settings.service_namespace.clone()),
                KeyValue::new("service.instance.id", instance_id.clone()),
            ])
            .build();
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(settings.export_interval)
                    .build(),
            )
            .build();
        STARTED.store(true, Ordering::Relaxed);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sampling_rate,
            ))))
            .with_resource(resource)
            .build();
        tracing::info!(
            otel.protocol = protocol,
            otel.endpoint = %settings.endpoint,
            otel.service_name = %settings.service_name,
            otel.service_instance_id = %instance_id,
            otel.sampling_rate = settings.sampling_rate,
            "exporting traces"
        );
        Ok(Self { provider })
    }

    /// What the gRPC service starts call spans with; `store_span` names the
    /// child span of each store round trip ([`MEMORY_STORE_SPAN`],
    /// [`REDIS_STORE_SPAN`] or [`MEMCACHE_STORE_SPAN`]).
    pub fn request_tracer(&self, store_span: &'static str) -> RequestTracer {
        RequestTracer {
            tracer: self.provider.tracer("floodgate"),
            store_span,
        }
    }

    /// Exports the spans still queued and stops the background thread.
    ///
    /// # Errors
    ///
    /// [`TracingError::Flush`] when the last export does not end within
    /// 10 s. (A failed export is logged, at `error`, not returned.)
    pub async fn shutdown(self) -> Result<(), TracingError> {
        // Shutting down blocks until the batch thread has exported, and a
        // gRPC export needs this runtime: block on a blocking-pool thread.
        let provider = self.provider;
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_WITHIN))
            .await
            .map_err(TracingError::Join)?
            .map_err(TracingError::Flush)
    }
}

/// Starts the spans of `ShouldRateLimit` calls; cheap to clone.
#[derive(Clone)]
pub struct RequestTracer {
    tracer: SdkTracer,
    store_span: &'static str,
}

impl fmt::Debug for RequestTracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestTracer").finish_non_exhaustive()
    }
}

impl RequestTracer {
    /// Starts the span of one call to `domain`, a child of the caller's span
    /// found by `header` (a lookup by lowercase name), if any.
    pub(crate) fn start_call<'a>(
        &self,
        header: impl Fn(&str) -> Option<&'a str>,
        domain: &str,
        descriptors: usize,
    ) -> CallSpan {
        let parent = propagation::extract(header);
        let span = self
            .tracer
            .span_builder(CALL_SPAN)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
                KeyValue::new("rpc.method", "ShouldRateLimit"),
                KeyValue::new("domain", domain.to_owned()),
                KeyValue::new(
                    "rl.descriptors",
                    i64::try_from(descriptors).unwrap_or(i64::MAX),
                ),
            ])
            .start_with_context(&self.tracer, &parent);
        let cx = parent.with_span(span).with_value(StoreSpan {
            tracer: self.tracer.clone(),
            name: self.store_span,
        });
        CallSpan { cx }
    }
}

/// The span of one call; ends when [`CallSpan::end`] is called or it is
/// dropped.
#[derive(Debug)]
pub(crate) struct CallSpan {
    cx: Context,
}

impl CallSpan {
    /// Runs `fut` inside this span: spans started under it (the store round
    /// trip) are its children.
    pub(crate) fn run<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        fut.with_context(self.cx.clone())
    }

    /// Ends the span with the call's overall code.
    pub(crate) fn end_ok(&self, overall_code: &'static str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("rl.overall_code", overall_code));
        span.end();
    }

    /// Ends the span as failed, with the gRPC status answered.
    pub(crate) fn end_error(&self, grpc_code: i32, message: &str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("rpc.grpc.status_code", i64::from(grpc_code)));
        span.set_status(Status::error(message.to_owned()));
        span.end();
    }
}

/// Carried in a call's context: how to start its store span.
struct StoreSpan {
    tracer: SdkTracer,
    name: &'static str,
}

/// Set once any [`Tracing`] has started in this process: until then the
/// store wrapper costs one relaxed load and does not look at the context.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Wraps one store round trip in a child span of the current call, when the
/// call is traced; otherwise returns `fut` itself (after one atomic load
/// while no tracing was ever started, one look at the current context after).
pub(crate) fn store_round_trip<F, T, E>(fut: F) -> Either<F, impl Future<Output = Result<T, E>>>
where
    F: Future<Output = Result<T, E>>,
    E: fmt::Display,
{
    if !STARTED.load(Ordering::Relaxed) {
        return Either::Left(fut);
    }
    let traced = Context::map_current(|cx| {
        cx.get::<StoreSpan>().map(|store| {
            let span = store
                .tracer
                .span_builder(store.name)
                .with_kind(SpanKind::Client)
                .start_with_context(&store.tracer, cx);
            cx.with_span(span)
        })
    });
    let Some(cx) = traced else {
        return Either::Left(fut);
    };
    Either::Right(async move {
        let result = fut.with_context(cx.clone()).await;
        let span = cx.span();
        if let Err(err) = &result {
            span.set_status(Status::error(err.to_string()));
        }
        span.end();
        result
    })
}

/// A random UUID (version 4) for `service.instance.id`, as the reference
/// makes one.
fn random_uuid() -> String {
    let mut bytes = RandomIdGenerator::default().new_trace_id().to_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_random_v4_uuids() {
        let (a, b) = (random_uuid(), random_uuid());
        assert_ne!(a, b);
        for id in [a, b] {
            let groups: Vec<&str> = id.split('-').collect();
            assert_eq!(
                groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12],
                "{id}"
            );
            assert!(groups[2].starts_with('4'), "{id}");
            assert!(
                matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn untraced_store_calls_pass_through() {
        let out: Result<u8, String> = store_round_trip(async { Ok(7) }).await;
        assert_eq!(out, Ok(7));
    }
}
