//! The durable place of limit tables on the embedded store: one
//! append-only file of JSON lines, each change written and `fsync`ed before
//! the API answers. The same lines are the audit trail; replaying them at
//! start rebuilds every table.
//!
//! A line is one change as a whole (an import is one line), so a crash
//! leaves a change either on disk entirely or not at all: a torn last line
//! (no newline) is cut off when the file is opened.

use super::{Action, TableEntry, TableError};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

/// One change of one table, as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Line {
    pub(super) time: String,
    pub(super) who: String,
    pub(super) action: Action,
    pub(super) table: String,
    pub(super) version: u64,
    /// The keys changed: an entry put, or `None` for a key deleted.
    pub(super) items: Vec<Item>,
    /// A compacted table's entries as they stood: laid in, not a change
    /// (the audit trail skips it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) base: bool,
}

/// One key of a change.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Item {
    pub(super) key: String,
    pub(super) entry: Option<TableEntry>,
}

/// The open log.
#[derive(Debug)]
pub(super) struct TableLog {
    file: File,
    path: PathBuf,
}

impl TableLog {
    /// Opens (or creates) the log at `path` and reads its lines back.
    ///
    /// # Errors
    /// [`TableError::Log`] when the file cannot be opened, read or
    /// repaired, or a line other than a torn last one is unreadable.
    pub(super) fn open(path: &Path) -> Result<(Self, Vec<Line>), TableError> {
        let failed = |source| TableError::Log {
            path: path.to_path_buf(),
            source,
        };
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(failed)?;
        if created {
            // The new name must survive a crash too.
            sync_dir(path).map_err(failed)?;
        }
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(failed)?;
        let whole = text.rfind('\n').map_or(0, |at| at.saturating_add(1));
        if whole < text.len() {
            // A torn last line: the change it held was never answered.
            file.set_len(whole as u64).map_err(failed)?;
            file.sync_data().map_err(failed)?;
            tracing::warn!(tables.path = %path.display(), "table log ended in a torn line; cut off");
        }
        let mut lines = Vec::new();
        for (number, text) in text.get(..whole).unwrap_or_default().lines().enumerate() {
            if text.is_empty() {
                continue;
            }
            let line = serde_json::from_str(text).map_err(|source| TableError::Line {
                path: path.to_path_buf(),
                line: number.saturating_add(1),
                source,
            })?;
            lines.push(line);
        }
        let log = Self {
            file,
            path: path.to_path_buf(),
        };
        Ok((log, lines))
    }

    /// Replaces the log at `path` with `lines`, whole or not at all: written
    /// beside it, synced, renamed over it, the directory synced.
    ///
    /// # Errors
    /// [`TableError::Write`]; the old log is then left as it was.
    pub(super) fn rewrite(path: &Path, lines: &[Line]) -> Result<Self, TableError> {
        let failed = |source| TableError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut name = path.as_os_str().to_owned();
        name.push(".compacting");
        let temp = PathBuf::from(name);
        let mut file = File::create(&temp).map_err(failed)?;
        for line in lines {
            let mut text = serde_json::to_string(line).map_err(|err| failed(err.into()))?;
            text.push('\n');
            file.write_all(text.as_bytes()).map_err(failed)?;
        }
        file.sync_all().map_err(failed)?;
        std::fs::rename(&temp, path).map_err(failed)?;
        sync_dir(path).map_err(failed)?;
        let file = OpenOptions::new().append(true).open(path).map_err(failed)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Appends `line` and waits until it is on disk.
    ///
    /// # Errors
    /// [`TableError::Write`]; the line may then be partly written, which
    /// the next open cuts off (the change was not answered as made).
    pub(super) fn append(&mut self, line: &Line) -> Result<(), TableError> {
        let mut text = serde_json::to_string(line).map_err(|err| TableError::Write {
            path: self.path.clone(),
            source: err.into(),
        })?;
        text.push('\n');
        let written = self
            .file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.sync_data());
        written.map_err(|source| TableError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

/// `fsync` of the directory holding `path`, so a new file's name is durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) => File::open(dir)?.sync_all(),
        None => File::open(".")?.sync_all(),
    }
}
