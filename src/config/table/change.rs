//! Changes to the tables kept in this process: each checked against the
//! rules reading its table, written to the log, then swapped in whole.

use super::log::{Item, Line};
use super::{
    Action, Change, Index, MAX_KEY_BYTES, Resolved, Stored, TableEntry, TableError, TableSet,
    TableUse, Tables, Unkept, Writing, keep,
};
use crate::config::rule::is_table_name;
use std::collections::HashMap;
use std::sync::Arc;

impl Tables {
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
}

/// The distinct ways the rules read `table`, each with the first rule's
/// full key (for messages).
pub(super) fn uses_of(rules: &Index, table: &str) -> Vec<(String, Arc<TableUse>)> {
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
pub(super) fn resolve(
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
