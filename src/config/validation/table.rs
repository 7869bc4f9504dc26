//! `table` and `table_key` (extension) on `rate_limit` and `rate_limits`.

use super::*;
use crate::config::rule::{MAX_TABLE_NAME, is_table_name};

/// `table` and `table_key` (extension) on a descriptor's `rate_limit`, or
/// on its `rate_limits` as a whole (every item naming the same table and
/// key): not on an unlimited or concurrency limit, nor on a store that
/// keeps no tables. `None` when absent or wrong (wrong is reported).
pub(super) fn check_table(
    check: &mut FileCheck<'_>,
    descriptor: &model::Descriptor,
    rule_key: &str,
    place: &Place<'_>,
) -> Option<Arc<TableUse>> {
    let (items, several) = match (&descriptor.rate_limit, &descriptor.rate_limits) {
        (Some(one), None) => (std::slice::from_ref(one), false),
        (None, Some(many)) => (many.as_slice(), true),
        _ => return None,
    };
    let first = items.first()?;
    let field = |index: usize| {
        if several {
            place.render(&format!(".rate_limits[{index}]"))
        } else {
            place.render("")
        }
    };
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let here = field(index);
        if item.table.is_none() {
            if item.table_key.is_some() {
                check.issue(&here, "table_key needs table");
                ok = false;
            }
            continue;
        }
        if item.unlimited == Some(true) {
            check.issue(&here, "table is not valid on an unlimited limit");
            ok = false;
        }
        if item.algorithm.as_deref() == Some(Algorithm::Concurrency.as_str()) {
            check.issue(&here, "table is not valid with algorithm concurrency");
            ok = false;
        }
        if item.table_key.as_deref() == Some("") {
            check.issue(&here, "table_key must not be empty");
            ok = false;
        }
        if let Some(name) = item.table.as_deref()
            && !is_table_name(name)
        {
            check.issue(
                &here,
                format!(
                    "invalid table name '{name}' (1 to {MAX_TABLE_NAME} letters, digits, '_', '-' or '.')"
                ),
            );
            ok = false;
        }
        if check.fixed_windows_only {
            check.issue(
                &here,
                "table needs Redis or the embedded store: the memcache store keeps no tables",
            );
            ok = false;
        }
    }
    let named = items.iter().any(|item| item.table.is_some());
    if several
        && named
        && items
            .iter()
            .any(|item| item.table != first.table || item.table_key != first.table_key)
    {
        check.issue(
            &place.render(""),
            "all rate_limits of a descriptor must name the same table and table_key (an entry replaces them as a whole)",
        );
        ok = false;
    }
    let name = first.table.as_deref().filter(|_| ok)?;
    let template = items
        .iter()
        .map(|item| model::RateLimit {
            table: None,
            table_key: None,
            ..item.clone()
        })
        .collect();
    let stores = check
        .stores
        .iter()
        .filter(|s| {
            items
                .iter()
                .any(|item| item.store.as_deref() == Some(&s.name))
        })
        .cloned()
        .collect();
    Some(Arc::new(TableUse {
        name: Arc::from(name),
        key: Arc::from(first.table_key.as_deref().unwrap_or(rule_key)),
        template,
        several,
        stores,
    }))
}
