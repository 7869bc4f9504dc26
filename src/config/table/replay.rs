//! The embedded store's tables read back from their log at start, and the
//! log compacted then when most of it is history: each table's entries as
//! they stood before the last [`AUDIT_KEPT`] changes, then those changes
//! as written, so the compacted log reads back to the same tables and the
//! same audit trail (previous entries included).

use super::log::{Line, TableLog};
use super::{
    AUDIT_KEPT, Change, SharedCursor, Stored, Table, TableEntry, TableError, TableSet, Tables,
    Writer, keep,
};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Weak};

/// Fewest items in a log worth compacting.
const COMPACT_FROM: usize = 10_000;

impl Tables {
    /// The tables kept in the log at `path` (created when missing), read
    /// back, the log compacted when it holds over twice the items a
    /// compacted one would; entries are resolved for the rules at the first
    /// [`Tables::refresh`].
    ///
    /// # Errors
    /// [`TableError::Log`] or [`TableError::Line`]; a compaction that
    /// cannot be written is logged and the log kept as it was.
    pub fn open(path: &Path) -> Result<Self, TableError> {
        Self::open_keeping(path, AUDIT_KEPT, COMPACT_FROM)
    }

    /// [`Tables::open`] keeping `kept` changes in the audit trail and
    /// compacting logs of `compact_from` items or more.
    pub(super) fn open_keeping(
        path: &Path,
        kept: usize,
        compact_from: usize,
    ) -> Result<Self, TableError> {
        let (mut log, lines) = TableLog::open(path)?;
        // The kept tail: the fewest last lines holding `kept` changes.
        let mut tail_items = 0_usize;
        let mut tail = lines.len();
        while tail > 0 && tail_items < kept {
            tail -= 1;
            tail_items = tail_items.saturating_add(lines.get(tail).map_or(0, |l| l.items.len()));
        }
        let mut tables: BTreeMap<Arc<str>, Table> = BTreeMap::new();
        let mut audit = VecDeque::new();
        let mut seq = 0_u64;
        let mut before_tail = None;
        let total: usize = lines.iter().map(|l| l.items.len()).sum();
        for (at, line) in lines.iter().enumerate() {
            if at == tail {
                before_tail = Some(tables.clone());
            }
            replay(&mut tables, line, &mut audit, &mut seq);
        }
        let live: usize = tables.values().map(|t| t.entries.len()).sum();
        if total >= compact_from && total > live.saturating_add(tail_items).saturating_mul(2) {
            let base = before_tail.unwrap_or_else(|| tables.clone());
            let mut compacted = base_lines(&base);
            compacted.extend(lines.into_iter().skip(tail));
            match TableLog::rewrite(path, &compacted) {
                Ok(rewritten) => {
                    tracing::info!(tables.path = %path.display(), tables.items_before = total, tables.items_after = compacted.iter().map(|l| l.items.len()).sum::<usize>(), "table log compacted");
                    log = rewritten;
                }
                Err(err) => tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "table log not compacted; it is kept as it was"
                ),
            }
        }
        let set = TableSet {
            tables: tables.into_iter().map(|(k, t)| (k, Arc::new(t))).collect(),
            rules: Weak::new(),
        };
        Ok(Self {
            current: ArcSwap::from_pointee(set),
            writer: Mutex::new(Writer {
                log: Ok(log),
                audit,
                seq,
                shared: SharedCursor::default(),
            }),
        })
    }
}

/// One line of the log laid over `tables`; a change (not a base) goes to
/// the audit trail with the entries it replaced.
fn replay(
    tables: &mut BTreeMap<Arc<str>, Table>,
    line: &Line,
    audit: &mut VecDeque<Change>,
    seq: &mut u64,
) {
    let table = tables.entry(Arc::from(line.table.as_str())).or_default();
    table.version = line.version;
    // Equal entries of one line share one stored value.
    let mut seen: HashMap<&TableEntry, Arc<Stored>> = HashMap::new();
    for item in &line.items {
        let key: Arc<str> = Arc::from(item.key.as_str());
        let previous = match &item.entry {
            Some(entry) => {
                let one = seen.entry(entry).or_insert_with(|| {
                    Arc::new(Stored {
                        entry: entry.clone(),
                        resolved: Vec::new(),
                    })
                });
                table.entries.insert(key, Arc::clone(one))
            }
            None => table.entries.remove(&key),
        };
        if line.base {
            continue;
        }
        *seq = seq.saturating_add(1);
        keep(
            audit,
            Change {
                time: line.time.clone(),
                who: line.who.clone(),
                action: line.action,
                table: line.table.clone(),
                key: item.key.clone(),
                previous: previous.map(|p| p.entry.clone()),
                entry: item.entry.clone(),
                version: line.version,
                seq: *seq,
            },
        );
    }
}

/// Each table's entries as base lines.
fn base_lines(tables: &BTreeMap<Arc<str>, Table>) -> Vec<Line> {
    tables
        .iter()
        .map(|(name, table)| Line {
            time: String::new(),
            who: String::new(),
            action: super::Action::Import,
            table: name.to_string(),
            version: table.version,
            items: table
                .entries
                .iter()
                .map(|(key, stored)| super::log::Item {
                    key: key.to_string(),
                    entry: Some(stored.entry.clone()),
                })
                .collect(),
            base: true,
        })
        .collect()
}
