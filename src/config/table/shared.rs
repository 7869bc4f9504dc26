//! Tables shared through a store (Redis): the in-memory side. Changes are
//! made in the store, each with its place in one change log (`seq`); every
//! instance, the writer included, applies them to its own copy in that
//! order, so each copy equals the store's once it has applied the log's
//! last change. A copy that misses changes (the log was trimmed past it, or
//! the store lost its data) is loaded again whole.

use super::log::{Item, Line};
use super::{
    AUDIT_KEPT, Action, Change, Index, Metrics, Stored, Table, TableEntry, TableError, TableSet,
    Tables, keep, resolve, uses_of,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Bits of an audit cursor below a shared change's `seq`: the item's
/// place in its change (an import holds at most a million items).
const ITEM_BITS: u32 = 20;

/// One change as the shared log keeps it.
#[derive(Debug, Clone)]
pub(crate) struct SharedChange {
    /// Its place in the change log (1 first).
    pub(crate) seq: u64,
    /// The log's own id of it (the cursor to read after).
    pub(crate) id: String,
    line: Line,
    previous: Vec<Option<TableEntry>>,
}

/// Where this copy stands in the shared log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SharedCursor {
    /// The last change applied (0: none).
    pub(crate) seq: u64,
    /// Its id in the log ("0": before the first).
    pub(crate) id: String,
    /// Whether the tables were loaded from the store at all.
    pub(crate) loaded: bool,
}

/// A table read whole from the store: name, version and entries (JSON).
pub(crate) type SharedTable = (String, u64, Vec<(String, String)>);

/// Each key of a change with its entry's JSON (`None`: delete the key).
pub(crate) type SharedItems = Vec<(String, Option<String>)>;

impl SharedChange {
    /// A change from the log's fields (`field(name)`): `table`, `action`,
    /// `who`, `time`, `version`, `items` (JSON) and `previous` (entries
    /// joined by newlines, empty for none).
    ///
    /// # Errors
    /// [`TableError::Shared`] naming what cannot be read.
    pub(crate) fn parse<'a>(
        seq: u64,
        id: String,
        field: impl Fn(&str) -> &'a str,
    ) -> Result<Self, TableError> {
        let bad = |what: &str| TableError::Shared(format!("change {seq}: {what}"));
        let action = match field("action") {
            "put" => Action::Put,
            "delete" => Action::Delete,
            "import" => Action::Import,
            _ => return Err(bad("unknown action")),
        };
        let version = field("version")
            .parse()
            .map_err(|_| bad("version not a number"))?;
        let items: Vec<Item> =
            serde_json::from_str(field("items")).map_err(|_| bad("items unreadable"))?;
        let line = Line {
            time: field("time").to_owned(),
            who: field("who").to_owned(),
            action,
            table: field("table").to_owned(),
            version,
            items,
            base: false,
        };
        Self::with_previous(seq, id, line, field("previous"))
    }

    /// The change `who` just made in the store at `time`, at `seq` and the
    /// table's `version`, replacing `previous` (one entry's JSON or `None`
    /// per item): built from what was sent, only the previous entries read.
    ///
    /// # Errors
    /// [`TableError::Shared`] when a previous entry cannot be read.
    pub(crate) fn made(
        (seq, version): (u64, u64),
        (who, time): (&str, &str),
        table: &str,
        action: Action,
        items: &[(String, Option<TableEntry>)],
        previous: &[Option<String>],
    ) -> Result<Self, TableError> {
        let line = Line {
            time: time.to_owned(),
            who: who.to_owned(),
            action,
            table: table.to_owned(),
            version,
            items: items
                .iter()
                .map(|(key, entry)| Item {
                    key: key.clone(),
                    entry: entry.clone(),
                })
                .collect(),
            base: false,
        };
        let joined = previous
            .iter()
            .map(|p| p.as_deref().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        Self::with_previous(seq, String::new(), line, &joined)
    }

    /// `line` with its previous entries read from `previous` (entries
    /// joined by newlines, empty for none), one per item.
    fn with_previous(seq: u64, id: String, line: Line, previous: &str) -> Result<Self, TableError> {
        let bad = |what: &str| TableError::Shared(format!("change {seq}: {what}"));
        let previous = previous
            .split('\n')
            .map(|text| {
                if text.is_empty() {
                    return Ok(None);
                }
                serde_json::from_str(text).map(Some)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("previous entries unreadable"))?;
        if previous.len() != line.items.len() {
            return Err(bad("previous entries miscounted"));
        }
        Ok(Self {
            seq,
            id,
            line,
            previous,
        })
    }

    /// How many keys it changed.
    pub(crate) fn len(&self) -> usize {
        self.line.items.len()
    }

    /// The changes it made, one per key, as the API answers them.
    pub(crate) fn changes(&self) -> Vec<Change> {
        self.line
            .items
            .iter()
            .zip(&self.previous)
            .enumerate()
            .map(|(at, (item, previous))| Change {
                time: self.line.time.clone(),
                who: self.line.who.clone(),
                action: self.line.action,
                table: self.line.table.clone(),
                key: item.key.clone(),
                previous: previous.clone(),
                entry: item.entry.clone(),
                version: self.line.version,
                seq: (self.seq << ITEM_BITS) | at as u64,
            })
            .collect()
    }
}

/// The items of a change as the shared log keeps them (JSON), and each
/// key with its entry's JSON (`None` to delete it) for the store.
///
/// # Errors
/// [`TableError::Shared`] when an entry cannot be written as JSON.
pub(crate) fn shared_items(
    items: &[(String, Option<TableEntry>)],
) -> Result<(String, SharedItems), TableError> {
    let unwritable = |_| TableError::Shared("an entry cannot be written as JSON".to_owned());
    let log: Vec<Item> = items
        .iter()
        .map(|(key, entry)| Item {
            key: key.clone(),
            entry: entry.clone(),
        })
        .collect();
    let json = serde_json::to_string(&log).map_err(unwritable)?;
    let pairs = items
        .iter()
        .map(|(key, entry)| {
            let entry = entry
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(unwritable)?;
            Ok((key.clone(), entry))
        })
        .collect::<Result<_, TableError>>()?;
    Ok((json, pairs))
}

impl Tables {
    /// Tables shared through a store: empty until loaded from it;
    /// changes go to the store, never through [`Tables::put`] and its kin.
    pub fn shared() -> Self {
        Self::unkept(super::Unkept::Redis)
    }

    /// Whether decisions may read these tables: always, but for tables
    /// shared through a store before their first load.
    pub fn ready(&self) -> bool {
        let writer = self.writer.lock();
        writer.shared.loaded || !matches!(writer.log, Err(super::Unkept::Redis))
    }

    /// Where this copy stands in the shared log.
    pub(crate) fn shared_cursor(&self) -> SharedCursor {
        self.writer.lock().shared.clone()
    }

    /// Applies `changes` (read from the log after [`Tables::shared_cursor`],
    /// oldest first), skipping those already applied. `false` when one is
    /// not the next change (the log lost some): the copy must be loaded
    /// again whole.
    pub(crate) fn apply_shared(
        &self,
        changes: &[SharedChange],
        rules: &Arc<Index>,
        metrics: &Metrics,
    ) -> bool {
        let mut writer = self.writer.lock();
        self.refresh_locked(rules, metrics);
        let mut set: Option<TableSet> = None;
        for change in changes {
            if change.seq <= writer.shared.seq {
                continue;
            }
            if change.seq != writer.shared.seq.saturating_add(1) {
                break;
            }
            let current = set.get_or_insert_with(|| {
                let now = self.current.load();
                TableSet {
                    tables: now.tables.clone(),
                    rules: now.rules.clone(),
                }
            });
            apply_line(current, &change.line, rules, metrics);
            for one in change.changes() {
                keep(&mut writer.audit, one);
            }
            writer.shared = SharedCursor {
                seq: change.seq,
                id: change.id.clone(),
                loaded: true,
            };
        }
        let complete = changes
            .last()
            .is_none_or(|last| last.seq <= writer.shared.seq);
        if let Some(set) = set {
            self.current.store(Arc::new(set));
        }
        complete
    }

    /// Replaces this copy with the store's, read whole: `tables` as they
    /// were at or after `cursor` (changes after it are applied next by
    /// [`Tables::apply_shared`]), and `audit`, the log's last changes up
    /// to `cursor`, newest first. Entries that cannot be read are skipped
    /// and counted in the answer.
    pub(crate) fn load_shared(
        &self,
        cursor: SharedCursor,
        tables: Vec<SharedTable>,
        audit: &[SharedChange],
        rules: &Arc<Index>,
        metrics: &Metrics,
    ) -> usize {
        let mut unreadable = 0_usize;
        let mut set = BTreeMap::new();
        for (name, version, entries) in tables {
            let uses = uses_of(rules, &name);
            let mut table = Table {
                version,
                entries: BTreeMap::new(),
            };
            // Equal entries share one stored value, read and resolved once.
            let mut seen: HashMap<String, Arc<Stored>> = HashMap::new();
            for (key, json) in entries {
                let one = match seen.get(&json) {
                    Some(one) => Arc::clone(one),
                    None => {
                        let Ok(entry) = serde_json::from_str::<TableEntry>(&json) else {
                            unreadable = unreadable.saturating_add(1);
                            continue;
                        };
                        let resolved = resolve(&uses, &entry).unwrap_or_default();
                        let one = Arc::new(Stored { entry, resolved });
                        seen.insert(json, Arc::clone(&one));
                        one
                    }
                };
                table.entries.insert(Arc::from(key.as_str()), one);
            }
            metrics
                .table
                .record(&name, table.entries.len() as u64, Action::Put.as_str(), 0);
            set.insert(Arc::from(name.as_str()), Arc::new(table));
        }
        let mut writer = self.writer.lock();
        writer.audit.clear();
        let (mut kept, mut items) = (Vec::new(), 0_usize);
        for change in audit.iter().filter(|c| c.seq <= cursor.seq) {
            kept.push(change);
            items = items.saturating_add(change.len());
            if items >= AUDIT_KEPT {
                break;
            }
        }
        for change in kept.into_iter().rev() {
            for one in change.changes() {
                keep(&mut writer.audit, one);
            }
        }
        writer.shared = SharedCursor {
            loaded: true,
            ..cursor
        };
        self.current.store(Arc::new(TableSet {
            tables: set,
            rules: Arc::downgrade(rules),
        }));
        unreadable
    }
}

/// `line` laid over `set`: its table's entries put or removed (each
/// resolved for the rules; one that does not fit them leaves the rules
/// their own limits) and its version taken.
fn apply_line(set: &mut TableSet, line: &Line, rules: &Arc<Index>, metrics: &Metrics) {
    let uses = uses_of(rules, &line.table);
    let name: Arc<str> = Arc::from(line.table.as_str());
    // Copied once per batch: the batch's own copy is changed in place.
    let table = Arc::make_mut(set.tables.entry(name).or_default());
    table.version = line.version;
    // Equal entries of one change share one stored value, resolved once.
    let mut seen: HashMap<&TableEntry, Arc<Stored>> = HashMap::new();
    for item in &line.items {
        let key: Arc<str> = Arc::from(item.key.as_str());
        match &item.entry {
            Some(entry) => {
                let one = seen.entry(entry).or_insert_with(|| {
                    let resolved = resolve(&uses, entry).unwrap_or_default();
                    Arc::new(Stored {
                        entry: entry.clone(),
                        resolved,
                    })
                });
                table.entries.insert(key, Arc::clone(one));
            }
            None => {
                table.entries.remove(&key);
            }
        }
    }
    metrics.table.record(
        &line.table,
        table.entries.len() as u64,
        line.action.as_str(),
        line.items.len() as u64,
    );
}
