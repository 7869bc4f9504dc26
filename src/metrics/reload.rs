//! Outcome counts of rule loads, owned by metrics and counted by whoever
//! loads rules (the directory watcher, the xDS client).

use std::sync::atomic::{AtomicU64, Ordering};

/// Outcome counts of reload attempts, for metrics (`config_load_success`,
/// `config_load_error`). Shared between the watcher and readers; lock-free.
#[derive(Debug, Default)]
pub struct ReloadStats {
    success: AtomicU64,
    error: AtomicU64,
}

impl ReloadStats {
    /// Counts the initial load as a success, as the reference does: a
    /// process that started on good rules reports `config_load_success` 1.
    pub fn record_initial_load(&self) {
        self.success.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a rule set stored by a source other than the directory
    /// watcher (xDS).
    pub fn record_success(&self) {
        self.success.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a rule set rejected by a source other than the directory
    /// watcher (xDS).
    pub fn record_error(&self) {
        self.error.fetch_add(1, Ordering::Relaxed);
    }

    /// Reloads that produced a new index and stored it.
    pub fn success(&self) -> u64 {
        self.success.load(Ordering::Relaxed)
    }

    /// Reloads rejected (invalid rules or unreadable directory); the previous
    /// index kept serving.
    pub fn error(&self) -> u64 {
        self.error.load(Ordering::Relaxed)
    }
}
