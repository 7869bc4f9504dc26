//! The limit-table API on the HTTP port: entries put, read and deleted,
//! tables listed and paged, imports, and the audit trail (JSON in and
//! out). Every handler takes the [`Caller`] the access layer put in the
//! request's extensions: who it is and whether it may change tables.
//!
//! Changes run on a blocking thread: each waits for its `fsync` (and an
//! import for its whole table) and must hold no async worker meanwhile.

mod import;
mod preview;

use super::AppState;
use crate::config::table::{MAX_KEY_BYTES, MAX_PAGE};
use crate::config::{Action, Change, TableEntry, TableError, Writing};
use crate::server::access::Caller;
use crate::server::shared_tables;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use import::import;
use preview::{dry_run_of, previewed};
use serde_json::{Value, json};

/// Largest entry body read.
const MAX_ENTRY_BODY: usize = 64 * 1024;

/// The table API's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tables", get(list))
        .route("/v1/tables/{table}", get(page))
        .route(
            "/v1/tables/{table}/entries/{key}",
            get(read).put(put).delete(delete),
        )
        .route("/v1/tables/{table}/import", post(import))
        .route("/v1/audit", get(audit))
}

/// A refused call: its status and JSON body (`{"error": ...}`).
#[derive(Debug)]
pub(crate) struct Refusal(StatusCode, Value);

impl IntoResponse for Refusal {
    fn into_response(self) -> HttpResponse {
        (self.0, Json(self.1)).into_response()
    }
}

/// A JSON error answer: `{"error": message}`.
fn error(status: StatusCode, message: &str) -> Refusal {
    Refusal(status, json!({ "error": message }))
}

/// A table error as an answer.
fn refused(err: &TableError) -> Refusal {
    let message = err.to_string();
    match err {
        TableError::Invalid(problems) => Refusal(
            StatusCode::BAD_REQUEST,
            json!({ "error": message, "problems": problems }),
        ),
        TableError::ImportLine { line, problems } => Refusal(
            StatusCode::BAD_REQUEST,
            json!({ "error": message, "line": line, "problems": problems }),
        ),
        TableError::TableName | TableError::Key => error(StatusCode::BAD_REQUEST, &message),
        TableError::NotFound => error(StatusCode::NOT_FOUND, &message),
        TableError::NoPath => error(StatusCode::CONFLICT, &message),
        TableError::OnMemcache => error(StatusCode::NOT_IMPLEMENTED, &message),
        TableError::OnRedis => error(StatusCode::INTERNAL_SERVER_ERROR, &message),
        TableError::Shared(_) => {
            tracing::warn!(
                error = err as &dyn std::error::Error,
                "table change not made in Redis"
            );
            error(StatusCode::SERVICE_UNAVAILABLE, &message)
        }
        TableError::Write { .. } => {
            tracing::warn!(
                error = err as &dyn std::error::Error,
                "table change not written"
            );
            error(StatusCode::SERVICE_UNAVAILABLE, &message)
        }
        TableError::Log { .. } | TableError::Line { .. } => {
            error(StatusCode::INTERNAL_SERVER_ERROR, &message)
        }
    }
}

/// The query string's pairs.
fn query(uri: &Uri) -> Vec<(String, String)> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// Reads `query` against the names `allowed`: unknown names are refused.
fn params<'q>(
    query: &'q [(String, String)],
    allowed: &[&str],
) -> Result<impl Fn(&str) -> Option<&'q str> + use<'q>, Refusal> {
    if let Some((name, _)) = query.iter().find(|(name, _)| !allowed.contains(&&**name)) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            &format!(
                "unknown query parameter '{name}' (allowed: {})",
                allowed.join(", ")
            ),
        ));
    }
    Ok(move |name: &str| {
        query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    })
}

/// `dry_run=true|false` (absent: false).
fn dry_run(value: Option<&str>) -> Result<bool, Refusal> {
    match value {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(error(StatusCode::BAD_REQUEST, "dry_run: true or false")),
    }
}

/// `limit=N`, 1 to [`MAX_PAGE`] (absent: [`MAX_PAGE`]).
fn page_limit(value: Option<&str>) -> Result<usize, Refusal> {
    match value.map(str::parse::<usize>) {
        None => Ok(MAX_PAGE),
        Some(Ok(n)) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("limit: a whole number from 1 to {MAX_PAGE}"),
        )),
    }
}

/// Reads a body of at most `limit` bytes.
async fn body(body: Body, limit: usize) -> Result<Bytes, Refusal> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("body over {limit} bytes or unreadable"),
        )
    })
}

/// Runs a change on a blocking thread with the caller, the rules now and
/// the time read from the limiter's clock.
async fn change<T: Send + 'static>(
    state: &AppState,
    caller: &Caller,
    dry_run: bool,
    work: impl FnOnce(&crate::config::Tables, &Writing<'_>) -> Result<T, TableError> + Send + 'static,
) -> Result<T, Refusal> {
    if !caller.may_write {
        return Err(error(
            StatusCode::FORBIDDEN,
            "changing tables needs a token with the write scope or a trusted network",
        ));
    }
    let limiter = state.limiter.clone();
    let who = caller.who.clone();
    let ran = tokio::task::spawn_blocking(move || {
        let rules = limiter.rules().load_full();
        let time = now_text(&limiter);
        let writing = Writing {
            rules: &rules,
            metrics: limiter.metrics(),
            who: &who,
            time: &time,
            dry_run,
        };
        work(limiter.tables(), &writing)
    })
    .await;
    match ran {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err(refused(&err)),
        Err(_) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "table change interrupted",
        )),
    }
}

/// The limiter's clock now, RFC 3339 UTC.
fn now_text(limiter: &crate::limiter::Limiter<crate::store::StoreKind>) -> String {
    let now_ms = i64::try_from(limiter.clock().now().0).unwrap_or(i64::MAX);
    jiff::Timestamp::from_millisecond(now_ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Makes one change of `table`: in this process (the embedded store), or
/// in Redis after checking it here against the rules (tables kept in
/// Redis), answered once durable there.
async fn commit(
    state: &AppState,
    caller: &Caller,
    table: String,
    action: Action,
    items: Vec<(String, Option<TableEntry>)>,
) -> Result<Vec<Change>, Refusal> {
    let Some(redis) = shared_tables::redis_of(&state.limiter) else {
        return change(state, caller, false, move |tables, writing| {
            tables
                .change(writing, &table, action, items)
                .map(|(changes, _)| changes)
        })
        .await;
    };
    let (checked_table, checked) = (table.clone(), items.clone());
    let checked = change(state, caller, true, move |tables, writing| {
        match tables.change(writing, &checked_table, action, checked) {
            // This copy may lag Redis's by a poll: Redis decides.
            Ok(_) | Err(TableError::NotFound) => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await;
    checked?;
    let time = now_text(&state.limiter);
    shared_tables::commit(
        redis,
        &state.limiter,
        (&caller.who, &time),
        &table,
        action,
        &items,
    )
    .await
    .map_err(|err| refused(&err))
}

/// One change as answered: `{"table", "key", "previous", "entry",
/// "version"}`.
fn change_json(change: &Change) -> Value {
    json!({
        "table": change.table,
        "key": change.key,
        "previous": change.previous,
        "entry": change.entry,
        "version": change.version,
    })
}

/// `PUT /v1/tables/{table}/entries/{key}[?dry_run=true]`.
async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((table, key)): Path<(String, String)>,
    uri: Uri,
    request: Body,
) -> Result<HttpResponse, Refusal> {
    let query = query(&uri);
    let dry = dry_run(params(&query, &["dry_run"])?("dry_run"))?;
    let bytes = body(request, MAX_ENTRY_BODY).await?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|err| error(StatusCode::BAD_REQUEST, &format!("bad JSON: {err}")))?;
    let entry = TableEntry::from_json(&value)
        .map_err(|problems| refused(&TableError::Invalid(problems)))?;
    if dry {
        let items = vec![(key, Some(entry))];
        let (changes, preview) = dry_run_of(&state, &caller, table, Action::Put, items).await?;
        return Ok(previewed(changes.first(), preview));
    }
    let items = vec![(key, Some(entry))];
    let changes = commit(&state, &caller, table, Action::Put, items).await?;
    let change = changes
        .first()
        .ok_or_else(|| refused(&TableError::NotFound))?;
    Ok(Json(change_json(change)).into_response())
}

/// `DELETE /v1/tables/{table}/entries/{key}[?dry_run=true]`.
async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((table, key)): Path<(String, String)>,
    uri: Uri,
) -> Result<HttpResponse, Refusal> {
    let query = query(&uri);
    let dry = dry_run(params(&query, &["dry_run"])?("dry_run"))?;
    if dry {
        let items = vec![(key, None)];
        let (changes, preview) = dry_run_of(&state, &caller, table, Action::Delete, items).await?;
        return Ok(previewed(changes.first(), preview));
    }
    let changes = commit(&state, &caller, table, Action::Delete, vec![(key, None)]).await?;
    let change = changes
        .first()
        .ok_or_else(|| refused(&TableError::NotFound))?;
    Ok(Json(change_json(change)).into_response())
}

/// `GET /v1/tables/{table}/entries/{key}`: `{"entry", "version"}`.
async fn read(
    State(state): State<AppState>,
    Path((table, key)): Path<(String, String)>,
) -> Result<HttpResponse, Refusal> {
    let (entry, version) = state
        .limiter
        .tables()
        .entry(&table, &key)
        .ok_or_else(|| refused(&TableError::NotFound))?;
    Ok(Json(json!({ "entry": entry, "version": version })).into_response())
}

/// `GET /v1/tables`: `[{"table", "entries", "version"}]`.
async fn list(State(state): State<AppState>) -> HttpResponse {
    Json(state.limiter.tables().list()).into_response()
}

/// `GET /v1/tables/{table}?after=KEY&limit=N`: entries sorted by key,
/// `{"table", "entries": [{"key", "entry"}], "next"}`.
async fn page(
    State(state): State<AppState>,
    Path(table): Path<String>,
    uri: Uri,
) -> Result<HttpResponse, Refusal> {
    let query = query(&uri);
    let get = params(&query, &["after", "limit"])?;
    let limit = page_limit(get("limit"))?;
    let page = state
        .limiter
        .tables()
        .page(&table, get("after"), limit)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "no such table"))?;
    Ok(Json(json!({
        "table": table,
        "entries": page.entries,
        "next": page.next,
    }))
    .into_response())
}

/// `GET /v1/audit?table=&key=&after=&limit=`: changes newest first,
/// `{"changes": [...], "next"}`.
async fn audit(State(state): State<AppState>, uri: Uri) -> Result<HttpResponse, Refusal> {
    let query = query(&uri);
    let get = params(&query, &["table", "key", "after", "limit"])?;
    let limit = page_limit(get("limit"))?;
    let after = match get("after").map(str::parse::<u64>) {
        None => None,
        Some(Ok(after)) => Some(after),
        Some(Err(_)) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "after: the next cursor of a previous page",
            ));
        }
    };
    let page = state
        .limiter
        .tables()
        .audit(get("table"), get("key"), after, limit);
    Ok(Json(json!({ "changes": page.changes, "next": page.next })).into_response())
}
