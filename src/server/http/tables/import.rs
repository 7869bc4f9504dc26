//! `POST /v1/tables/{table}/import`: one `{"key", "entry"}` a line, all or
//! nothing.

use super::{
    AppState, Caller, MAX_KEY_BYTES, Refusal, TableError, body, commit, dry_run, dry_run_of,
    params, query, refused,
};
use crate::config::{Action, TableEntry};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::{Extension, Json};
use serde_json::{Value, json};

/// Most lines in one import.
const MAX_IMPORT_LINES: usize = 1_000_000;
/// Largest import body read: a million lines of up to about 256 bytes.
const MAX_IMPORT_BODY: usize = 256 * 1024 * 1024;

/// `POST /v1/tables/{table}/import[?dry_run=true]`: one `{"key",
/// "entry"}` a line, all or nothing: `{"table", "imported", "version"}`.
pub(super) async fn import(
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
