//! Dry runs of table changes: the change as it would be made, and what
//! each rule reading the table would show for the keys touched.

use super::{AppState, Caller, Change, Refusal, TableError, change, change_json, refused};
use crate::config::{Action, TableEntry};
use axum::Json;
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::{Value, json};

/// Most keys a dry run previews the windows of.
const MAX_PREVIEW_KEYS: usize = 100;

/// A dry run of `action` on `items`: the changes it would make, and per
/// rule reading the table and key touched (the first
/// [`MAX_PREVIEW_KEYS`]) what its windows would show under the new entry.
pub(super) async fn dry_run_of(
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

/// A dry run's answer: the change with `"dry_run": true` and `"preview"`.
pub(super) fn previewed(change: Option<&Change>, preview: Value) -> HttpResponse {
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
