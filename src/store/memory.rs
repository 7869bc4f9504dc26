//! The embedded store: counters in process memory, sharded so concurrent
//! requests on different descriptors rarely meet on a lock.
//!
//! Each operation runs under its shard's lock, so check-and-count is atomic:
//! N concurrent callers on a limit of L never see more than L admissions.
//! Counters whose window has ended are reclaimed by [`MemoryStore::sweep`]
//! (run periodically by the server) and reset in place when touched again,
//! so memory tracks the descriptors active in the current windows only.

use super::{Batch, CounterId, Store, StoreError};
use crate::algorithm::fixed_window::{Counter, Tally};
use crate::clock::UnixMillis;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

/// Number of lock shards; a power of two well above the core counts we run
/// on keeps contention negligible without wasting memory on empty maps.
const SHARDS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SlotKey {
    id: CounterId,
    window_secs: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    counter: Counter,
    expires_at: UnixMillis,
}

type Shard = Mutex<HashMap<SlotKey, Slot>>;

/// In-process counter store; clones share the same counters.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hasher: RandomState,
    shards: Box<[Shard]>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Self {
            inner: Arc::new(Inner {
                hasher: RandomState::new(),
                shards,
            }),
        }
    }

    fn shard(&self, key: &SlotKey) -> &Shard {
        let hash = self.inner.hasher.hash_one(key);
        // SHARDS is a power of two, so masking picks a uniform shard; the
        // masked value is < SHARDS and always fits in usize.
        let index = usize::try_from(hash & (SHARDS as u64 - 1)).unwrap_or(0);
        &self.inner.shards[index]
    }

    /// Applies every operation of `batch` at `now`. Synchronous because no
    /// lock is ever held across an await.
    pub fn apply(&self, batch: Batch, now: UnixMillis) -> Vec<Tally> {
        let mut tallies = Vec::with_capacity(batch.ops.len());
        for op in batch.ops {
            let key = SlotKey {
                id: op.id,
                window_secs: op.window.window_secs(),
            };
            let mut shard = self.shard(&key).lock();
            let slot = shard.entry(key).or_insert(Slot {
                counter: Counter::default(),
                expires_at: now,
            });
            let tally = op.window.apply(&mut slot.counter, now, op.hits);
            slot.expires_at = op.window.expires_at(now);
            tallies.push(tally);
        }
        tallies
    }

    /// Removes every counter whose window ended at or before `now`; returns
    /// how many were removed.
    pub fn sweep(&self, now: UnixMillis) -> usize {
        let mut removed = 0;
        for shard in &self.inner.shards {
            let mut map = shard.lock();
            let before = map.len();
            map.retain(|_, slot| slot.expires_at > now);
            removed += before - map.len();
        }
        removed
    }

    /// Number of live counters (for metrics and tests).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MemoryStore {
    async fn execute(&self, batch: Batch, now: UnixMillis) -> Result<Vec<Tally>, StoreError> {
        Ok(self.apply(batch, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::FixedWindow;
    use crate::store::Op;

    fn op(id: &str, window_secs: u64, hits: u64) -> Op {
        Op {
            id: CounterId::new("d", [("k", id)]),
            window: FixedWindow::new(window_secs),
            hits,
        }
    }

    #[test]
    fn counts_per_counter_and_window_length() {
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(1_000);
        let t = store.apply(
            Batch {
                ops: vec![
                    op("a", 60, 3),
                    op("a", 60, 2),
                    op("b", 60, 1),
                    op("a", 1, 1),
                ],
            },
            now,
        );
        let after: Vec<u64> = t.iter().map(|t| t.after).collect();
        assert_eq!(after, vec![3, 5, 1, 1]);
    }

    #[test]
    fn sweep_reclaims_ended_windows_only() {
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(1_200);
        store.apply(
            Batch {
                ops: vec![op("a", 1, 1), op("b", 60, 1)],
            },
            now,
        );
        assert_eq!(store.len(), 2);
        assert_eq!(store.sweep(UnixMillis::from_secs(1_201)), 1);
        assert_eq!(store.len(), 1);
        assert_eq!(store.sweep(UnixMillis::from_secs(1_259)), 0);
        assert_eq!(store.sweep(UnixMillis::from_secs(1_260)), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn many_distinct_descriptors_do_not_accumulate() {
        let store = MemoryStore::new();
        for second in 0..50u64 {
            let now = UnixMillis::from_secs(10_000 + second);
            let ops = (0..100)
                .map(|i| op(&format!("{second}-{i}"), 1, 1))
                .collect();
            store.apply(Batch { ops }, now);
            store.sweep(now);
            assert!(store.len() <= 100);
        }
    }

    #[test]
    fn concurrent_hits_are_never_lost() {
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(5);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..1_000 {
                        store.apply(
                            Batch {
                                ops: vec![op("hot", 60, 1)],
                            },
                            now,
                        );
                    }
                });
            }
        });
        let t = store.apply(
            Batch {
                ops: vec![op("hot", 60, 0)],
            },
            now,
        );
        assert_eq!(t[0].after, 8_000);
    }
}
