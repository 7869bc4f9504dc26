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

pub(crate) mod demand;
mod entry;
mod snapshot;
#[cfg(test)]
mod tests;

pub use snapshot::SnapshotError;

use super::{Batch, CounterId, Op, Store, StoreError};
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::metrics::store::{MemoryStats, SnapshotStats};
use entry::{CarriedHash, CounterKind, Entry, EntryKey, State, charge};
use lru::LruCache;
use parking_lot::Mutex;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Number of lock shards; a power of two well above the core counts we run
/// on keeps contention negligible without wasting memory on empty maps.
const SHARDS: usize = 64;

#[derive(Debug)]
struct ShardMap {
    map: LruCache<EntryKey, Entry, CarriedHash>,
    bytes: usize,
    /// Changed since its last snapshot image was encoded (set under the
    /// shard's lock, which every change holds anyway: free on the request
    /// path).
    dirty: bool,
}

type Shard = Mutex<ShardMap>;

/// How often ended windows are reclaimed.
pub(crate) const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Default byte budget: half the 256 MiB the Kubernetes manifest gives the
/// pod, leaving room for the rest of the process.
pub(crate) const DEFAULT_MAX_BYTES: usize = 128 << 20;

/// Where and how often the embedded store writes its snapshot
/// (`MEMORY_STORE_SNAPSHOT_PATH`, `MEMORY_STORE_SNAPSHOT_INTERVAL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// The snapshot file.
    pub path: std::path::PathBuf,
    /// How often it is written (and once more at shutdown).
    pub interval: std::time::Duration,
}

#[derive(Debug, Default)]
struct SnapshotCounters {
    written: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    last_written_ms: AtomicU64,
}

/// What [`MemoryStore::load_snapshot`] read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotRead {
    /// Counters restored.
    pub kept: usize,
    /// Counters read but evicted at once: the byte budget holds only the
    /// most recently used.
    pub dropped: usize,
}

/// In-process counter store; clones share the same counters.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hasher: RandomState,
    shards: Box<[Shard; SHARDS]>,
    /// Budget of each shard.
    shard_budget: usize,
    max_bytes: usize,
    bytes: AtomicUsize,
    evictions: AtomicU64,
    /// The RLQS demand registry (`store::rlqs`), bounded on its own.
    demand: demand::MemoryRegistry,
    snapshot: Option<SnapshotConfig>,
    snapshots: SnapshotCounters,
    /// Each shard's counters as last encoded for a snapshot: a shard that
    /// did not change since is neither encoded nor written again (under a
    /// hot load only the hot keys' shards change between two snapshots).
    images: Mutex<Vec<Image>>,
}

/// One shard's part of the snapshot.
#[derive(Debug, Default, Clone)]
struct Image {
    bytes: Vec<u8>,
    count: u64,
    /// Encoded anew and not yet written.
    unwritten: bool,
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
        Self::with_snapshot(max_bytes, None)
    }

    /// An empty store holding at most about `max_bytes` of counters, that
    /// writes a snapshot as `snapshot` says ([`MemoryStore::snapshot_until`];
    /// read it back with [`MemoryStore::load_snapshot`]).
    pub fn with_snapshot(max_bytes: usize, snapshot: Option<SnapshotConfig>) -> Self {
        let hasher = RandomState::new();
        let shards = Box::new(std::array::from_fn(|_| {
            Mutex::new(ShardMap {
                map: LruCache::unbounded_with_hasher(CarriedHash::default()),
                bytes: 0,
                dirty: true,
            })
        }));
        Self {
            inner: Arc::new(Inner {
                hasher,
                shards,
                shard_budget: max_bytes / SHARDS,
                max_bytes,
                bytes: AtomicUsize::new(0),
                evictions: AtomicU64::new(0),
                demand: demand::MemoryRegistry::default(),
                snapshot,
                snapshots: SnapshotCounters::default(),
                images: Mutex::new(vec![Image::default(); SHARDS]),
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
            snapshot: self.inner.snapshot.as_ref().map(|_| {
                let counters = &self.inner.snapshots;
                SnapshotStats {
                    written: counters.written.load(Ordering::Relaxed),
                    failed: counters.failed.load(Ordering::Relaxed),
                    bytes: counters.bytes.load(Ordering::Relaxed),
                    last_written: UnixMillis(counters.last_written_ms.load(Ordering::Relaxed)),
                }
            }),
        }
    }

    /// Charges the counter just used its new size (`old` -> `new`), then evicts least recently used
    /// counters (never the one just used) while the shard is over budget.
    fn account(&self, shard: &mut ShardMap, old: usize, new: usize) {
        shard.dirty = true;
        shard.bytes = shard.bytes.saturating_sub(old).saturating_add(new);
        // The store-wide total is one cache line every shard shares: a hit
        // that leaves its counter's size as it was (nearly every hit on a
        // hot counter) does not write it, so threads counting in different
        // shards, or on one hot counter, do not contend on it.
        if new > old {
            self.inner.bytes.fetch_add(new - old, Ordering::Relaxed);
        } else if new < old {
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

    /// The key of `id`'s `kind` state and its shard: by the identity
    /// alone, so every window of one descriptor lives in one shard (a
    /// snapshot then rewrites only the shards of the descriptors that
    /// changed, not one more shard per new window).
    fn key(&self, id: CounterId, kind: CounterKind) -> (EntryKey, &Shard) {
        let hash = self.inner.hasher.hash_one(&id);
        // SHARDS is a power of two, so masking picks a uniform shard; the
        // masked value is < SHARDS and always fits in usize.
        let index = usize::try_from(hash & (SHARDS as u64 - 1)).unwrap_or(0);
        #[allow(clippy::indexing_slicing)] // masked below SHARDS, the array's length
        let shard = &self.inner.shards[index];
        (EntryKey::new(hash, id, kind), shard)
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
        // Candidate (shadow) limits count as if alone: they neither refuse
        // the request nor are refused with it.
        let mut outcomes: Vec<Outcome> = batch
            .ops
            .iter()
            .map(|op| {
                let refuse = batch.refuses(op);
                self.apply_one(op.id.clone(), &op.spec, op.hits, now, refuse)
            })
            .collect();
        if batch.refused_by(&outcomes) {
            for (op, outcome) in batch.ops.into_iter().zip(&mut outcomes) {
                if outcome.counted && op.hits > 0 && !op.id.is_candidate() {
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
        let (key, shard) = self.key(id, CounterKind::of(spec, now));
        let key_len = key.id.as_str().len();
        let mut shard = shard.lock();
        let slot = shard.map.get_or_insert_mut(key, || Entry {
            state: State::new(spec),
            expires_at: now,
            used_at: now,
            bytes: 0,
        });
        slot.used_at = now;
        let outcome = slot.apply(spec, hits, now, refuse_over);
        let new = charge(key_len, &slot.state);
        let old = std::mem::replace(&mut slot.bytes, new);
        self.account(&mut shard, old, new);
        outcome
    }

    /// What every operation of `batch` would answer at `now`, changing
    /// nothing: each runs on a copy of its counter (a fresh one when absent),
    /// refusing as [`MemoryStore::apply`] does under `stop_when_over`; later
    /// operations on the same counter see the earlier ones; the
    /// least-recently-used order is left as it is. A refused batch is not
    /// taken back here (see [`Store::peek`]).
    pub fn peek(&self, batch: &Batch, now: UnixMillis) -> Vec<Outcome> {
        let mut copies: Vec<(EntryKey, Entry)> = Vec::new();
        batch
            .ops
            .iter()
            .map(|op| {
                let (key, shard) = self.key(op.id.clone(), CounterKind::of(&op.spec, now));
                let at = match copies.iter().position(|(k, _)| *k == key) {
                    Some(at) => at,
                    None => {
                        let copy = shard
                            .lock()
                            .map
                            .peek(&key)
                            .cloned()
                            .unwrap_or_else(|| Entry {
                                state: State::new(&op.spec),
                                expires_at: now,
                                used_at: now,
                                bytes: 0,
                            });
                        copies.push((key, copy));
                        copies.len() - 1
                    }
                };
                let refuse = batch.refuses(op);
                match copies.get_mut(at) {
                    Some((_, copy)) => copy.apply(&op.spec, op.hits, now, refuse),
                    None => Outcome::NOTHING,
                }
            })
            .collect()
    }

    /// Undoes a counted operation of a batch that is being refused.
    fn take_back(&self, op: &Op, now: UnixMillis) {
        let (key, shard) = self.key(op.id.clone(), CounterKind::of(&op.spec, now));
        let mut shard = shard.lock();
        shard.dirty = true;
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
            (Spec::Concurrency(c), State::Slots(slots)) => slots.take_back(c),
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
        let mut ended: Vec<EntryKey> = Vec::new();
        for shard in self.inner.shards.iter() {
            let mut shard = shard.lock();
            ended.extend(
                shard
                    .map
                    .iter()
                    .filter(|(_, slot)| slot.expires_at <= now)
                    .map(|(key, _)| key.clone()),
            );
            shard.dirty |= !ended.is_empty();
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

    /// Sweeps every `SWEEP_INTERVAL` until `shutdown`.
    pub async fn sweep_until(
        &self,
        clock: Arc<dyn crate::clock::Clock>,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    let removed = self.sweep(clock.now());
                    tracing::trace!(removed, "memory store swept");
                }
            }
        }
    }

    /// The counters whose window has not ended at `now`, encoded as one
    /// snapshot file (tests read it).
    #[cfg(test)]
    fn encode_snapshot(&self, now: UnixMillis) -> Vec<u8> {
        let mut images = self.inner.images.lock();
        self.refresh_images(&mut images, now);
        let count = images.iter().map(|image| image.count).sum();
        let parts: Vec<&[u8]> = images.iter().map(|image| image.bytes.as_slice()).collect();
        snapshot::concatenated(&snapshot::header(now, count), &parts)
    }

    /// Encodes each shard that changed since its last image (under its own
    /// lock, least recently used first; an unchanged shard's image is kept:
    /// its counters whose window ended since are dropped when the file is
    /// read back).
    fn refresh_images(&self, images: &mut [Image], now: UnixMillis) {
        for (shard, image) in self.inner.shards.iter().zip(images.iter_mut()) {
            let mut shard = shard.lock();
            if !shard.dirty {
                continue;
            }
            image.bytes.clear();
            image.count = 0;
            for (key, entry) in shard.map.iter().rev() {
                if entry.expires_at > now && snapshot::encode_entry(&mut image.bytes, key, entry) {
                    image.count += 1;
                }
            }
            image.unwritten = true;
            shard.dirty = false;
        }
    }

    /// Writes the snapshot: one file per shard (`path` for the first, then
    /// `path.1` … `path.63`), each a whole snapshot of its counters, and
    /// only those of shards that changed since their last write. Each file
    /// is replaced atomically, so after a crash every counter is in its
    /// last or its previous write: at most one interval lost. Returns the
    /// bytes of all the files.
    fn write_snapshot_file(
        &self,
        path: &std::path::Path,
        now: UnixMillis,
    ) -> Result<u64, SnapshotError> {
        let mut images = self.inner.images.lock();
        self.refresh_images(&mut images, now);
        for (i, image) in images.iter_mut().enumerate() {
            if !image.unwritten {
                continue;
            }
            let header = snapshot::header(now, image.count);
            snapshot::write_atomically(
                &snapshot::part_path(path, i),
                [header.as_slice(), image.bytes.as_slice()],
            )?;
            image.unwritten = false;
        }
        Ok(images
            .iter()
            .map(|image| 32 + u64::try_from(image.bytes.len()).unwrap_or(u64::MAX))
            .sum())
    }

    /// Reads the snapshot files back, when snapshots are on and they exist:
    /// every counter whose window has not ended at `now` continues where
    /// it stood, within the byte budget.
    ///
    /// The counters of all the files are replayed least recently used
    /// first (each file's shard is not the counter's shard in this
    /// process, whose hasher is keyed afresh), so a shard over its share
    /// evicts the oldest, and each shard keeps exactly the most recently
    /// used of its counters that fit, as its LRU would have. Counters used
    /// in the same millisecond in different files replay in file order.
    /// All the files are decoded before the first counter is inserted.
    ///
    /// # Errors
    ///
    /// [`SnapshotError`] naming the file when it cannot be read or is not
    /// a whole snapshot (floodgate then refuses to start: starting empty
    /// would hand every caller a fresh quota).
    pub fn load_snapshot(&self, now: UnixMillis) -> Result<SnapshotRead, SnapshotError> {
        let Some(config) = &self.inner.snapshot else {
            return Ok(SnapshotRead::default());
        };
        let mut entries = Vec::new();
        for i in 0..SHARDS {
            let path = snapshot::part_path(&config.path, i);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(SnapshotError::Io { path, source }),
            };
            entries.extend(snapshot::decode(&bytes, now, &path)?);
        }
        // Stable: each file's own order (its shard's exact LRU order) is
        // kept, and `decode` made its times non-decreasing.
        entries.sort_by_key(|(_, _, entry)| entry.used_at);
        let before = self.len();
        let read = entries.len();
        for (id, kind, mut entry) in entries {
            let new = charge(id.as_str().len(), &entry.state);
            entry.bytes = new;
            let (key, shard) = self.key(id, kind);
            let mut shard = shard.lock();
            let old = shard.map.put(key, entry).map_or(0, |old| old.bytes);
            self.account(&mut shard, old, new);
        }
        let kept = self.len().saturating_sub(before);
        Ok(SnapshotRead {
            kept,
            dropped: read.saturating_sub(kept),
        })
    }

    /// Writes a snapshot every interval until `shutdown`, then once more
    /// (the server cancels it only once every listener has drained, so the
    /// last answers are in it). Encoding and writing run on a blocking thread: answers never
    /// wait for the disk. A failed write is logged (once per interval at
    /// most) and counted, and the next interval tries again. Returns at
    /// once when snapshots are off.
    pub async fn snapshot_until(
        &self,
        clock: Arc<dyn crate::clock::Clock>,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let Some(config) = self.inner.snapshot.clone() else {
            return;
        };
        let mut tick = tokio::time::interval(config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: nothing changed since the load.
        tick.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => self.write_snapshot(&config, clock.now()).await,
            }
        }
        self.write_snapshot(&config, clock.now()).await;
        tracing::info!(path = %config.path.display(), "memory store snapshot written at shutdown");
    }

    async fn write_snapshot(&self, config: &SnapshotConfig, now: UnixMillis) {
        let store = self.clone();
        let path = config.path.clone();
        let written =
            tokio::task::spawn_blocking(move || store.write_snapshot_file(&path, now)).await;
        let counters = &self.inner.snapshots;
        match written {
            Ok(Ok(len)) => {
                counters.written.fetch_add(1, Ordering::Relaxed);
                counters.bytes.store(len, Ordering::Relaxed);
                counters.last_written_ms.store(now.0, Ordering::Relaxed);
            }
            Ok(Err(err)) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "memory store snapshot not written"
                );
            }
            Err(err) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "memory store snapshot task failed"
                );
            }
        }
    }

    /// The RLQS demand registry of this store.
    pub(crate) fn demand_registry(&self) -> &demand::MemoryRegistry {
        &self.inner.demand
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
    fn in_process(&self) -> bool {
        true
    }

    /// Answers at once: no deadline to keep.
    async fn execute_within(
        &self,
        batch: Batch,
        now: UnixMillis,
        _deadline: Option<std::time::Duration>,
    ) -> Result<Vec<Outcome>, StoreError> {
        Ok(self.apply(batch, now))
    }

    async fn peek(&self, batch: &Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        Ok(Self::peek(self, batch, now))
    }
}
