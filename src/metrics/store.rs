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
