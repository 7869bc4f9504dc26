//! The HTTP face (reference port 8080): `GET /healthcheck`, `POST /json`
//! and `GET /rlconfig`.
//!
//! Owns the proto3-JSON shapes of `RateLimitRequest`/`RateLimitResponse`
//! (hand-written serde types, converted straight to and from the domain
//! types) and the mapping of decisions to HTTP status codes. Knows the
//! limiter and the health state, nothing of stores.

use super::health::Health;
use crate::config::{Algorithm, Policy, ReloadStats, Rule};
use crate::descriptor::{Descriptor, Entry, RateLimitOverride, Request, Unit};
use crate::limiter::{Code, LimitError, Limiter, Response, Status};
use crate::store::StoreKind;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// What the HTTP handlers share.
#[derive(Debug, Clone)]
struct AppState {
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    /// Largest `/json` body read (`MAX_REQUEST_BYTES`).
    max_body: usize,
}

/// Builds the HTTP router.
pub(crate) fn router(
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    max_body: usize,
) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/json", post(json))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics))
        // `/json` reads its body with its own bound, answered 400 like any
        // other bad request.
        .layer(DefaultBodyLimit::disable())
        .with_state(AppState {
            health,
            limiter,
            reloads,
            max_body,
        })
}

/// A router serving only the metrics, at `path` (`USE_PROMETHEUS` with
/// `PROMETHEUS_ADDR` / `PROMETHEUS_PATH`).
pub(crate) fn metrics_router(
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    path: &str,
) -> Router {
    Router::new()
        .route(path, get(metrics))
        .with_state(AppState {
            health,
            limiter,
            reloads,
            max_body: 0,
        })
}

/// `GET /metrics`: every metric in the Prometheus text format.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = state.limiter.metrics().render(state.reloads.as_deref());
    if let Some(memory) = state.limiter.store().as_memory() {
        crate::metrics::render_memory_store(&mut text, &memory.stats());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// 200 `OK` while serving, 500 otherwise (reference behaviour).
async fn healthcheck(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_serving() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "NOT SERVING")
    }
}

/// `POST /json`: a proto3-JSON `RateLimitRequest` in, a proto3-JSON
/// `RateLimitResponse` out. 200 when OK, 429 when OVER_LIMIT, 400 with a
/// plain-text reason for unreadable JSON or an invalid request, 503 when the
/// store fails.
async fn json(State(state): State<AppState>, body: Body) -> HttpResponse {
    let metrics = state.limiter.metrics();
    let _in_flight = metrics.start_request();
    let Ok(body) = axum::body::to_bytes(body, state.max_body).await else {
        metrics.record_service_error();
        return bad_request(&format!(
            "request body is larger than the limit of {} bytes, or was cut short",
            state.max_body
        ));
    };
    let request = match serde_json::from_slice::<JsonRequest>(&body)
        .map_err(JsonError::Parse)
        .and_then(JsonRequest::into_request)
    {
        Ok(request) => request,
        Err(err) => {
            metrics.record_service_error();
            return bad_request(&chain(&err));
        }
    };
    let decision = state.limiter.should_rate_limit(&request).await;
    if decision.is_err() {
        metrics.record_service_error();
    }
    answer(decision)
}

/// The one mapping from a decision to an HTTP answer: 200 OK, 429
/// OVER_LIMIT, 400 invalid request, 503 store failure (cause logged, not
/// sent).
fn answer(decision: Result<Response, LimitError>) -> HttpResponse {
    match decision {
        Ok(response) => {
            let status = match response.overall_code {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            };
            let body = JsonResponse::from(response);
            match serde_json::to_vec(&body) {
                Ok(bytes) => {
                    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
                }
                Err(err) => {
                    tracing::error!(
                        error = &err as &dyn std::error::Error,
                        "cannot encode json response"
                    );
                    StatusCode::INTERNAL_SERVER_ERROR.into_response()
                }
            }
        }
        // Logged by the limiter, at most once a second per kind.
        Err(LimitError::Store(_)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "rate limit store unavailable\n",
        )
            .into_response(),
        Err(invalid) => bad_request(&invalid.to_string()),
    }
}

/// An error and its causes, joined with ": " (the client's reason text).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn bad_request(reason: &str) -> HttpResponse {
    (StatusCode::BAD_REQUEST, format!("bad request: {reason}\n")).into_response()
}

/// `GET /rlconfig`: one line per rule, in the reference's format
/// `<full_key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <bool>, quota_mode: <bool>`.
async fn rlconfig(State(state): State<AppState>) -> impl IntoResponse {
    let index = state.limiter.rules().load_full();
    let mut text = String::new();
    for rule in index.rules() {
        rlconfig_lines(&mut text, rule);
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text)
}

/// The `/rlconfig` lines of one rule: one per limit (a rule with
/// `rate_limits` has several). Unlimited rules say `unlimited` where a limit
/// would be; floodgate's extensions (`unit_multiplier`, `algorithm`, `burst`)
/// are appended only when they differ from the reference's behaviour.
fn rlconfig_lines(text: &mut String, rule: &Rule) {
    let flags = format!(
        ", shadow_mode: {}, quota_mode: {}",
        rule.shadow_mode, rule.quota_mode
    );
    // Writing to a String cannot fail.
    match &rule.policy {
        Policy::Limited(limits) => {
            for limit in limits {
                let _ = write!(
                    text,
                    "{}: unit={} requests_per_unit={}",
                    rule.full_key,
                    unit_name(limit.unit),
                    limit.requests_per_unit
                );
                if limit.unit_multiplier.get() != 1 {
                    let _ = write!(text, " unit_multiplier={}", limit.unit_multiplier);
                }
                if limit.algorithm != Algorithm::FixedWindow {
                    let _ = write!(text, " algorithm={}", limit.algorithm.as_str());
                }
                if let Some(burst) = limit.burst {
                    let _ = write!(text, " burst={burst}");
                }
                let _ = writeln!(text, "{flags}");
            }
        }
        Policy::Unlimited => {
            let _ = writeln!(text, "{}: unlimited{flags}", rule.full_key);
        }
    }
}

/// Why a `/json` body is not a valid request.
#[derive(Debug, thiserror::Error)]
enum JsonError {
    /// Not JSON, or not the shape of a `RateLimitRequest`.
    #[error("invalid RateLimitRequest JSON")]
    Parse(#[source] serde_json::Error),
    /// An override's unit is missing or UNKNOWN.
    #[error(
        "descriptor {index} limit override has unit UNKNOWN; use SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
    )]
    OverrideUnit {
        /// Position of the descriptor in the request.
        index: usize,
    },
}

/// `RateLimitRequest` in proto3 JSON: lowerCamelCase or original field names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default, deserialize_with = "nullable")]
    domain: String,
    #[serde(default, deserialize_with = "nullable")]
    descriptors: Vec<JsonDescriptor>,
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "uint"
    )]
    hits_addend: u32,
}

/// `RateLimitDescriptor` in proto3 JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default, deserialize_with = "nullable")]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    /// A `UInt64Value`: a number (or string) when present, absent or null
    /// when not.
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "optional_uint"
    )]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default, deserialize_with = "nullable")]
    key: String,
    #[serde(default, deserialize_with = "nullable")]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(
        default,
        rename = "requestsPerUnit",
        alias = "requests_per_unit",
        deserialize_with = "uint"
    )]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "unit")]
    unit: Option<Unit>,
}

impl JsonRequest {
    fn into_request(self) -> Result<Request, JsonError> {
        let descriptors = self
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(index, d)| {
                let limit = match d.limit {
                    None => None,
                    Some(o) => Some(RateLimitOverride {
                        requests_per_unit: o.requests_per_unit,
                        unit: o.unit.ok_or(JsonError::OverrideUnit { index })?,
                    }),
                };
                Ok(Descriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry::new(e.key, e.value))
                        .collect(),
                    limit,
                    hits_addend: d.hits_addend,
                })
            })
            .collect::<Result<_, JsonError>>()?;
        Ok(Request {
            domain: self.domain,
            descriptors,
            hits_addend: self.hits_addend,
        })
    }
}

/// proto3 JSON: `null` means the field's default.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A proto3-JSON integer: a number or a decimal string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum JsonInt {
    Number(u64),
    Text(String),
}

impl JsonInt {
    fn to_u64<E: serde::de::Error>(&self) -> Result<u64, E> {
        match self {
            Self::Number(n) => Ok(*n),
            Self::Text(text) => text
                .parse()
                .map_err(|_| E::custom(format!("'{text}' is not an unsigned integer"))),
        }
    }
}

fn optional_uint<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Option::<JsonInt>::deserialize(deserializer)?
        .map(|n| n.to_u64())
        .transpose()
}

fn uint<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let Some(n) = optional_uint(deserializer)? else {
        return Ok(0);
    };
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} does not fit in uint32")))
}

/// A `RateLimitUnit` by name or number; UNKNOWN (0), null or absent is
/// `None`.
fn unit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Unit>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Name(String),
    }
    let unit = match Option::<Raw>::deserialize(deserializer)? {
        None => None,
        Some(Raw::Number(n)) => match n {
            0 => None,
            1 => Some(Unit::Second),
            2 => Some(Unit::Minute),
            3 => Some(Unit::Hour),
            4 => Some(Unit::Day),
            5 => Some(Unit::Month),
            6 => Some(Unit::Year),
            7 => Some(Unit::Week),
            _ => return Err(serde::de::Error::custom(format!("unknown unit number {n}"))),
        },
        Some(Raw::Name(name)) if name == "UNKNOWN" => None,
        Some(Raw::Name(name)) => Some(
            Unit::ALL
                .into_iter()
                .find(|u| unit_name(*u) == name)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown unit '{name}'")))?,
        ),
    };
    Ok(unit)
}

/// The proto enum name of a unit.
const fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "SECOND",
        Unit::Minute => "MINUTE",
        Unit::Hour => "HOUR",
        Unit::Day => "DAY",
        Unit::Week => "WEEK",
        Unit::Month => "MONTH",
        Unit::Year => "YEAR",
    }
}

const fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// `RateLimitResponse` in proto3 JSON: lowerCamelCase, default values
/// omitted.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Debug, Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

/// serde's `skip_serializing_if` passes a reference.
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A `google.protobuf.Duration` in proto3 JSON: seconds with an `s`
/// suffix, and 3, 6 or 9 fractional digits when needed.
fn duration_text(d: Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{secs}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{secs}.{:06}s", nanos / 1_000)
    } else {
        format!("{secs}.{nanos:09}s")
    }
}

impl From<Status> for JsonStatus {
    fn from(status: Status) -> Self {
        Self {
            code: code_name(status.code),
            current_limit: status.current_limit.map(|l| JsonLimit {
                name: l.name.as_deref().unwrap_or_default().to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: unit_name(l.unit),
            }),
            limit_remaining: status.limit_remaining,
            duration_until_reset: status.duration_until_reset.map(duration_text),
        }
    }
}

impl From<Response> for JsonResponse {
    fn from(response: Response) -> Self {
        Self {
            overall_code: code_name(response.overall_code),
            statuses: response
                .statuses
                .into_iter()
                .map(JsonStatus::from)
                .collect(),
            response_headers_to_add: response
                .response_headers
                .into_iter()
                .map(|(key, value)| JsonHeader {
                    key: key.to_string(),
                    value,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadOptions, Source, load_sources};
    use crate::limiter::CurrentLimit;

    fn parse(json: &str) -> Result<Request, JsonError> {
        serde_json::from_str::<JsonRequest>(json)
            .map_err(JsonError::Parse)
            .and_then(JsonRequest::into_request)
    }

    #[test]
    fn camel_case_request_with_strings_and_enum_names() {
        let r = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"},"hitsAddend":"2"}],"hitsAddend":1}"#,
        )
        .unwrap();
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 1);
        let d = &r.descriptors[0];
        assert_eq!(d.entries, vec![Entry::new("k", "v")]);
        assert_eq!(
            d.limit,
            Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: Unit::Minute
            })
        );
        assert_eq!(d.hits_addend, Some(2));
    }

    #[test]
    fn snake_case_request_with_numbers_and_enum_numbers() {
        let r = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":"7","unit":7},"hits_addend":0}],"hits_addend":"3"}"#,
        )
        .unwrap();
        assert_eq!(r.hits_addend, 3);
        let d = &r.descriptors[0];
        assert_eq!(d.entries, vec![Entry::new("k", "")]);
        assert_eq!(d.limit.unwrap().unit, Unit::Week);
        assert_eq!(d.limit.unwrap().requests_per_unit, 7);
        assert_eq!(d.hits_addend, Some(0));
    }

    #[test]
    fn absent_and_null_fields_are_defaults() {
        let r =
            parse(r#"{"domain":"d","descriptors":[{"entries":null,"hitsAddend":null}]}"#).unwrap();
        assert_eq!(r.hits_addend, 0);
        assert_eq!(r.descriptors[0].hits_addend, None);
        assert!(r.descriptors[0].entries.is_empty());
        assert_eq!(parse("{}").unwrap(), Request::default());
    }

    #[test]
    fn malformed_requests_are_rejected_with_a_reason() {
        let err = chain(&parse("{").unwrap_err());
        assert!(err.starts_with("invalid RateLimitRequest JSON: "), "{err}");
        let err = chain(&parse(r#"{"domian":"d"}"#).unwrap_err());
        assert!(err.contains("unknown field `domian`"), "{err}");
        let err = chain(&parse(r#"{"hitsAddend":"x"}"#).unwrap_err());
        assert!(err.contains("'x' is not an unsigned integer"), "{err}");
        let err = chain(&parse(r#"{"hitsAddend":4294967296}"#).unwrap_err());
        assert!(err.contains("does not fit in uint32"), "{err}");
        let err = chain(
            &parse(r#"{"descriptors":[{"limit":{"requestsPerUnit":1,"unit":"MINUTES"}}]}"#)
                .unwrap_err(),
        );
        assert!(err.contains("unknown unit 'MINUTES'"), "{err}");
        let err = parse(r#"{"descriptors":[{"limit":{"requestsPerUnit":1}}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("descriptor 0 limit override has unit UNKNOWN"),
            "{err}"
        );
    }

    #[test]
    fn response_is_proto3_json_with_defaults_omitted() {
        let response = Response {
            overall_code: Code::OverLimit,
            statuses: vec![
                Status {
                    code: Code::OverLimit,
                    current_limit: Some(CurrentLimit {
                        name: Some("n".into()),
                        requests_per_unit: 20,
                        unit: Unit::Minute,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::from_secs(58)),
                },
                Status {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: 0,
                    duration_until_reset: None,
                },
            ],
            response_headers: vec![("RateLimit-Limit".into(), "20".into())],
        };
        let json = serde_json::to_string(&JsonResponse::from(response)).unwrap();
        assert_eq!(
            json,
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"n","requestsPerUnit":20,"unit":"MINUTE"},"durationUntilReset":"58s"},{"code":"OK"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"20"}]}"#
        );
    }

    #[test]
    fn decisions_map_to_http_status_codes() {
        let ok = Response {
            overall_code: Code::Ok,
            statuses: Vec::new(),
            response_headers: Vec::new(),
        };
        let over = Response {
            overall_code: Code::OverLimit,
            ..ok.clone()
        };
        assert_eq!(answer(Ok(ok)).status(), StatusCode::OK);
        assert_eq!(answer(Ok(over)).status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            answer(Err(LimitError::EmptyDomain)).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            answer(Err(LimitError::Store(crate::store::StoreError::Timeout))).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn durations_use_proto3_json_text() {
        assert_eq!(duration_text(Duration::from_secs(0)), "0s");
        assert_eq!(duration_text(Duration::from_millis(1_500)), "1.500s");
        assert_eq!(duration_text(Duration::from_micros(1)), "0.000001s");
        assert_eq!(duration_text(Duration::from_nanos(5)), "0.000000005s");
    }

    #[test]
    fn rlconfig_lines_follow_the_reference_format() {
        let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    shadow_mode: true\n  - key: b\n    value: x\n    rate_limit: {unlimited: true}\n  - key: c\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 10}\n  - key: e\n    rate_limits:\n      - {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 3}\n      - {unit: hour, requests_per_unit: 100, algorithm: gcra}\n";
        let index = load_sources(
            &[Source {
                name: "d.yaml".into(),
                text: yaml.into(),
            }],
            &LoadOptions::default(),
        )
        .unwrap();
        let mut text = String::new();
        for rule in index.rules() {
            rlconfig_lines(&mut text, rule);
        }
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "d.a: unit=MINUTE requests_per_unit=5, shadow_mode: true, quota_mode: false",
                "d.b_x: unlimited, shadow_mode: false, quota_mode: false",
                "d.c: unit=SECOND requests_per_unit=2 unit_multiplier=10, shadow_mode: false, quota_mode: true",
                "d.e: unit=SECOND requests_per_unit=10 algorithm=gcra burst=3, shadow_mode: false, quota_mode: false",
                "d.e: unit=HOUR requests_per_unit=100 algorithm=gcra, shadow_mode: false, quota_mode: false",
            ]
        );
    }
}
