//! The embedded store: counters in process memory, sharded so concurrent
//! requests on different descriptors rarely meet on a lock.
//!
//! Each operation runs under its shard's lock, so check-and-count is atomic:
//! N concurrent callers on a limit of L never see more than L admissions.
//! Counters whose window has ended are reclaimed by [`MemoryStore::sweep`]
//! (run periodically by the server) and reset in place when touched again,
//! so memory tracks the descriptors active in the current windows only.
//!
//! Memory is bounded by a byte budget (`--memory-store-max-bytes`), split
//! evenly across the shards and counting each counter's key, state and
//! bookkeeping. A shard over its share evicts its least recently used
//! counters: an evicted descriptor starts again from a fresh window the
//! next time it is seen, so under memory pressure the coldest callers may
//! be admitted more than their limit while hot ones keep exact counts.

use super::{Batch, CounterId, Op, Store, StoreError};
use crate::algorithm::fixed_window::{Counter, is_over_limit};
use crate::algorithm::gcra::Gcra;
use crate::algorithm::sliding_log::Log;
use crate::algorithm::sliding_window::Buckets;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use lru::LruCache;
use parking_lot::Mutex;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Number of lock shards; a power of two well above the core counts we run
/// on keeps contention negligible without wasting memory on empty maps.
const SHARDS: usize = 64;

/// Which state of a counter identity: each algorithm (and window shape) has
/// its own, as each has its own Redis key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// One counter per window, as in Redis (the start is in the key), so a
    /// clock step back into an earlier window finds that window's count.
    Fixed {
        window_secs: u64,
        start_secs: u64,
    },
    Sliding,
    Log,
    Gcra {
        interval_us: u64,
        burst: u64,
    },
}

impl Kind {
    fn of(spec: &Spec, now: UnixMillis) -> Self {
        match spec {
            Spec::FixedWindow { window, .. } => Self::Fixed {
                window_secs: window.window_secs(),
                start_secs: window.window_start(now),
            },
            Spec::SlidingWindow(_) => Self::Sliding,
            Spec::SlidingLog(_) => Self::Log,
            Spec::Gcra(g) => Self::Gcra {
                interval_us: g.interval_us(),
                burst: g.burst(),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SlotKey {
    id: CounterId,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum State {
    Fixed(Counter),
    Sliding(Buckets),
    Log(Log),
    /// Theoretical arrival time, µs.
    Gcra(Option<u64>),
}

impl State {
    fn new(spec: &Spec) -> Self {
        match spec {
            Spec::FixedWindow { .. } => Self::Fixed(Counter::default()),
            Spec::SlidingWindow(_) => Self::Sliding(Buckets::default()),
            Spec::SlidingLog(_) => Self::Log(Log::default()),
            Spec::Gcra(_) => Self::Gcra(None),
        }
    }
}

impl State {
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Sliding(buckets) => buckets.heap_bytes(),
            Self::Log(log) => log.heap_bytes(),
            Self::Fixed(_) | Self::Gcra(_) => 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    state: State,
    expires_at: UnixMillis,
    /// What this counter is charged against the budget.
    bytes: usize,
}

/// Per-entry bookkeeping of the LRU map beyond key and value (hash table
/// slot, list links, allocation headers), charged to every counter.
const ENTRY_OVERHEAD: usize = 64;

/// The bytes one counter holds: its key's text, its state's heap and the
/// fixed size of an entry.
fn charge(key_len: usize, state: &State) -> usize {
    key_len
        + state.heap_bytes()
        + std::mem::size_of::<SlotKey>()
        + std::mem::size_of::<Slot>()
        + ENTRY_OVERHEAD
}

#[derive(Debug)]
struct ShardMap {
    map: LruCache<SlotKey, Slot, RandomState>,
    bytes: usize,
}

type Shard = Mutex<ShardMap>;

/// Default byte budget: half the 256 MiB the Kubernetes manifest gives the
/// pod, leaving room for the rest of the process.
pub const DEFAULT_MAX_BYTES: usize = 128 << 20;

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
}

/// In-process counter store; clones share the same counters.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hasher: RandomState,
    shards: Box<[Shard]>,
    /// Budget of each shard.
    shard_budget: usize,
    max_bytes: usize,
    bytes: AtomicUsize,
    evictions: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store with the default budget.
    pub fn new() -> Self {
        Self::with_max_bytes(DEFAULT_MAX_BYTES)
    }

    /// An empty store holding at most about `max_bytes` of counters.
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        let hasher = RandomState::new();
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(ShardMap {
                    map: LruCache::unbounded_with_hasher(hasher.clone()),
                    bytes: 0,
                })
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                hasher,
                shards,
                shard_budget: max_bytes / SHARDS,
                max_bytes,
                bytes: AtomicUsize::new(0),
                evictions: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes, counters and evictions, for `/metrics`.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            bytes: self.inner.bytes.load(Ordering::Relaxed),
            counters: self.len(),
            evictions: self.inner.evictions.load(Ordering::Relaxed),
            max_bytes: self.inner.max_bytes,
        }
    }

    /// Charges the counter just used its new size (`old` -> `new`), then evicts least recently used
    /// counters (never the one just used) while the shard is over budget.
    fn account(&self, shard: &mut ShardMap, old: usize, new: usize) {
        shard.bytes = shard.bytes.saturating_sub(old).saturating_add(new);
        if new >= old {
            self.inner.bytes.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.inner.bytes.fetch_sub(old - new, Ordering::Relaxed);
        }
        while shard.bytes > self.inner.shard_budget && shard.map.len() > 1 {
            let Some((_, evicted)) = shard.map.pop_lru() else {
                break;
            };
            shard.bytes = shard.bytes.saturating_sub(evicted.bytes);
            self.inner.bytes.fetch_sub(evicted.bytes, Ordering::Relaxed);
            self.inner.evictions.fetch_add(1, Ordering::Relaxed);
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
    pub fn apply(&self, batch: Batch, now: UnixMillis) -> Vec<Outcome> {
        if !batch.stop_when_over {
            return batch
                .ops
                .into_iter()
                .map(|op| self.apply_one(op.id, &op.spec, op.hits, now, false))
                .collect();
        }
        let mut outcomes: Vec<Outcome> = batch
            .ops
            .iter()
            .map(|op| self.apply_one(op.id.clone(), &op.spec, op.hits, now, true))
            .collect();
        if outcomes.iter().any(|o| o.over_limit) {
            for (op, outcome) in batch.ops.into_iter().zip(&mut outcomes) {
                if outcome.counted && op.hits > 0 {
                    self.take_back(&op, now);
                    *outcome = super::taken_back(&op, *outcome, now);
                }
            }
        }
        outcomes
    }

    fn apply_one(
        &self,
        id: CounterId,
        spec: &Spec,
        hits: u64,
        now: UnixMillis,
        refuse_over: bool,
    ) -> Outcome {
        let key = SlotKey {
            id,
            kind: Kind::of(spec, now),
        };
        let key_len = key.id.as_str().len();
        let mut shard = self.shard(&key).lock();
        let slot = shard.map.get_or_insert_mut(key, || Slot {
            state: State::new(spec),
            expires_at: now,
            bytes: 0,
        });
        let outcome = Self::apply_state(slot, spec, hits, now, refuse_over);
        let new = charge(key_len, &slot.state);
        let old = std::mem::replace(&mut slot.bytes, new);
        self.account(&mut shard, old, new);
        outcome
    }

    /// Runs one operation on a counter's state.
    fn apply_state(
        slot: &mut Slot,
        spec: &Spec,
        hits: u64,
        now: UnixMillis,
        refuse_over: bool,
    ) -> Outcome {
        match (spec, &mut slot.state) {
            (Spec::FixedWindow { window, limit }, State::Fixed(counter)) => {
                if refuse_over && hits > 0 {
                    let before = window.current(counter, now);
                    if is_over_limit(before.saturating_add(hits), *limit) {
                        return window.refused(before, hits, *limit, now);
                    }
                }
                let tally = window.apply(counter, now, hits);
                slot.expires_at = window.expires_at(now);
                window.outcome(tally, *limit, now, true)
            }
            (Spec::SlidingWindow(sw), State::Sliding(buckets)) => {
                let counts = buckets.counts(sw, now);
                let admitted = sw.admits(&counts, hits);
                let counted = sw.counts_hits(admitted, hits) && (admitted || !refuse_over);
                if counted {
                    buckets.add(sw, now, hits);
                    slot.expires_at =
                        now.saturating_add(std::time::Duration::from_secs(sw.ttl_secs()));
                }
                sw.outcome(&counts, hits, counted, now)
            }
            (Spec::SlidingLog(sl), State::Log(log)) => {
                let outcome = log.apply(sl, now, hits);
                if outcome.counted {
                    slot.expires_at =
                        now.saturating_add(std::time::Duration::from_millis(sl.longest_ms()));
                }
                outcome
            }
            (Spec::Gcra(gcra), State::Gcra(tat)) => {
                let (new_tat, outcome) = gcra.decide(*tat, now, hits);
                if let Some(new_tat) = new_tat {
                    *tat = Some(new_tat);
                    slot.expires_at = now.saturating_add(std::time::Duration::from_millis(
                        Gcra::ttl_ms(new_tat, now),
                    ));
                }
                outcome
            }
            // The slot kind is derived from the spec, so the state always
            // matches; answer "nothing known" rather than panic.
            (spec, state) => {
                *state = State::new(spec);
                Outcome {
                    over_limit: false,
                    remaining: 0,
                    reset: std::time::Duration::ZERO,
                    counted: false,
                    before: 0,
                    after: 0,
                    limit_index: 0,
                }
            }
        }
    }

    /// Undoes a counted operation of a batch that is being refused.
    fn take_back(&self, op: &Op, now: UnixMillis) {
        let key = SlotKey {
            id: op.id.clone(),
            kind: Kind::of(&op.spec, now),
        };
        let mut shard = self.shard(&key).lock();
        let Some(slot) = shard.map.peek_mut(&key) else {
            return;
        };
        match (&op.spec, &mut slot.state) {
            (Spec::FixedWindow { window, .. }, State::Fixed(counter))
                if counter.window_start_secs == window.window_start(now) =>
            {
                counter.count = counter.count.saturating_sub(op.hits);
            }
            (Spec::SlidingWindow(sw), State::Sliding(buckets)) => {
                buckets.take_back(sw, now, op.hits)
            }
            (Spec::SlidingLog(_), State::Log(log)) => log.take_back(now, op.hits),
            (Spec::Gcra(gcra), State::Gcra(Some(tat))) => {
                *tat = tat.saturating_sub(op.hits.saturating_mul(gcra.interval_us()));
            }
            _ => {}
        }
    }

    /// Removes every counter whose window ended at or before `now`; returns
    /// how many were removed.
    pub fn sweep(&self, now: UnixMillis) -> usize {
        let mut removed = 0;
        let mut ended: Vec<SlotKey> = Vec::new();
        for shard in &self.inner.shards {
            let mut shard = shard.lock();
            ended.extend(
                shard
                    .map
                    .iter()
                    .filter(|(_, slot)| slot.expires_at <= now)
                    .map(|(key, _)| key.clone()),
            );
            for key in ended.drain(..) {
                if let Some(slot) = shard.map.pop(&key) {
                    shard.bytes = shard.bytes.saturating_sub(slot.bytes);
                    self.inner.bytes.fetch_sub(slot.bytes, Ordering::Relaxed);
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Number of live counters (for metrics and tests).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MemoryStore {
    async fn execute(&self, batch: Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        Ok(self.apply(batch, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::FixedWindow;

    fn op(id: &str, window_secs: u64, hits: u64) -> Op {
        op_limit(id, window_secs, hits, 1_000_000)
    }

    fn op_limit(id: &str, window_secs: u64, hits: u64, limit: u64) -> Op {
        Op {
            id: CounterId::new("d", [("k", id)]),
            spec: Spec::FixedWindow {
                window: FixedWindow::new(window_secs),
                limit,
            },
            hits,
        }
    }

    fn batch(ops: Vec<Op>) -> Batch {
        Batch {
            ops,
            stop_when_over: false,
        }
    }

    #[test]
    fn stop_when_over_counts_nothing_for_a_refused_request() {
        // Reference vector: limits 15 and 14, both at 13, hits 2.
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(100);
        store.apply(
            batch(vec![op_limit("k4", 60, 13, 15), op_limit("k5", 60, 13, 14)]),
            now,
        );
        let outcomes = store.apply(
            Batch {
                ops: vec![op_limit("k4", 60, 2, 15), op_limit("k5", 60, 2, 14)],
                stop_when_over: true,
            },
            now,
        );
        assert_eq!(
            outcomes
                .iter()
                .map(|o| (o.over_limit, o.remaining, o.counted))
                .collect::<Vec<_>>(),
            vec![(false, 2, false), (true, 0, false)]
        );
        let check = store.apply(
            batch(vec![op_limit("k4", 60, 0, 15), op_limit("k5", 60, 0, 14)]),
            now,
        );
        assert_eq!((check[0].after, check[1].after), (13, 13));
        // Within the limits, a stop-mode batch counts normally.
        let ok = store.apply(
            Batch {
                ops: vec![op_limit("k4", 60, 1, 15), op_limit("k5", 60, 1, 14)],
                stop_when_over: true,
            },
            now,
        );
        assert!(ok.iter().all(|o| o.counted && !o.over_limit));
        assert_eq!((ok[0].after, ok[1].after), (14, 14));
    }

    #[test]
    fn counts_per_counter_and_window_length() {
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(1_000);
        let t = store.apply(
            batch(vec![
                op("a", 60, 3),
                op("a", 60, 2),
                op("b", 60, 1),
                op("a", 1, 1),
            ]),
            now,
        );
        let after: Vec<u64> = t.iter().map(|t| t.after).collect();
        assert_eq!(after, vec![3, 5, 1, 1]);
    }

    #[test]
    fn sweep_reclaims_ended_windows_only() {
        let store = MemoryStore::new();
        let now = UnixMillis::from_secs(1_200);
        store.apply(batch(vec![op("a", 1, 1), op("b", 60, 1)]), now);
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
            store.apply(batch(ops), now);
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
                        store.apply(batch(vec![op("hot", 60, 1)]), now);
                    }
                });
            }
        });
        let t = store.apply(batch(vec![op("hot", 60, 0)]), now);
        assert_eq!(t[0].after, 8_000);
    }

    #[test]
    fn budget_evicts_cold_counters_and_keeps_hot_ones_exact() {
        // 64 shards of 2 KiB: a few counters per shard.
        let store = MemoryStore::with_max_bytes(SHARDS * 2_048);
        let now = UnixMillis::from_secs(7);
        for i in 0..20_000 {
            store.apply(
                batch(vec![
                    op("hot", 3_600, 1),
                    op(&format!("cold-{i}"), 3_600, 1),
                ]),
                now,
            );
        }
        let stats = store.stats();
        assert!(stats.bytes <= stats.max_bytes, "{stats:?}");
        assert!(stats.evictions > 19_000, "{stats:?}");
        assert!(stats.counters < 1_000, "{stats:?}");
        let hot = store.apply(batch(vec![op("hot", 3_600, 0)]), now);
        assert_eq!(hot[0].after, 20_000);
        // The bytes charged are exactly what the counters held add up to.
        let held: usize = store
            .inner
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .map
                    .iter()
                    .map(|(_, slot)| slot.bytes)
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(held, store.stats().bytes);
        store.sweep(UnixMillis::from_secs(1_000_000));
        assert_eq!(store.stats().bytes, 0);
    }
}
