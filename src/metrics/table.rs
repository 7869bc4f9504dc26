//! Limit tables: entries per table and changes per table and action. The
//! label sets grow with table names only, which operators choose (and the
//! API bounds), never with request data.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The actions a table change can be, as the `action` label shows them.
pub(crate) const TABLE_ACTIONS: [&str; 3] = ["put", "delete", "import"];

#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    entries: u64,
    changes: [u64; 3],
}

/// Entries and changes of every table.
#[derive(Debug, Default)]
pub struct TableMetrics {
    // A lock, not atomics: written once per API change, read by scrapes;
    // never touched by a decision.
    tables: Mutex<BTreeMap<String, Figures>>,
    /// Milliseconds since this instance's copy of shared tables last
    /// matched the store's.
    lag_ms: std::sync::atomic::AtomicU64,
}

impl TableMetrics {
    /// `table` now holds `entries` entries after `changes` changes of
    /// `action` (one of [`TABLE_ACTIONS`]; 0 changes just sets the gauge).
    pub fn record(&self, table: &str, entries: u64, action: &str, changes: u64) {
        let mut tables = self.tables.lock();
        let figures = tables.entry(table.to_owned()).or_default();
        figures.entries = entries;
        if let Some(at) = TABLE_ACTIONS.iter().position(|a| *a == action)
            && let Some(count) = figures.changes.get_mut(at)
        {
            *count = count.saturating_add(changes);
        }
    }

    /// Time since this instance's copy of tables shared through Redis last
    /// matched Redis's (0 on the embedded store).
    pub fn set_lag(&self, lag: std::time::Duration) {
        let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
        self.lag_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Appends `ratelimit_table_lag_seconds`, `ratelimit_table_entries` and
    /// `ratelimit_table_changes_total` in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let tables = self.tables.lock().clone();
        let name = "ratelimit_table_lag_seconds";
        let lag = self.lag_ms.load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP {name} Time since this instance's copy of the limit tables kept in Redis last matched Redis's (0 on the embedded store).\n# TYPE {name} gauge\n{name} {}.{:03}",
            lag / 1000,
            lag % 1000
        );
        let name = "ratelimit_table_entries";
        let _ = writeln!(
            out,
            "# HELP {name} Entries of each limit table.\n# TYPE {name} gauge"
        );
        for (table, figures) in &tables {
            let _ = writeln!(out, "{name}{{table=\"{table}\"}} {}", figures.entries);
        }
        let name = "ratelimit_table_changes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Changes made to limit tables, by action (on Redis: every change this instance applied, whichever instance made it).\n# TYPE {name} counter"
        );
        for (table, figures) in &tables {
            for (action, count) in TABLE_ACTIONS.iter().zip(figures.changes) {
                let _ = writeln!(
                    out,
                    "{name}{{table=\"{table}\",action=\"{action}\"}} {count}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_entries_and_changes_per_table_and_action() {
        let metrics = TableMetrics::default();
        metrics.record("plans", 2, "put", 2);
        metrics.record("plans", 1, "delete", 1);
        metrics.record("plans", 5, "import", 4);
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains("ratelimit_table_entries{table=\"plans\"} 5\n"));
        for line in [
            "ratelimit_table_changes_total{table=\"plans\",action=\"put\"} 2\n",
            "ratelimit_table_changes_total{table=\"plans\",action=\"delete\"} 1\n",
            "ratelimit_table_changes_total{table=\"plans\",action=\"import\"} 4\n",
        ] {
            assert!(out.contains(line), "{line}");
        }
    }
}
