//! Reading the tables and their audit trail: one entry, the list of
//! tables, a page of a table, a page of changes.

use super::{Change, MAX_PAGE, TableEntry, Tables};
use serde::Serialize;

/// One table in the list of tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSummary {
    /// Its name.
    pub table: String,
    /// How many entries it holds.
    pub entries: usize,
    /// Changes made to it so far.
    pub version: u64,
}

/// One entry of a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyedEntry {
    /// The entry's key.
    pub key: String,
    /// The entry.
    pub entry: TableEntry,
}

/// A page of a table, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The entries.
    pub entries: Vec<KeyedEntry>,
    /// The key to ask `after` for the next page; `None` on the last.
    pub next: Option<String>,
}

/// A page of the audit trail, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditPage {
    /// The changes.
    pub changes: Vec<Change>,
    /// The cursor to ask `after` for older changes; `None` on the last.
    pub next: Option<u64>,
}

impl Tables {
    /// The entry at `key` of `table`, with the table's version.
    pub fn entry(&self, table: &str, key: &str) -> Option<(TableEntry, u64)> {
        let set = self.current.load();
        let table = set.tables.get(table)?;
        let stored = table.entries.get(key)?;
        Some((stored.entry.clone(), table.version))
    }

    /// Every table, by name.
    pub fn list(&self) -> Vec<TableSummary> {
        self.current
            .load()
            .tables
            .iter()
            .map(|(name, table)| TableSummary {
                table: name.to_string(),
                entries: table.entries.len(),
                version: table.version,
            })
            .collect()
    }

    /// Up to `limit` (at most 1,000) entries of `table` with keys
    /// after `after`, sorted by key; `None` when there is no such table.
    pub fn page(&self, table: &str, after: Option<&str>, limit: usize) -> Option<Page> {
        let set = self.current.load();
        let table = set.tables.get(table)?;
        let limit = limit.clamp(1, MAX_PAGE);
        let from = match after {
            Some(after) => std::ops::Bound::Excluded(after),
            None => std::ops::Bound::Unbounded,
        };
        let mut entries: Vec<KeyedEntry> = table
            .entries
            .range::<str, _>((from, std::ops::Bound::Unbounded))
            .take(limit.saturating_add(1))
            .map(|(key, stored)| KeyedEntry {
                key: key.to_string(),
                entry: stored.entry.clone(),
            })
            .collect();
        let next = if entries.len() > limit {
            entries.truncate(limit);
            entries.last().map(|e| e.key.clone())
        } else {
            None
        };
        Some(Page { entries, next })
    }

    /// Up to `limit` (at most 1,000) changes, newest first, older
    /// than the cursor `after`, of `table` and `key` when given.
    pub fn audit(
        &self,
        table: Option<&str>,
        key: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> AuditPage {
        let limit = limit.clamp(1, MAX_PAGE);
        let writer = self.writer.lock();
        let mut changes: Vec<Change> = writer
            .audit
            .iter()
            .rev()
            .filter(|c| after.is_none_or(|after| c.seq < after))
            .filter(|c| table.is_none_or(|t| c.table == t))
            .filter(|c| key.is_none_or(|k| c.key == k))
            .take(limit.saturating_add(1))
            .cloned()
            .collect();
        let next = if changes.len() > limit {
            changes.truncate(limit);
            changes.last().map(|c| c.seq)
        } else {
            None
        };
        AuditPage { changes, next }
    }
}
