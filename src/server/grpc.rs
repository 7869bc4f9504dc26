//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService` over the
//! limiter. Owns every conversion between proto and domain types and the one
//! mapping from errors to gRPC status codes.

use crate::descriptor::{Descriptor, Entry, RateLimitOverride, Request, Unit, UnknownOverrideUnit};
use crate::limiter::{Code, LimitError, Limiter, Response, Status};
use crate::otel::{CallSpan, RequestTracer};
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, rate_limit,
};
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::server::admit::{Arrival, RLS_PATH, parse_grpc_timeout};
use crate::store::StoreKind;
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataKey};
use tracing::{Span, field, instrument};

/// The RLS service handed to tonic.
#[derive(Debug, Clone)]
pub(crate) struct RlsService {
    limiter: Arc<Limiter<StoreKind>>,
    /// `TRACING_ENABLED`: spans of calls; `None` costs one branch a call.
    tracer: Option<RequestTracer>,
    /// `grpc-timeout`, parsed once: a name given as text is parsed and
    /// checked on every lookup.
    timeout_key: MetadataKey<Ascii>,
}

impl RlsService {
    pub(crate) fn new(limiter: Arc<Limiter<StoreKind>>) -> Self {
        Self {
            limiter,
            tracer: None,
            timeout_key: MetadataKey::from_static("grpc-timeout"),
        }
    }

    /// Spans every call with `tracer`, when given.
    pub(crate) fn with_tracer(mut self, tracer: Option<RequestTracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Starts the span of a call, joining the caller's trace.
    fn start_span(&self, request: &tonic::Request<RateLimitRequest>) -> Option<CallSpan> {
        let tracer = self.tracer.as_ref()?;
        let headers = request.metadata();
        Some(tracer.start_call(
            |name| headers.get(name).and_then(|v| v.to_str().ok()),
            &request.get_ref().domain,
            request.get_ref().descriptors.len(),
        ))
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    #[instrument(
        name = "should_rate_limit",
        level = "debug",
        skip_all,
        fields(
            rl.domain = %request.get_ref().domain,
            rl.descriptors = request.get_ref().descriptors.len(),
            rl.code = field::Empty,
        )
    )]
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let metrics = self.limiter.metrics();
        let _in_flight = metrics.start_request();
        let span = self.start_span(&request);
        let timeout = request
            .metadata()
            .get(&self.timeout_key)
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        // The time the request already waited its turn counts against the
        // caller's deadline.
        let waited = request
            .extensions()
            .get::<Arrival>()
            .and_then(Arrival::waited)
            .unwrap_or_default();
        let deadline = timeout.map(|timeout| store_deadline(timeout, waited));
        let request = match request_from_proto(request.into_inner()) {
            Ok(request) => request,
            Err(err) => {
                metrics.record_service_error();
                let status = tonic::Status::from(err);
                if let Some(span) = &span {
                    span.end_error(status.code().into(), status.message());
                }
                return Err(status);
            }
        };
        let decision = if deadline.is_some_and(|d| d.is_zero()) {
            // Past its caller's deadline (or too close to it to answer in
            // time): answered at once, uncounted (see `Limiter::shed`).
            self.limiter.shed(&request)
        } else {
            let decision = self.limiter.should_rate_limit_within(&request, deadline);
            match &span {
                Some(span) => span.run(decision).await,
                None => decision.await,
            }
        };
        match decision {
            Ok(response) => {
                // Only when the span is kept: finding the current span
                // costs the dispatcher a lookup on every call.
                if tracing::enabled!(tracing::Level::DEBUG) {
                    Span::current().record("rl.code", field::debug(response.overall_code));
                }
                if let Some(span) = &span {
                    span.end_ok(code_name(response.overall_code));
                }
                Ok(tonic::Response::new(response_to_proto(response, &request)))
            }
            Err(err) => {
                metrics.record_service_error();
                let status = status_from_error(&err);
                if let Some(span) = &span {
                    span.end_error(status.code().into(), status.message());
                }
                Err(status)
            }
        }
    }
}

/// Answers INVALID_ARGUMENT, as for any bad request, where tonic refused a
/// message before floodgate saw it: undecodable bytes (tonic's INTERNAL)
/// and messages over `MAX_REQUEST_BYTES` (tonic's OUT_OF_RANGE). floodgate's
/// own handlers never answer either code.
pub(crate) fn undecodable_is_invalid_argument(
    mut response: tonic::codegen::http::Response<tonic::body::Body>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    use tonic::codegen::http::{HeaderName, HeaderValue};
    // A name given as text is parsed on every lookup.
    static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    let status = response.headers().get(&GRPC_STATUS);
    if status.is_some_and(|s| s == "13" || s == "11") {
        response
            .headers_mut()
            .insert(&GRPC_STATUS, HeaderValue::from_static("3"));
    }
    response
}

/// The store's share of a caller's `timeout` once the request has
/// `waited` its turn: what is left, less a tenth of the timeout (at most
/// 50 ms) kept back to answer by the failure policy and send the reply in
/// time. Zero: the deadline cannot be met, and the request is shed.
fn store_deadline(timeout: Duration, waited: Duration) -> Duration {
    let reserve = (timeout / 10).min(Duration::from_millis(50));
    timeout.saturating_sub(waited).saturating_sub(reserve)
}

/// Takes a `ShouldRateLimit` call out of admission's queue (its
/// connection's [`Arrival`], which tonic hands to each request) and stamps
/// how long it waited, for the handler. Runs on the request's first poll,
/// before tonic decodes it: a call tonic refuses leaves the queue too.
pub(crate) fn stamp_arrival<B>(
    mut request: tonic::codegen::http::Request<B>,
) -> tonic::codegen::http::Request<B> {
    if request.uri().path() == RLS_PATH
        && let Some(arrival) = request.extensions_mut().get_mut::<Arrival>()
    {
        arrival.start();
    }
    request
}

/// Why a proto request cannot become a domain request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConvertError {
    #[error(transparent)]
    OverrideUnit(#[from] UnknownOverrideUnit),
}

impl From<ConvertError> for tonic::Status {
    fn from(err: ConvertError) -> Self {
        Self::invalid_argument(err.to_string())
    }
}

/// Converts the wire request into the domain request.
pub(crate) fn request_from_proto(request: RateLimitRequest) -> Result<Request, ConvertError> {
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(index, d)| descriptor_from_proto(index, d))
        .collect::<Result<_, _>>()?;
    Ok(Request {
        domain: request.domain,
        descriptors,
        hits_addend: request.hits_addend,
    })
}

fn descriptor_from_proto(index: usize, d: RateLimitDescriptor) -> Result<Descriptor, ConvertError> {
    let limit = match d.limit {
        None => None,
        Some(o) => {
            let unit = RateLimitUnit::try_from(o.unit)
                .ok()
                .and_then(unit_from_proto)
                .ok_or(UnknownOverrideUnit { index })?;
            Some(RateLimitOverride {
                requests_per_unit: o.requests_per_unit,
                unit,
            })
        }
    };
    Ok(Descriptor {
        entries: d
            .entries
            .into_iter()
            .map(|e| Entry {
                key: e.key,
                value: e.value,
            })
            .collect(),
        limit,
        hits_addend: d.hits_addend,
    })
}

const fn unit_from_proto(unit: RateLimitUnit) -> Option<Unit> {
    match unit {
        RateLimitUnit::Unknown => None,
        RateLimitUnit::Second => Some(Unit::Second),
        RateLimitUnit::Minute => Some(Unit::Minute),
        RateLimitUnit::Hour => Some(Unit::Hour),
        RateLimitUnit::Day => Some(Unit::Day),
        RateLimitUnit::Week => Some(Unit::Week),
        RateLimitUnit::Month => Some(Unit::Month),
        RateLimitUnit::Year => Some(Unit::Year),
    }
}

const fn unit_to_proto(unit: Unit) -> rate_limit::Unit {
    match unit {
        Unit::Second => rate_limit::Unit::Second,
        Unit::Minute => rate_limit::Unit::Minute,
        Unit::Hour => rate_limit::Unit::Hour,
        Unit::Day => rate_limit::Unit::Day,
        Unit::Week => rate_limit::Unit::Week,
        Unit::Month => rate_limit::Unit::Month,
        Unit::Year => rate_limit::Unit::Year,
    }
}

/// A code's proto enum name, for span attributes.
const fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

const fn code_to_proto(code: Code) -> rate_limit_response::Code {
    match code {
        Code::Ok => rate_limit_response::Code::Ok,
        Code::OverLimit => rate_limit_response::Code::OverLimit,
    }
}

fn status_to_proto(status: Status) -> DescriptorStatus {
    DescriptorStatus {
        code: code_to_proto(status.code).into(),
        current_limit: status
            .current_limit
            .map(|l| rate_limit_response::RateLimit {
                name: l.name.as_deref().unwrap_or_default().to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: unit_to_proto(l.unit).into(),
            }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(|d| prost_types::Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            // Sub-second resets (sliding windows, GCRA) keep their precision;
            // always below 1e9, so the conversion cannot fail.
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }),
        quota: None,
    }
}

/// Converts the domain response to `request` into the wire response.
pub(crate) fn response_to_proto(response: Response, request: &Request) -> RateLimitResponse {
    let dynamic_metadata = response
        .dynamic_metadata
        .as_deref()
        .map(|passed| super::metadata::dynamic_metadata(request, passed));
    RateLimitResponse {
        overall_code: code_to_proto(response.overall_code).into(),
        statuses: response.statuses.into_iter().map(status_to_proto).collect(),
        response_headers_to_add: headers_to_proto(response.response_headers),
        request_headers_to_add: headers_to_proto(response.request_headers),
        dynamic_metadata,
        ..RateLimitResponse::default()
    }
}

fn headers_to_proto(headers: Vec<(std::sync::Arc<str>, String)>) -> Vec<HeaderValue> {
    headers
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.to_string(),
            value,
            raw_value: Vec::new(),
        })
        .collect()
}

/// The one mapping from a failed decision to a gRPC status.
///
/// Bad requests are INVALID_ARGUMENT with a message that says what is wrong.
/// A store failure is UNAVAILABLE, never UNKNOWN or OK, so Envoy's
/// `failure_mode_deny` decides; its cause is logged, not sent.
pub(crate) fn status_from_error(err: &LimitError) -> tonic::Status {
    match err {
        // Logged by the limiter, at most once a second per kind.
        LimitError::Store(_) => tonic::Status::unavailable("rate limit store unavailable"),
        LimitError::Shed => tonic::Status::resource_exhausted(err.to_string()),
        invalid => tonic::Status::invalid_argument(invalid.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_and_keep_a_margin() {
        assert_eq!(parse_grpc_timeout(b"20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse_grpc_timeout(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(
            parse_grpc_timeout(b"500u"),
            Some(Duration::from_micros(500))
        );
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "m", "123456789m", "12x", "-1S", "1.5S", "é"] {
            assert_eq!(parse_grpc_timeout(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(
            store_deadline(Duration::from_millis(20), Duration::ZERO),
            Duration::from_millis(18)
        );
        // Waited 5 ms: 15 ms left, 2 kept back.
        assert_eq!(
            store_deadline(Duration::from_millis(20), Duration::from_millis(5)),
            Duration::from_millis(13)
        );
        // Waited past the part that can still be used: shed.
        assert_eq!(
            store_deadline(Duration::from_millis(20), Duration::from_millis(18)),
            Duration::ZERO
        );
        assert_eq!(
            store_deadline(Duration::from_millis(20), Duration::from_secs(3)),
            Duration::ZERO
        );
        assert_eq!(
            store_deadline(Duration::from_secs(10), Duration::ZERO),
            Duration::from_millis(9_950)
        );
    }
    use crate::descriptor::Unit;
    use crate::limiter::CurrentLimit;
    use std::time::Duration;

    #[test]
    fn override_with_unknown_unit_is_rejected() {
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                limit: Some(
                    crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
                        requests_per_unit: 5,
                        unit: 0,
                    },
                ),
                ..Default::default()
            }],
            hits_addend: 0,
        };
        let err = request_from_proto(request).unwrap_err();
        assert_eq!(
            err.to_string(),
            "descriptor 0 limit override has unit UNKNOWN; use SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
        );
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn week_keeps_its_proto_number() {
        assert_eq!(unit_to_proto(Unit::Week) as i32, 7);
        assert_eq!(unit_from_proto(RateLimitUnit::Month), Some(Unit::Month));
        assert_eq!(RateLimitUnit::Year as i32, 6);
    }

    #[test]
    fn response_fields_map_one_to_one() {
        let request = Request {
            domain: "d".into(),
            descriptors: Vec::new(),
            hits_addend: 0,
        };
        let proto = response_to_proto(
            Response {
                overall_code: Code::OverLimit,
                statuses: vec![Status {
                    code: Code::OverLimit,
                    current_limit: Some(CurrentLimit {
                        name: Some("per_user".into()),
                        requests_per_unit: 20,
                        unit: Unit::Minute,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::from_secs(58)),
                }],
                response_headers: vec![("RateLimit-Limit".into(), "20".into())],
                request_headers: Vec::new(),
                dynamic_metadata: None,
            },
            &request,
        );
        assert_eq!(proto.dynamic_metadata, None);
        assert_eq!(proto.overall_code, 2);
        let status = &proto.statuses[0];
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per_user", 20, 2)
        );
        assert_eq!(status.duration_until_reset.unwrap().seconds, 58);
        assert_eq!(proto.response_headers_to_add[0].key, "RateLimit-Limit");
    }
}
