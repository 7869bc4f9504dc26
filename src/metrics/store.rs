//! What the stores report for `/metrics`: plain figures, filled by the
//! store that owns them and rendered here, so metrics imports no store.

/// What the memory store holds, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes charged against the budget.
    pub bytes: usize,
    /// Counters held.
    pub counters: usize,
    /// Counters evicted to stay within the budget since start.
    pub evictions: u64,
    /// The budget.
    pub max_bytes: usize,
    /// Snapshot writes, when snapshots are on.
    pub snapshot: Option<SnapshotStats>,
}

/// Snapshot writes since start, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotStats {
    /// Snapshots written.
    pub written: u64,
    /// Snapshot writes that failed.
    pub failed: u64,
    /// Size of the last snapshot written, bytes.
    pub bytes: u64,
    /// When the last snapshot was written (0: never).
    pub last_written: crate::clock::UnixMillis,
}

/// Script calls sent and the requests they carried, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Script calls sent to Redis by the lanes.
    pub calls: u64,
    /// Requests those calls carried (requests per call = batching).
    pub requests: u64,
}

/// What one store did for decisions, by name (`ratelimit_store_*{store}`).
#[derive(Debug, Default)]
pub struct NamedStoreStats {
    /// Round trips of decisions to it.
    pub calls: std::sync::atomic::AtomicU64,
    /// Round trips that failed.
    pub errors: std::sync::atomic::AtomicU64,
    /// Limits answered by its `failure_mode` instead.
    pub failure_mode_answers: std::sync::atomic::AtomicU64,
    /// Time in those round trips, µs.
    pub round_trip_us: std::sync::atomic::AtomicU64,
    /// Its leases' block fetches: the last measured round trip, µs (what
    /// sizes their blocks).
    pub lease_round_trip_us: std::sync::atomic::AtomicU64,
    /// A named store answered its last health check (every second).
    pub up: std::sync::atomic::AtomicBool,
}

/// Every store's [`NamedStoreStats`]: the process-wide store's, and the
/// named ones' once the limiter knows them.
#[derive(Debug, Default)]
pub struct StoreStatsSet {
    default: NamedStoreStats,
    named: std::sync::OnceLock<Box<[Named]>>,
}

/// A named store's figures, with its name.
type Named = (std::sync::Arc<str>, NamedStoreStats);

impl StoreStatsSet {
    /// Names the stores at places 1, 2, …: once (later calls are ignored).
    pub fn name_all(&self, names: impl Iterator<Item = std::sync::Arc<str>>) {
        let _ = self.named.set(
            names
                .map(|name| (name, NamedStoreStats::default()))
                .collect(),
        );
    }

    /// The figures of the store at place `at` (0: the process-wide store).
    pub fn get(&self, at: u8) -> Option<&NamedStoreStats> {
        match at {
            0 => Some(&self.default),
            _ => self
                .named
                .get()
                .and_then(|all| all.get(usize::from(at) - 1))
                .map(|(_, stats)| stats),
        }
    }

    /// Every store's figures with its name, the process-wide store first.
    pub fn all(&self) -> impl Iterator<Item = (&str, &NamedStoreStats)> {
        std::iter::once(("default", &self.default)).chain(
            self.named
                .get()
                .into_iter()
                .flat_map(|all| all.iter().map(|(name, stats)| (&**name, stats))),
        )
    }

    /// Appends `ratelimit_store_*{store}` in the Prometheus text format;
    /// `up` says whether each store (by name) answers now.
    pub fn render(&self, out: &mut String, up: &dyn Fn(&str) -> bool) {
        use std::fmt::Write as _;
        use std::sync::atomic::Ordering::Relaxed;
        type Pick = fn(&NamedStoreStats) -> f64;
        let families: [(&str, &str, &str, Pick); 6] = [
            (
                "ratelimit_store_calls_total",
                "counter",
                "Decision round trips to the store.",
                |s| s.calls.load(Relaxed) as f64,
            ),
            (
                "ratelimit_store_errors_total",
                "counter",
                "Decision round trips to the store that failed.",
                |s| s.errors.load(Relaxed) as f64,
            ),
            (
                "ratelimit_store_failure_mode_answers_total",
                "counter",
                "Store failures answered by the store's failure_mode.",
                |s| s.failure_mode_answers.load(Relaxed) as f64,
            ),
            (
                "ratelimit_store_round_trip_seconds_total",
                "counter",
                "Time spent in decision round trips to the store.",
                |s| s.round_trip_us.load(Relaxed) as f64 / 1e6,
            ),
            (
                "ratelimit_store_lease_round_trip_seconds",
                "gauge",
                "The last measured round trip of the store's lease block fetches (what sizes the blocks).",
                |s| s.lease_round_trip_us.load(Relaxed) as f64 / 1e6,
            ),
            (
                "ratelimit_store_up",
                "gauge",
                "1 when the store answers (connected), else 0.",
                |_| f64::NAN,
            ),
        ];
        for (name, kind, help, pick) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (store, stats) in self.all() {
                let value = if name == "ratelimit_store_up" {
                    f64::from(u8::from(up(store)))
                } else {
                    pick(stats)
                };
                let _ = writeln!(out, "{name}{{store=\"{store}\"}} {value}");
            }
        }
    }
}
