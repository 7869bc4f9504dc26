//! Limit tables (extension): per-key limits kept as data and changed at
//! run time through the API; a rule with `table` reads the entry of the
//! value its `table_key` names instead of its own numbers.
//!
//! Owns: the entries, what each means for the rules reading its table
//! (resolved when it is put, or when the rules change: never per request),
//! the snapshot the request path reads (swapped whole, so a decision never
//! waits on a table), the durable log and the audit trail. Must not touch:
//! time (a change carries the time its caller read), HTTP, counters.
//!
//! Writers take one lock, in turn: validate, write the change durably,
//! then swap the snapshot. A put copies the changed table's map of
//! reference-counted entries (not the entries), so a put costs in the
//! size of that table.

mod change;
mod entry;
mod log;
mod read;
mod replay;
mod shared;

use change::{resolve, uses_of};
pub(crate) use entry::Resolved;
pub use entry::{TableEntry, Window};
pub use read::{AuditPage, KeyedEntry, Page, TableSummary};
pub(crate) use shared::{SharedChange, SharedCursor, SharedTable, shared_items};

use super::index::{Index, TableUse};
use crate::metrics::Metrics;
use arc_swap::ArcSwap;
use log::TableLog;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Weak};

/// Longest key of an entry, in bytes (a descriptor value).
pub(crate) const MAX_KEY_BYTES: usize = 1_024;
/// Most entries in one page of a table.
pub(crate) const MAX_PAGE: usize = 1_000;
/// Changes the audit trail keeps in memory (the log keeps them all).
pub(crate) const AUDIT_KEPT: usize = 100_000;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// One entry put (added or changed).
    Put,
    /// One entry deleted.
    Delete,
    /// Entries put by an import, all or none.
    Import,
}

impl Action {
    /// The name the audit trail and the `action` label show.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Put => "put",
            Self::Delete => "delete",
            Self::Import => "import",
        }
    }
}

/// Why tables cannot be changed in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unkept {
    /// Embedded store without `TABLES_PATH` or a snapshot path.
    NoPath,
    /// Kept in Redis: changes are made there and read back in order
    /// (`Tables::shared`), never through [`Tables::put`] and its kin.
    Redis,
    /// memcached keeps no tables.
    Memcache,
}

/// Why a table operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The entry breaks the checks of its rules; each problem names its
    /// field.
    #[error("invalid table entry")]
    Invalid(Vec<String>),
    /// One line of an import is wrong; nothing was imported.
    #[error("invalid import line {line}")]
    ImportLine {
        /// 1-based line number.
        line: usize,
        /// Its problems.
        problems: Vec<String>,
    },
    /// A table name outside the allowed characters or length.
    #[error("invalid table name (1 to 64 letters, digits, '_', '-' or '.')")]
    TableName,
    /// An empty key, or one over 1,024 bytes.
    #[error("invalid entry key (1 to 1024 bytes)")]
    Key,
    /// No such table or entry.
    #[error("no such entry")]
    NotFound,
    /// Embedded store with nowhere to keep tables durably.
    #[error(
        "tables are kept nowhere: set TABLES_PATH (--tables-path) or MEMORY_STORE_SNAPSHOT_PATH to change them"
    )]
    NoPath,
    /// Redis store: changes go to Redis, not to this process's copy.
    #[error("tables on Redis are changed in Redis, then read back")]
    OnRedis,
    /// Redis could not make or read the change; nothing changed (or, after
    /// a timeout, the change log says whether it was made).
    #[error("tables in Redis: {0}")]
    Shared(String),
    /// memcached: rules naming a table are refused at start.
    #[error("the memcache store keeps no tables")]
    OnMemcache,
    /// The change could not be made durable; nothing changed.
    #[error("cannot write the table log {path}")]
    Write {
        /// The log file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The log could not be opened or read.
    #[error("cannot read the table log {path}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of the log (not a torn last one) is unreadable.
    #[error("table log {path} line {line} is unreadable")]
    Line {
        /// The log file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// One entry as stored: as written, and what it means for each rule
/// reading its table.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) entry: TableEntry,
    resolved: Vec<(Arc<TableUse>, Resolved)>,
}

/// One table: its entries by key and its version (changes so far).
#[derive(Debug, Clone, Default)]
struct Table {
    version: u64,
    entries: BTreeMap<Arc<str>, Arc<Stored>>,
}

/// Every table at one moment: what the request path reads.
#[derive(Debug, Default)]
pub(crate) struct TableSet {
    tables: BTreeMap<Arc<str>, Arc<Table>>,
    /// The rules the entries were resolved for.
    rules: Weak<Index>,
}

/// The entry a rule reads for one value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'a> {
    /// The entry as written.
    pub(crate) entry: &'a TableEntry,
    /// What it means for the rule; `None` while the rule (changed since
    /// the entry was put) waits for [`Tables::refresh`], or when the entry
    /// does not fit it: the rule's own limits apply.
    pub(crate) resolved: Option<&'a Resolved>,
}

impl TableSet {
    /// The entry of `rule`'s table for `value`, if there is one.
    pub(crate) fn find(&self, rule: &Arc<TableUse>, value: &str) -> Option<Found<'_>> {
        let stored = self.tables.get(&rule.name)?.entries.get(value)?;
        let resolved = stored
            .resolved
            .iter()
            .find(|(used, _)| Arc::ptr_eq(used, rule) || **used == **rule)
            .map(|(_, resolved)| resolved);
        Some(Found {
            entry: &stored.entry,
            resolved,
        })
    }
}

/// A change as the API answers it and the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Who: a token's name or `trusted:<address>`.
    pub who: String,
    /// What.
    pub action: Action,
    /// The table.
    pub table: String,
    /// The entry's key.
    pub key: String,
    /// The entry before, if any.
    pub previous: Option<TableEntry>,
    /// The entry after (`None` once deleted).
    pub entry: Option<TableEntry>,
    /// The table's version after the change.
    pub version: u64,
    /// Position in the audit trail (its cursor).
    #[serde(skip)]
    pub seq: u64,
}

/// Who changes tables, when, against which rules, and whether for real.
#[derive(Debug, Clone, Copy)]
pub struct Writing<'a> {
    /// The rules in force (entries are checked against those reading the
    /// table).
    pub rules: &'a Arc<Index>,
    /// Where changes are counted.
    pub metrics: &'a Metrics,
    /// A token's name or `trusted:<address>`.
    pub who: &'a str,
    /// When, RFC 3339 UTC.
    pub time: &'a str,
    /// Check and answer, change nothing.
    pub dry_run: bool,
}

/// The writer's side: where changes go, and the trail kept in memory.
#[derive(Debug)]
struct Writer {
    log: Result<TableLog, Unkept>,
    audit: VecDeque<Change>,
    seq: u64,
    /// Where a shared copy stands in the store's change log.
    shared: SharedCursor,
}

/// Every limit table: read without a lock by decisions, changed in turn.
#[derive(Debug)]
pub struct Tables {
    current: ArcSwap<TableSet>,
    writer: Mutex<Writer>,
}

impl Default for Tables {
    fn default() -> Self {
        Self::unkept(Unkept::NoPath)
    }
}

impl Tables {
    /// No table, and changes refused for `reason`.
    pub fn unkept(reason: Unkept) -> Self {
        Self {
            current: ArcSwap::from_pointee(TableSet::default()),
            writer: Mutex::new(Writer {
                log: Err(reason),
                audit: VecDeque::new(),
                seq: 0,
                shared: SharedCursor {
                    seq: 0,
                    id: "0".to_owned(),
                    loaded: false,
                },
            }),
        }
    }

    /// The tables now, for one decision.
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<TableSet>> {
        self.current.load()
    }

    /// Resolves every entry for `rules` when they are not the rules the
    /// entries were resolved for (a reload): off the request path. An entry
    /// that does not fit a changed rule leaves that rule its own limits.
    pub fn refresh(&self, rules: &Arc<Index>, metrics: &Metrics) {
        let _writer = self.writer.lock();
        self.refresh_locked(rules, metrics);
    }

    fn refresh_locked(&self, rules: &Arc<Index>, metrics: &Metrics) {
        let current = self.current.load_full();
        if std::ptr::eq(current.rules.as_ptr(), Arc::as_ptr(rules)) {
            return;
        }
        let mut unfit = 0_usize;
        let tables = current
            .tables
            .iter()
            .map(|(name, table)| {
                let uses = uses_of(rules, name);
                // Entries shared before stay shared, resolved once.
                let mut done: HashMap<*const Stored, Arc<Stored>> = HashMap::new();
                let entries = table
                    .entries
                    .iter()
                    .map(|(key, stored)| {
                        if let Some(one) = done.get(&Arc::as_ptr(stored)) {
                            return (Arc::clone(key), Arc::clone(one));
                        }
                        let resolved = uses
                            .iter()
                            .filter_map(|(_, used)| match stored.entry.resolve(used) {
                                Ok(resolved) => Some((Arc::clone(used), resolved)),
                                Err(_) => {
                                    unfit = unfit.saturating_add(1);
                                    None
                                }
                            })
                            .collect();
                        let one = Arc::new(Stored {
                            entry: stored.entry.clone(),
                            resolved,
                        });
                        done.insert(Arc::as_ptr(stored), Arc::clone(&one));
                        (Arc::clone(key), one)
                    })
                    .collect();
                metrics
                    .table
                    .record(name, table.entries.len() as u64, Action::Put.as_str(), 0);
                let table = Table {
                    version: table.version,
                    entries,
                };
                (Arc::clone(name), Arc::new(table))
            })
            .collect();
        if unfit > 0 {
            tracing::warn!(
                tables.unfit = unfit,
                "table entries that do not fit their changed rules; those rules use their own limits for them"
            );
        }
        self.current.store(Arc::new(TableSet {
            tables,
            rules: Arc::downgrade(rules),
        }));
    }
}

/// Appends `change` to the trail, dropping the oldest past [`AUDIT_KEPT`].
fn keep(audit: &mut VecDeque<Change>, change: Change) {
    if audit.len() >= AUDIT_KEPT {
        audit.pop_front();
    }
    audit.push_back(change);
}

#[cfg(test)]
mod tests;
