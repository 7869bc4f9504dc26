//! Rule reload: poll the rule directory, and when anything in it changed,
//! load and validate it off the request path, then swap the shared index
//! atomically.
//!
//! Owns: change detection ([`Fingerprint`]), the reload loop and its counters
//! ([`ReloadStats`]). Must not touch: process settings, counters of hits,
//! stores or the network. Requests keep reading whichever index is stored;
//! counters live in the store keyed by descriptor, so the counts of rules
//! that did not change survive a reload.
//!
//! # Why polling
//!
//! Polling needs no dependency and sees every way a rule directory changes
//! in production: files written in place, files replaced by rename, and
//! Kubernetes ConfigMap volumes, whose files are symlinks into a `..data`
//! symlink that is swapped atomically to a new timestamped directory. A
//! fingerprint covers each entry's name, type, symlink target, length,
//! modification time and a hash of its content (so a same-size rewrite
//! within one mtime tick is still seen), plus the directory's resolved path
//! (a swap of a `RUNTIME_ROOT` symlink).
//!
//! A bad rule set is never stored: the last good index keeps serving, every
//! issue is logged at `error` with its file and path, and the failure is
//! counted.

use super::index::Index;
use super::validation::{ConfigError, LoadOptions, load_dir};
use arc_swap::ArcSwap;
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::metrics::ReloadStats;

/// How often the rule directory is checked by default: a change is live
/// well within one second.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What one reload attempt did.
#[derive(Debug)]
pub(crate) enum Reload {
    /// Nothing changed since the last check.
    Unchanged,
    /// A new index was stored.
    Stored(Arc<Index>),
    /// The new rules were rejected; the previous index is still stored.
    // Logged by `check` itself; carried for callers that want it (tests).
    Rejected(#[allow(dead_code)] ConfigError),
}

/// A snapshot of everything in the rule directory that a change would
/// alter. Only compared with earlier snapshots of the same process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// The directory with every symlink resolved, or the error kind.
    resolved: Result<PathBuf, std::io::ErrorKind>,
    /// One line per entry, sorted by name.
    entries: Result<Vec<EntryPrint>, std::io::ErrorKind>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct EntryPrint {
    name: std::ffi::OsString,
    symlink_target: Option<PathBuf>,
    /// Type, length and mtime of what the entry resolves to.
    kind: Option<(bool, u64, Option<SystemTime>)>,
    /// Content hash of regular files. `DefaultHasher` is fine here: the
    /// value is only compared within one process.
    content: Option<u64>,
}

impl Fingerprint {
    /// Takes a snapshot of `dir`. Never fails: I/O errors are part of the
    /// snapshot, so their appearance or disappearance is a change too.
    pub fn of(dir: &Path) -> Self {
        Self {
            resolved: std::fs::canonicalize(dir).map_err(|err| err.kind()),
            entries: entries(dir).map_err(|err| err.kind()),
        }
    }
}

fn entries(dir: &Path) -> std::io::Result<Vec<EntryPrint>> {
    let mut prints = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let symlink_target = std::fs::read_link(&path).ok();
        // `metadata` follows symlinks; a dangling one has no kind.
        let meta = std::fs::metadata(&path).ok();
        let content = match &meta {
            Some(meta) if meta.is_file() => std::fs::read(&path).ok().map(|bytes| {
                let mut hasher = std::hash::DefaultHasher::new();
                bytes.hash(&mut hasher);
                hasher.finish()
            }),
            _ => None,
        };
        prints.push(EntryPrint {
            name: entry.file_name(),
            symlink_target,
            kind: meta.map(|m| (m.is_file(), m.len(), m.modified().ok())),
            content,
        });
    }
    prints.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(prints)
}

/// Reloads one rule directory into a shared index when it changes.
#[derive(Debug)]
pub(crate) struct Watcher {
    dir: PathBuf,
    options: LoadOptions,
    rules: Arc<ArcSwap<Index>>,
    stats: Arc<ReloadStats>,
    last: Fingerprint,
}

impl Watcher {
    /// A watcher of `dir` storing into `rules`. `baseline` is the
    /// directory as it was when `rules` was loaded (take it before loading):
    /// only a difference from it reloads.
    pub(crate) fn new(
        dir: PathBuf,
        options: LoadOptions,
        rules: Arc<ArcSwap<Index>>,
        stats: Arc<ReloadStats>,
        baseline: Fingerprint,
    ) -> Self {
        let last = baseline;
        Self {
            dir,
            options,
            rules,
            stats,
            last,
        }
    }

    /// The counters this watcher updates.
    #[cfg(test)]
    pub(crate) fn stats(&self) -> &Arc<ReloadStats> {
        &self.stats
    }

    /// Checks the directory once and reloads it if it changed. Blocking
    /// file I/O: call it off the async workers.
    ///
    /// The fingerprint is taken before loading, so a write racing with the
    /// load changes the next fingerprint and is picked up on the next check.
    pub(crate) fn check(&mut self) -> Reload {
        let now = Fingerprint::of(&self.dir);
        if now == self.last {
            return Reload::Unchanged;
        }
        self.last = now;
        match load_dir(&self.dir, &self.options) {
            Ok(index) => {
                let index = Arc::new(index);
                self.rules.store(index.clone());
                self.stats.record_success();
                info!(
                    config.dir = %self.dir.display(),
                    domains = index.summaries().len(),
                    "rules reloaded"
                );
                Reload::Stored(index)
            }
            Err(err) => {
                self.stats.record_error();
                log_rejected(&self.dir, &err);
                Reload::Rejected(err)
            }
        }
    }

    /// Checks every `interval` until `shutdown` is cancelled, calling
    /// `on_store` with each newly stored index. Each check runs on the
    /// blocking pool and is awaited to completion, so no check outlives the
    /// loop.
    pub(crate) async fn run<F, Fut>(
        mut self,
        interval: Duration,
        shutdown: CancellationToken,
        mut on_store: F,
    ) where
        F: FnMut(Arc<Index>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let checked = tokio::task::spawn_blocking(move || {
                let reload = self.check();
                (self, reload)
            })
            .await;
            let reload = match checked {
                Ok((watcher, reload)) => {
                    self = watcher;
                    reload
                }
                Err(err) => {
                    // The check panicked (a bug): the watcher is gone, the
                    // last stored index keeps serving.
                    error!(
                        error = &err as &dyn std::error::Error,
                        "rule watcher stopped"
                    );
                    break;
                }
            };
            if let Reload::Stored(index) = reload {
                on_store(index).await;
            }
        }
    }
}

fn log_rejected(dir: &Path, err: &ConfigError) {
    match err {
        ConfigError::Invalid(issues) => {
            for issue in issues {
                error!(
                    config.file = issue.file(),
                    config.path = issue.path(),
                    config.issue = %issue,
                    "invalid rule file; keeping the last good rules"
                );
            }
        }
        ConfigError::ReadDir { .. } => {
            error!(
                error = err as &dyn std::error::Error,
                config.dir = %dir.display(),
                "cannot read rule directory; keeping the last good rules"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";

    fn watcher(dir: &Path) -> Watcher {
        let baseline = Fingerprint::of(dir);
        let rules = Arc::new(ArcSwap::from_pointee(
            load_dir(dir, &LoadOptions::default()).unwrap(),
        ));
        Watcher::new(
            dir.to_path_buf(),
            LoadOptions::default(),
            rules,
            Arc::default(),
            baseline,
        )
    }

    #[test]
    fn unchanged_directory_does_not_reload() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), RULES).unwrap();
        let mut w = watcher(dir.path());
        assert!(matches!(w.check(), Reload::Unchanged));
        assert_eq!((w.stats().success(), w.stats().error()), (0, 0));
    }

    #[test]
    fn same_size_rewrite_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, RULES).unwrap();
        let mut w = watcher(dir.path());
        std::fs::write(&file, RULES.replace("minute", "second")).unwrap();
        let Reload::Stored(index) = w.check() else {
            panic!("expected a reload");
        };
        assert!(index.has_domain("a"));
        assert_eq!(w.stats().success(), 1);
    }

    #[test]
    fn invalid_rules_keep_the_stored_index_and_count_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), RULES).unwrap();
        let mut w = watcher(dir.path());
        let before = w.rules.load_full();
        std::fs::write(dir.path().join("b.yaml"), "domain: b\nbogus: 1\n").unwrap();
        let Reload::Rejected(err) = w.check() else {
            panic!("expected a rejection");
        };
        assert_eq!(err.issues()[0].file(), "b.yaml");
        assert!(Arc::ptr_eq(&before, &w.rules.load_full()));
        assert_eq!((w.stats().success(), w.stats().error()), (0, 1));
        // Not retried until something changes again.
        assert!(matches!(w.check(), Reload::Unchanged));
    }

    #[test]
    fn missing_directory_is_a_rejection_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let rules_dir = dir.path().join("rules");
        std::fs::create_dir(&rules_dir).unwrap();
        let mut w = watcher(&rules_dir);
        std::fs::remove_dir(&rules_dir).unwrap();
        assert!(matches!(
            w.check(),
            Reload::Rejected(ConfigError::ReadDir { .. })
        ));
        assert_eq!(w.stats().error(), 1);
    }
}
