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

mod entry;
mod log;
mod replay;
mod shared;

pub(crate) use entry::Resolved;
pub use entry::{TableEntry, Window};
pub(crate) use shared::{SharedChange, SharedCursor, SharedTable, shared_items};

use super::index::{Index, TableUse};
use super::rule::is_table_name;
use crate::metrics::Metrics;
use arc_swap::ArcSwap;
use log::{Item, Line, TableLog};
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

    /// Puts `entry` at `key` of `table`.
    ///
    /// # Errors
    /// [`TableError::Invalid`] naming each field at fault, a bad name or
    /// key, tables kept nowhere, or the log unwritable; nothing changed.
    pub fn put(
        &self,
        writing: &Writing<'_>,
        table: &str,
        key: &str,
        entry: TableEntry,
    ) -> Result<Change, TableError> {
        let items = vec![(key.to_owned(), Some(entry))];
        let (mut changes, _) = self.change(writing, table, Action::Put, items)?;
        changes.pop().ok_or(TableError::NotFound)
    }

    /// Deletes the entry at `key` of `table`.
    ///
    /// # Errors
    /// [`TableError::NotFound`], or as [`Tables::put`].
    pub fn delete(
        &self,
        writing: &Writing<'_>,
        table: &str,
        key: &str,
    ) -> Result<Change, TableError> {
        let items = vec![(key.to_owned(), None)];
        let (mut changes, _) = self.change(writing, table, Action::Delete, items)?;
        changes.pop().ok_or(TableError::NotFound)
    }

    /// Puts every `(key, entry)` of an import into `table`, or none.
    ///
    /// # Errors
    /// [`TableError::ImportLine`] for the first line at fault, or as
    /// [`Tables::put`].
    pub fn import(
        &self,
        writing: &Writing<'_>,
        table: &str,
        items: Vec<(String, TableEntry)>,
    ) -> Result<Vec<Change>, TableError> {
        let items = items
            .into_iter()
            .map(|(key, entry)| (key, Some(entry)))
            .collect();
        self.change(writing, table, Action::Import, items)
            .map(|(changes, _)| changes)
    }

    /// One change of `table` (`items`: entries put, `None` for a key
    /// deleted): checked, written durably, then swapped in. The changes,
    /// and every table as it is (a dry run: as it would be) after it.
    ///
    /// # Errors
    /// As [`Tables::put`], [`Tables::delete`] and [`Tables::import`].
    pub(crate) fn change(
        &self,
        writing: &Writing<'_>,
        table: &str,
        action: Action,
        items: Vec<(String, Option<TableEntry>)>,
    ) -> Result<(Vec<Change>, Arc<TableSet>), TableError> {
        if !is_table_name(table) {
            return Err(TableError::TableName);
        }
        let bad_key = |key: &str| key.is_empty() || key.len() > MAX_KEY_BYTES;
        if let Some(at) = items.iter().position(|(key, _)| bad_key(key)) {
            return Err(match action {
                Action::Import => TableError::ImportLine {
                    line: at.saturating_add(1),
                    problems: vec![format!("key: 1 to {MAX_KEY_BYTES} bytes")],
                },
                Action::Put | Action::Delete => TableError::Key,
            });
        }
        let mut writer = self.writer.lock();
        if !writing.dry_run {
            match writer.log {
                Err(Unkept::NoPath) => return Err(TableError::NoPath),
                Err(Unkept::Redis) => return Err(TableError::OnRedis),
                Err(Unkept::Memcache) => return Err(TableError::OnMemcache),
                Ok(_) => {}
            }
        }
        self.refresh_locked(writing.rules, writing.metrics);
        let uses = uses_of(writing.rules, table);
        let mut stored = Vec::with_capacity(items.len());
        // Equal entries of one change share one stored value, resolved
        // once: an import's tenants mostly share a few plans.
        let mut seen: HashMap<&TableEntry, Arc<Stored>> = HashMap::new();
        for (at, (key, entry)) in items.iter().enumerate() {
            let Some(entry) = entry else {
                stored.push((key, None, None));
                continue;
            };
            if let Some(same) = seen.get(entry) {
                stored.push((key, Some(entry), Some(Arc::clone(same))));
                continue;
            }
            let resolved = resolve(&uses, entry).map_err(|problems| match action {
                Action::Import => TableError::ImportLine {
                    line: at.saturating_add(1),
                    problems,
                },
                Action::Put | Action::Delete => TableError::Invalid(problems),
            })?;
            let one = Arc::new(Stored {
                entry: entry.clone(),
                resolved,
            });
            seen.insert(entry, Arc::clone(&one));
            stored.push((key, Some(entry), Some(one)));
        }
        let current = self.current.load_full();
        let old = current.tables.get(table).map(|t| (**t).clone());
        if action == Action::Delete
            && items
                .iter()
                .any(|(key, _)| old.as_ref().is_none_or(|t| !t.entries.contains_key(&**key)))
        {
            return Err(TableError::NotFound);
        }
        let mut new = old.unwrap_or_default();
        new.version = new.version.saturating_add(1);
        let mut changes = Vec::with_capacity(items.len());
        let mut seq = writer.seq;
        for (key, entry, resolved) in stored {
            let key_arc: Arc<str> = Arc::from(key.as_str());
            let previous = match resolved {
                Some(one) => new.entries.insert(key_arc, one),
                None => new.entries.remove(&key_arc),
            };
            seq = seq.saturating_add(1);
            changes.push(Change {
                time: writing.time.to_owned(),
                who: writing.who.to_owned(),
                action,
                table: table.to_owned(),
                key: key.clone(),
                previous: previous.map(|p| p.entry.clone()),
                entry: entry.cloned(),
                version: new.version,
                seq,
            });
        }
        let entries = new.entries.len() as u64;
        let mut tables = current.tables.clone();
        tables.insert(Arc::from(table), Arc::new(new));
        let set = Arc::new(TableSet {
            tables,
            rules: current.rules.clone(),
        });
        if writing.dry_run {
            return Ok((changes, set));
        }
        if let Ok(log) = &mut writer.log {
            log.append(&Line {
                time: writing.time.to_owned(),
                who: writing.who.to_owned(),
                action,
                table: table.to_owned(),
                version: changes.first().map_or(0, |c| c.version),
                items: items
                    .into_iter()
                    .map(|(key, entry)| Item { key, entry })
                    .collect(),
                base: false,
            })?;
        }
        writing
            .metrics
            .table
            .record(table, entries, action.as_str(), changes.len() as u64);
        self.current.store(Arc::clone(&set));
        writer.seq = seq;
        for change in &changes {
            keep(&mut writer.audit, change.clone());
        }
        Ok((changes, set))
    }

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

/// Appends `change` to the trail, dropping the oldest past [`AUDIT_KEPT`].
fn keep(audit: &mut VecDeque<Change>, change: Change) {
    if audit.len() >= AUDIT_KEPT {
        audit.pop_front();
    }
    audit.push_back(change);
}

/// The distinct ways the rules read `table`, each with the first rule's
/// full key (for messages).
fn uses_of(rules: &Index, table: &str) -> Vec<(String, Arc<TableUse>)> {
    let mut uses: Vec<(String, Arc<TableUse>)> = Vec::new();
    for rule in rules.rules() {
        if let Some(used) = rule.table.as_ref().filter(|t| &*t.name == table)
            && !uses.iter().any(|(_, u)| **u == **used)
        {
            uses.push((rule.full_key.clone(), Arc::clone(used)));
        }
    }
    uses
}

/// `entry` for every rule reading its table (checked alone when none
/// does); problems of one of several rules name that rule.
fn resolve(
    uses: &[(String, Arc<TableUse>)],
    entry: &TableEntry,
) -> Result<Vec<(Arc<TableUse>, Resolved)>, Vec<String>> {
    if uses.is_empty() {
        return entry.check_alone().map(|()| Vec::new());
    }
    let mut resolved = Vec::with_capacity(uses.len());
    let mut problems = Vec::new();
    for (rule, used) in uses {
        match entry.resolve(used) {
            Ok(one) => resolved.push((Arc::clone(used), one)),
            Err(more) if uses.len() == 1 => problems.extend(more),
            Err(more) => problems.extend(more.into_iter().map(|p| format!("rule {rule}: {p}"))),
        }
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests;
