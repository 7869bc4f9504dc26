//! `POST /explain` and `floodgate explain`: the body of `POST /json` in, why
//! each descriptor gets its answer out (the matcher's walk, the rule, what
//! decided, the status it would get now, each limit's state) and how
//! requests are shed now, counting nothing.

use super::json::{JsonError, JsonRequest, JsonStatus, code_name, duration_text};
use super::{AppState, bad_request};
use crate::config::{Algorithm, StepMatch};
use crate::descriptor::{Request, Unit};
use crate::limiter::{
    Explained, Explanation, FailureMode, LimitError, Limiter, Shedding, Step, TableRead, Verdict,
    WindowState,
};
use crate::store::StoreKind;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde::Serialize;

/// The answer of `/explain` in JSON (lowerCamelCase).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonExplanation {
    overall_code: &'static str,
    descriptors: Vec<JsonExplained>,
    shedding: JsonShedding,
}

/// The rule `shedding.rule` states.
const SHEDDING_RULE: &str = "a ShouldRateLimit call with a grpc-timeout is answered by \
FAILURE_MODE at once, counting nothing, when it arrives while a queue stands (the threads \
were busy 90 % of the last 25 ms and it did not fall by a quarter; once standing, until they \
have time to spare and it drains) and twice its wait behind the calls queued for a thread \
and a tenth of its grpc-timeout would not fit in its grpc-timeout, or the queue holds 240 \
calls per worker thread; or whatever their load when it holds twice that (queue); or when \
its grpc-timeout has passed by the time it is served, less a tenth of it, at most 50 ms, kept back to answer (deadline)";

/// How requests are shed now, and how many were.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonShedding {
    rule: &'static str,
    failure_mode: &'static str,
    /// What a shed request is answered: a gRPC status or an overall code.
    answer: &'static str,
    /// Shed since the process started, by reason.
    shed_total: JsonShedTotal,
}

#[derive(Debug, Serialize)]
struct JsonShedTotal {
    deadline: u64,
    queue: u64,
}

impl From<Shedding> for JsonShedding {
    fn from(shedding: Shedding) -> Self {
        let (failure_mode, answer) = match shedding.failure_mode {
            FailureMode::Error => ("error", "RESOURCE_EXHAUSTED"),
            FailureMode::Allow => ("allow", "OK"),
            FailureMode::Deny => ("deny", "OVER_LIMIT"),
        };
        Self {
            rule: SHEDDING_RULE,
            failure_mode,
            answer,
            shed_total: JsonShedTotal {
                deadline: shedding.deadline_total,
                queue: shedding.queue_total,
            },
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonExplained {
    steps: Vec<JsonStep>,
    rule: Option<String>,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    replaced_by: Option<String>,
    status: JsonStatus,
    windows: Vec<JsonWindow>,
    /// The limit table the rule reads: its name, key, the value looked up
    /// and the entry used, or `"rule default"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<JsonTableRead>,
}

#[derive(Debug, Serialize)]
struct JsonTableRead {
    table: String,
    key: String,
    value: Option<String>,
    entry: serde_json::Value,
}

impl From<TableRead> for JsonTableRead {
    fn from(read: TableRead) -> Self {
        let entry = read
            .entry
            .and_then(|entry| serde_json::to_value(entry).ok())
            .unwrap_or_else(|| serde_json::Value::from("rule default"));
        Self {
            table: read.table,
            key: read.key,
            value: read.value,
            entry,
        }
    }
}

#[derive(Debug, Serialize)]
struct JsonStep {
    key: String,
    value: String,
    matched: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pattern: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonWindow {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    requests_per_unit: u32,
    unit: &'static str,
    unit_multiplier: u32,
    algorithm: &'static str,
    shadow_mode: bool,
    count: u64,
    remaining: u64,
    over_limit: bool,
    duration_until_reset: String,
    /// The store counting it.
    store: String,
    /// A leased limit: the block this instance holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<JsonLease>,
}

/// The block of a leased limit (`lease: true`) this instance holds.
#[derive(Debug, Serialize)]
struct JsonLease {
    /// Unused hits of the block (0: none held).
    held: u64,
}

impl From<Step> for JsonStep {
    fn from(step: Step) -> Self {
        let (matched, pattern) = match step.matched {
            StepMatch::Exact => ("exact", None),
            StepMatch::Wildcard { pattern } => ("wildcard", Some(pattern)),
            StepMatch::Default => ("default", None),
            StepMatch::None => ("none", None),
        };
        Self {
            key: step.key,
            value: step.value,
            matched,
            pattern,
        }
    }
}

impl From<WindowState> for JsonWindow {
    fn from(window: WindowState) -> Self {
        let limit = window.limit;
        Self {
            name: limit.name.as_deref().map(str::to_owned),
            requests_per_unit: limit.requests_per_unit,
            unit: Unit::proto_name(limit.unit),
            unit_multiplier: limit.unit_multiplier.get(),
            algorithm: Algorithm::as_str(limit.algorithm),
            shadow_mode: limit.shadow_mode,
            count: window.count,
            remaining: window.remaining,
            over_limit: window.over_limit,
            duration_until_reset: duration_text(window.reset),
            store: window.store,
            lease: window.lease.map(|held| JsonLease { held }),
        }
    }
}

impl From<Explained> for JsonExplained {
    fn from(explained: Explained) -> Self {
        let (outcome, replaced_by) = match explained.verdict {
            Verdict::Limited => ("limited", None),
            Verdict::UnknownDomain => ("unknown_domain", None),
            Verdict::NoRule => ("no_rule", None),
            Verdict::Replaced { by } => ("replaced", Some(by)),
            Verdict::Unlimited => ("unlimited", None),
            Verdict::Override => ("override", None),
            Verdict::Shadow => ("shadow", None),
            Verdict::Cached => ("cached", None),
        };
        Self {
            steps: explained.steps.into_iter().map(JsonStep::from).collect(),
            rule: explained.rule,
            outcome,
            replaced_by,
            status: JsonStatus::from(explained.status),
            windows: explained
                .windows
                .into_iter()
                .map(JsonWindow::from)
                .collect(),
            table: explained.table.map(JsonTableRead::from),
        }
    }
}

impl From<Explanation> for JsonExplanation {
    fn from(explanation: Explanation) -> Self {
        Self {
            overall_code: code_name(explanation.overall_code),
            descriptors: explanation
                .descriptors
                .into_iter()
                .map(JsonExplained::from)
                .collect(),
            shedding: JsonShedding::from(explanation.shedding),
        }
    }
}

/// Why an explanation could not be given.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The body is not a valid `RateLimitRequest` (as `POST /json` reads it).
    #[error("bad request")]
    Request(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The request breaks a bound, or the store cannot be read.
    #[error("cannot explain the request")]
    Limit(#[from] LimitError),
    /// The answer cannot be written as JSON.
    #[error("cannot encode the explanation")]
    Encode(#[from] serde_json::Error),
}

fn parse(body: &[u8]) -> Result<Request, JsonError> {
    serde_json::from_slice::<JsonRequest>(body)
        .map_err(JsonError::Parse)
        .and_then(JsonRequest::into_request)
}

/// Explains `body` (a `POST /json` body) with `limiter`, as the JSON text
/// `POST /explain` answers (`floodgate explain` prints it too).
///
/// # Errors
///
/// [`ExplainError`] for a body that is not a valid request, or a store that
/// cannot be read.
pub async fn explain_json(
    limiter: &Limiter<StoreKind>,
    body: &[u8],
) -> Result<String, ExplainError> {
    let request = parse(body).map_err(|err| ExplainError::Request(Box::new(err)))?;
    let explanation = limiter.explain(&request).await?;
    Ok(serde_json::to_string(&JsonExplanation::from(explanation))?)
}

/// `POST /explain`: 200 with the explanation, 400 for a bad request, 503
/// when the store cannot be read. Counts nothing (not even in `/metrics`).
pub(super) async fn explain(State(state): State<AppState>, body: Body) -> HttpResponse {
    let Ok(body) = axum::body::to_bytes(body, state.max_body).await else {
        return bad_request(&format!(
            "request body is larger than the limit of {} bytes, or was cut short",
            state.max_body
        ));
    };
    match explain_json(&state.limiter, &body).await {
        Ok(json) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response(),
        Err(ExplainError::Request(err)) => bad_request(&crate::telemetry::error_chain(&*err)),
        Err(ExplainError::Limit(LimitError::Store(_))) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "rate limit store unavailable\n",
        )
            .into_response(),
        Err(ExplainError::Limit(invalid)) => bad_request(&invalid.to_string()),
        Err(ExplainError::Encode(err)) => {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "cannot encode json explanation"
            );
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shedding_states_the_rule_the_answer_and_the_count() {
        let json = |failure_mode| {
            serde_json::to_value(JsonShedding::from(Shedding {
                failure_mode,
                deadline_total: 7,
                queue_total: 3,
            }))
            .unwrap()
        };
        let error = json(FailureMode::Error);
        assert_eq!(error["failureMode"], "error");
        assert_eq!(error["answer"], "RESOURCE_EXHAUSTED");
        assert_eq!(error["shedTotal"]["deadline"], 7);
        assert_eq!(error["shedTotal"]["queue"], 3);
        assert!(
            error["rule"]
                .as_str()
                .is_some_and(|r| r.contains("grpc-timeout has passed")
                    && r.contains("counting nothing")
                    && r.contains("queued for a thread")
                    && r.contains("240 calls per worker")),
            "{error}"
        );
        assert_eq!(json(FailureMode::Allow)["answer"], "OK");
        assert_eq!(json(FailureMode::Deny)["answer"], "OVER_LIMIT");
    }
}
