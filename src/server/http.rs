//! The HTTP face (reference port 8080): `GET /healthcheck`, `POST /json`
//! and `GET /rlconfig`; the operator views `POST /explain`, `GET /top`
//! and the live page `GET /`; and the limit-table API under `/v1/`.
//!
//! Owns the proto3-JSON shapes of `RateLimitRequest`/`RateLimitResponse`
//! (hand-written serde types, converted straight to and from the domain
//! types) and the mapping of decisions to HTTP status codes. Knows the
//! limiter and the health state, nothing of stores.

mod explain;
mod json;
mod tables;
mod top;

pub use explain::{ExplainError, explain_json};
pub(crate) use top::PAGE;
pub(crate) mod rlqs;

use super::health::Health;
use crate::config::{Algorithm, Policy, Rule};
use crate::descriptor::Request;
use crate::limiter::{Code, LimitError, Limiter, Response};
use crate::metrics::ReloadStats;
use crate::store::StoreKind;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use json::{JsonError, JsonRequest, JsonResponse};
use std::fmt::Write as _;
use std::sync::Arc;

/// What the HTTP handlers share.
#[derive(Debug, Clone)]
struct AppState {
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    /// Largest `/json` body read (`MAX_REQUEST_BYTES`).
    max_body: usize,
}

/// Builds the HTTP router: the probes, `/json`, `/metrics` and
/// `/rlconfig` open to every client; the operator views (these and
/// `rlqs_view`) behind `guard`, the one access layer.
pub(crate) fn router(
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    max_body: usize,
    rlqs_view: Router,
    guard: impl FnOnce(Router) -> Router,
) -> Router {
    let state = AppState {
        health,
        limiter,
        reloads,
        max_body,
    };
    let views = Router::new()
        .route("/explain", post(explain::explain))
        .route("/top", get(top::top))
        .route("/history", get(history))
        .route("/", get(top::page))
        .merge(tables::routes())
        .with_state(state.clone())
        .merge(rlqs_view);
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/livez", get(livez))
        .route("/json", post(json))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(guard(views))
        // `/json` reads its body with its own bound, answered 400 like any
        // other bad request.
        .layer(DefaultBodyLimit::disable())
}

/// What the Prometheus listener needs: the mapping and `EXTRA_TAGS`.
#[derive(Debug, Clone)]
struct MappedState {
    app: AppState,
    mapper: Arc<crate::metrics::Mapper>,
    tags: crate::metrics::statsd_names::Tags,
}

/// A router serving only the metrics, at `path` (`USE_PROMETHEUS` with
/// `PROMETHEUS_ADDR` / `PROMETHEUS_PATH`): the reference's stats through
/// the statsd_exporter `mapper`, as the reference's Prometheus sink exports
/// them, with the process metrics and the embedded store's gauges.
pub(crate) fn metrics_router(
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
    path: &str,
    mapper: Arc<crate::metrics::Mapper>,
    tags: crate::metrics::statsd_names::Tags,
) -> Router {
    Router::new()
        .route(path, get(mapped_metrics))
        .with_state(MappedState {
            app: AppState {
                health,
                limiter,
                reloads,
                max_body: 0,
            },
            mapper,
            tags,
        })
}

/// The debug listener's router (`DEBUG_HOST`/`DEBUG_PORT`): `/rlconfig`,
/// which Envoy Gateway's `egctl x config ratelimit` reads there, and
/// `/healthcheck`.
pub(crate) fn debug_router(
    health: Health,
    limiter: Arc<Limiter<StoreKind>>,
    reloads: Option<Arc<ReloadStats>>,
) -> Router {
    Router::new()
        .route("/rlconfig", get(rlconfig))
        .route("/healthcheck", get(healthcheck))
        .with_state(AppState {
            health,
            limiter,
            reloads,
            max_body: 0,
        })
}

/// `GET <PROMETHEUS_PATH>` on the Prometheus listener.
async fn mapped_metrics(State(state): State<MappedState>) -> impl IntoResponse {
    let limiter = &state.app.limiter;
    let mut text = crate::metrics::mapped::render_mapped(
        limiter.metrics(),
        state.app.reloads.as_deref(),
        &state.mapper,
        &state.tags,
    );
    crate::metrics::process::render_process(&mut text);
    if let Some(stats) = limiter.store().memory_stats() {
        crate::metrics::render_memory_store(&mut text, &stats);
    }
    if let Some(stats) = limiter.store().call_stats() {
        crate::metrics::render_redis_calls(&mut text, stats);
    }
    render_store_states(&mut text, limiter);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// `ratelimit_store_*{store}`: each store's decisions and whether it is
/// connected.
fn render_store_states(text: &mut String, limiter: &Limiter<StoreKind>) {
    let up = |name: &str| match name {
        crate::limiter::DEFAULT_STORE => limiter.store().is_ready(),
        // What the last health check found (every second).
        _ => limiter
            .named_stores()
            .find(|(_, n, _)| *n == name)
            .and_then(|(at, _, _)| limiter.metrics().stores.get(at))
            .is_some_and(|stats| stats.up.load(std::sync::atomic::Ordering::Relaxed)),
    };
    limiter.metrics().stores.render(text, &up);
}

/// `GET /metrics`: every metric in the Prometheus text format.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = state.limiter.metrics().render(state.reloads.as_deref());
    if let Some(stats) = state.limiter.store().memory_stats() {
        crate::metrics::render_memory_store(&mut text, &stats);
    }
    if let Some(stats) = state.limiter.store().call_stats() {
        crate::metrics::render_redis_calls(&mut text, stats);
    }
    render_store_states(&mut text, &state.limiter);
    crate::metrics::process::render_process(&mut text);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// `GET /history`: the last 15 minutes for the live page's charts, and the
/// last minute for its figures (JSON, [`crate::metrics::history::HistoryView`]).
async fn history(State(state): State<AppState>) -> impl IntoResponse {
    axum::Json(
        state
            .limiter
            .metrics()
            .history_view(std::time::Instant::now()),
    )
}

/// `GET /livez`: 200 while the process answers HTTP at all, whatever the
/// store or the rules do: the liveness probe, which must not restart a
/// pod for a Redis outage (answered by the failure policy, and recovered
/// from by itself). Readiness is `/healthcheck`.
async fn livez() -> &'static str {
    "OK"
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
            return bad_request(&crate::telemetry::error_chain(&err));
        }
    };
    let decision = state.limiter.should_rate_limit(&request).await;
    if decision.is_err() {
        metrics.record_service_error();
    }
    answer(decision, &request)
}

/// The one mapping from a decision to an HTTP answer: 200 OK, 429
/// OVER_LIMIT, 400 invalid request, 503 store failure (cause logged, not
/// sent).
fn answer(decision: Result<Response, LimitError>, request: &Request) -> HttpResponse {
    match decision {
        Ok(response) => {
            let status = match response.overall_code {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            };
            let body = JsonResponse::answering(response, request);
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

/// The `/rlconfig` lines of one rule, each the reference's text to the
/// letter: an unlimited rule is `unit=UNKNOWN` with the `requests_per_unit`
/// written, and `name`, `replaces`, `detailed_metric` and `value_to_metric`
/// show nowhere, as in the reference. Only rules the reference cannot have
/// say more, after its text: one line per limit of `rate_limits`, then
/// `unit_multiplier`, `algorithm` and `burst` where they are not the
/// reference's behaviour.
fn rlconfig_lines(text: &mut String, rule: &Rule) {
    let key = &rule.full_key;
    let flags = format!(
        ", shadow_mode: {}, quota_mode: {}",
        rule.shadow_mode, rule.quota_mode
    );
    // Writing to a String cannot fail.
    match &rule.policy {
        Policy::Limited(limits) => {
            for limit in limits {
                let unit = crate::descriptor::Unit::proto_name(limit.unit);
                let rpu = limit.requests_per_unit;
                let _ = write!(text, "{key}: unit={unit} requests_per_unit={rpu}{flags}");
                if limit.unit_multiplier.get() != 1 {
                    let _ = write!(text, ", unit_multiplier: {}", limit.unit_multiplier);
                }
                if limit.algorithm != Algorithm::FixedWindow {
                    let _ = write!(text, ", algorithm: {}", limit.algorithm.as_str());
                }
                if let Some(burst) = limit.burst {
                    let _ = write!(text, ", burst: {burst}");
                }
                text.push('\n');
            }
        }
        Policy::Unlimited { requests_per_unit } => {
            let _ = writeln!(
                text,
                "{key}: unit=UNKNOWN requests_per_unit={requests_per_unit}{flags}"
            );
        }
    }
}

#[cfg(test)]
mod tests;
