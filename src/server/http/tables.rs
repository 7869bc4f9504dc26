//! The limit-table API on the HTTP port: entries put, read and deleted,
//! tables listed and paged, imports, and the audit trail (JSON in and
//! out). Every handler takes the [`Caller`] the access layer put in the
//! request's extensions: who it is and whether it may change tables.
//!
//! Changes run on a blocking thread: each waits for its `fsync` (and an
//! import for its whole table) and must hold no async worker meanwhile.

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
use serde_json::{Value, json};

/// Most lines in one import.
pub(crate) const MAX_IMPORT_LINES: usize = 1_000_000;
/// Largest entry body read.
const MAX_ENTRY_BODY: usize = 64 * 1024;
/// Largest import body read: a million lines of up to about 256 bytes.
const MAX_IMPORT_BODY: usize = 256 * 1024 * 1024;

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

/// Most keys a dry run previews the windows of.
const MAX_PREVIEW_KEYS: usize = 100;

/// A dry run of `action` on `items`: the changes it would make, and per
/// rule reading the table and key touched (the first
/// [`MAX_PREVIEW_KEYS`]) what its windows would show under the new entry.
async fn dry_run_of(
    state: &AppState,
    caller: &Caller,
    table: String,
    action: Action,
    items: Vec<(String, Option<TableEntry>)>,
) -> Result<(Vec<Change>, Value), Refusal> {
    let (changes, set) = change(state, caller, true, move |tables, writing| {
        tables.change(writing, &table, action, items)
    })
    .await?;
    let rules = state.limiter.rules().load_full();
    let mut preview = Vec::new();
    for change in changes.iter().take(MAX_PREVIEW_KEYS) {
        for rule in rules.rules() {
            let Some(used) = rule.table.as_ref().filter(|t| *t.name == *change.table) else {
                continue;
            };
            // The descriptor the rule's path names for this key: every
            // other level needs a value of its own.
            let pairs: Option<Vec<(String, String)>> = rule
                .path
                .iter()
                .map(|step| {
                    if *step.key == *used.key {
                        Some((step.key.clone(), change.key.clone()))
                    } else {
                        let value = step.value.clone().filter(|v| !v.contains('*'));
                        value.map(|value| (step.key.clone(), value))
                    }
                })
                .collect();
            let windows = match pairs {
                None => json!("the rule's other levels need values a key does not give"),
                Some(pairs) => {
                    let request = crate::descriptor::Request {
                        domain: rule.domain.clone(),
                        descriptors: vec![crate::descriptor::Descriptor::from_pairs(pairs)],
                        hits_addend: 0,
                    };
                    match state.limiter.explain_under(&request, &set).await {
                        Ok(explained) => explained
                            .descriptors
                            .into_iter()
                            .flat_map(|d| d.windows)
                            .map(|w| {
                                json!({
                                    "requests_per_unit": w.limit.requests_per_unit,
                                    "count": w.count,
                                    "remaining": w.remaining,
                                    "over_limit": w.over_limit,
                                })
                            })
                            .collect(),
                        Err(_) => json!("the store could not be read"),
                    }
                }
            };
            preview.push(json!({
                "rule": rule.full_key,
                "key": change.key,
                "windows": windows,
            }));
        }
    }
    Ok((changes, Value::Array(preview)))
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

/// A dry run's answer: the change with `"dry_run": true` and `"preview"`.
fn previewed(change: Option<&Change>, preview: Value) -> HttpResponse {
    let Some(change) = change else {
        return refused(&TableError::NotFound).into_response();
    };
    let mut body = change_json(change);
    if let Some(map) = body.as_object_mut() {
        map.insert("dry_run".to_owned(), Value::Bool(true));
        map.insert("preview".to_owned(), preview);
    }
    Json(body).into_response()
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

/// `POST /v1/tables/{table}/import[?dry_run=true]`: one `{"key",
/// "entry"}` a line, all or nothing: `{"table", "imported", "version"}`.
async fn import(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(table): Path<String>,
    uri: Uri,
    request: Body,
) -> Result<HttpResponse, Refusal> {
    let query = query(&uri);
    let dry = dry_run(params(&query, &["dry_run"])?("dry_run"))?;
    let bytes = body(request, MAX_IMPORT_BODY).await?;
    let items = import_lines(&bytes).map_err(|err| refused(&err))?;
    let (changes, preview) = if dry {
        let items = items.into_iter().map(|(k, e)| (k, Some(e))).collect();
        let (changes, preview) = dry_run_of(&state, &caller, table, Action::Import, items).await?;
        (changes, Some(preview))
    } else {
        let items = items.into_iter().map(|(k, e)| (k, Some(e))).collect();
        let changes = commit(&state, &caller, table, Action::Import, items).await?;
        (changes, None)
    };
    let mut body = json!({
        "table": changes.first().map(|c| c.table.clone()),
        "imported": changes.len(),
        "version": changes.first().map(|c| c.version),
    });
    if let Some(preview) = preview
        && let Some(map) = body.as_object_mut()
    {
        map.insert("dry_run".to_owned(), Value::Bool(true));
        map.insert("preview".to_owned(), preview);
    }
    Ok(Json(body).into_response())
}

/// The lines of an import, each `{"key": "...", "entry": {...}}` (blank
/// lines skipped, still counted).
fn import_lines(bytes: &[u8]) -> Result<Vec<(String, TableEntry)>, TableError> {
    let bad = |line: usize, problem: String| TableError::ImportLine {
        line,
        problems: vec![problem],
    };
    let mut items = Vec::new();
    for (at, text) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = at.saturating_add(1);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if items.len() >= MAX_IMPORT_LINES {
            return Err(bad(
                line,
                format!("an import holds at most {MAX_IMPORT_LINES} entries"),
            ));
        }
        let value: Value =
            serde_json::from_slice(text).map_err(|err| bad(line, format!("bad JSON: {err}")))?;
        let Some(map) = value.as_object() else {
            return Err(bad(
                line,
                "expected {\"key\": ..., \"entry\": ...}".to_owned(),
            ));
        };
        if let Some(field) = map.keys().find(|k| *k != "key" && *k != "entry") {
            return Err(bad(line, format!("{field}: unknown field (key, entry)")));
        }
        let key = match map.get("key").and_then(Value::as_str) {
            Some(key) if !key.is_empty() && key.len() <= MAX_KEY_BYTES => key.to_owned(),
            _ => {
                return Err(bad(
                    line,
                    format!("key: a string of 1 to {MAX_KEY_BYTES} bytes"),
                ));
            }
        };
        let entry = TableEntry::from_json(map.get("entry").unwrap_or(&Value::Null))
            .map_err(|problems| TableError::ImportLine { line, problems })?;
        items.push((key, entry));
    }
    Ok(items)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_lines_name_the_line_at_fault() {
        let lines = b"{\"key\": \"a\", \"entry\": {\"requests_per_unit\": 1}}\n\n{\"key\": \"b\", \"entry\": {\"unit\": \"hour\"}}\n";
        let Err(TableError::ImportLine { line, problems }) = import_lines(lines) else {
            panic!("refused");
        };
        assert_eq!(
            (line, problems),
            (
                3,
                vec![
                    "entry.requests_per_unit: missing (0 is allowed and blocks every request)"
                        .to_owned()
                ]
            )
        );
        let Err(TableError::ImportLine { line, problems }) =
            import_lines(b"{\"key\": \"a\", \"value\": 1}")
        else {
            panic!("refused");
        };
        assert_eq!(
            (line, problems),
            (1, vec!["value: unknown field (key, entry)".to_owned()])
        );
        assert_eq!(import_lines(b"\n").unwrap(), []);
    }
}
