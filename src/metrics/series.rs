//! Maps of metric series, read on every request without a shared write:
//! a reader loads the current map of its name's shard (arc-swap: no lock,
//! no reference count on the map), and finds its series' atomics there. A
//! new series copies its shard's map and swaps it in, under a lock only
//! adders take. The names are shared (`Arc<str>`), so a copy allocates only
//! the new table: with [`SHARDS`] shards, filling `n` series copies about
//! `n² / 128` entries in all (10,000 series: 780,000 entries of two
//! reference counts each, where one map copied 50 million entries, names
//! and all), and the request that adds a series copies its shard only.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The series of one shard, by name. A fast keyed hash: the names are
/// looked up on every request, and a caller cannot add past the series
/// cap.
pub(crate) type Map<V> = HashMap<Arc<str>, Arc<V>, foldhash::fast::RandomState>;

/// Shards of the series (a power of two): a new series copies one.
const SHARDS: usize = 64;

/// A name's shard, from its first and last eight bytes and its length:
/// cheaper than a second hash of the whole name on every lookup (the map
/// hashes it again). Names alike at both ends share a shard; at worst all
/// do, and a new series copies every one, as a single map did.
fn shard_of(name: &str) -> usize {
    fn word(bytes: &[u8]) -> u64 {
        let mut word = [0u8; 8];
        for (to, from) in word.iter_mut().zip(bytes) {
            *to = *from;
        }
        u64::from_le_bytes(word)
    }
    let bytes = name.as_bytes();
    // Names are mostly longer than 8 bytes: two loads, no byte loop.
    let (head, tail) = match (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
        (Some(head), Some(tail)) => (u64::from_le_bytes(*head), u64::from_le_bytes(*tail)),
        _ => (word(bytes), word(bytes)),
    };
    let mixed =
        (head ^ tail.rotate_left(29) ^ bytes.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // The product's high bits: SHARDS is a power of two.
    usize::try_from(mixed >> (64 - SHARDS.trailing_zeros())).unwrap_or(0)
}

/// Series by name; see the module.
#[derive(Debug)]
pub(crate) struct Series<V> {
    shards: Box<[ArcSwap<Map<V>>; SHARDS]>,
    /// Series in every shard (changed only under `adding`).
    len: AtomicUsize,
    adding: Mutex<()>,
}

impl<V> Default for Series<V> {
    fn default() -> Self {
        Self {
            shards: Box::new(std::array::from_fn(|_| {
                ArcSwap::from_pointee(HashMap::default())
            })),
            len: AtomicUsize::new(0),
            adding: Mutex::new(()),
        }
    }
}

impl<V> Series<V> {
    fn shard(&self, name: &str) -> &ArcSwap<Map<V>> {
        #[allow(clippy::indexing_slicing)] // below SHARDS, the array's length
        &self.shards[shard_of(name)]
    }

    /// Every series now (for rendering): each shard's map as it was when
    /// read.
    pub(crate) fn load(&self) -> Snapshot<V> {
        Snapshot(self.shards.iter().map(ArcSwap::load_full).collect())
    }

    /// The series `name`, if it exists.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<V>> {
        self.shard(name).load().get(name).cloned()
    }
}

impl<V: Default> Series<V> {
    /// Runs `f` on the series `name` if it exists; no shared write.
    pub(crate) fn with<R>(&self, name: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.shard(name).load().get(name).map(|series| f(series))
    }

    /// The series `name`, added when fewer than `max` exist; `None` when
    /// it does not exist and there is no room.
    pub(crate) fn get_or_add(&self, name: &str, max: usize) -> Option<Arc<V>> {
        let shard = self.shard(name);
        if let Some(series) = shard.load().get(name) {
            return Some(Arc::clone(series));
        }
        let _adding = self.adding.lock();
        let current = shard.load_full();
        if let Some(series) = current.get(name) {
            return Some(Arc::clone(series));
        }
        if self.len.load(Ordering::Relaxed) >= max {
            return None;
        }
        let series = Arc::new(V::default());
        let mut next = (*current).clone();
        next.insert(Arc::from(name), Arc::clone(&series));
        shard.store(Arc::new(next));
        self.len.fetch_add(1, Ordering::Relaxed);
        Some(series)
    }
}

/// Every series of a [`Series`], each shard's as it was when read (the
/// shards are read one after another, not at one instant).
#[derive(Debug)]
pub(crate) struct Snapshot<V>(Vec<Arc<Map<V>>>);

impl<V> Snapshot<V> {
    /// Every series and its name, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0
            .iter()
            .flat_map(|map| map.iter().map(|(name, series)| (&**name, &**series)))
    }

    /// Every series, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, series)| series)
    }

    /// How many series there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.iter().map(|map| map.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn series_are_added_once_and_capped() {
        let series: Series<AtomicU64> = Series::default();
        assert!(series.with("a", |_| ()).is_none());
        let a = series.get_or_add("a", 2).unwrap();
        a.fetch_add(1, Ordering::Relaxed);
        assert_eq!(series.with("a", |c| c.load(Ordering::Relaxed)), Some(1));
        assert!(Arc::ptr_eq(&a, &series.get_or_add("a", 2).unwrap()));
        assert!(Arc::ptr_eq(&a, &series.get("a").unwrap()));
        assert!(series.get_or_add("b", 2).is_some());
        assert!(series.get_or_add("c", 2).is_none(), "past the cap");
        assert!(series.get("c").is_none());
        assert!(series.get_or_add("b", 2).is_some(), "existing series stay");
        assert_eq!(series.load().len(), 2);
    }

    #[test]
    fn the_cap_counts_every_shard() {
        let series: Series<AtomicU64> = Series::default();
        for i in 0..1_000 {
            assert!(series.get_or_add(&format!("k{i}"), 1_000).is_some());
        }
        assert!(series.get_or_add("one more", 1_000).is_none());
        let snapshot = series.load();
        assert_eq!(snapshot.len(), 1_000);
        let mut names: Vec<&str> = snapshot.iter().map(|(name, _)| name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 1_000, "each series once");
        // Spread over the shards, so that adding one copies a few.
        let used = snapshot.0.iter().filter(|map| !map.is_empty()).count();
        assert!(used > SHARDS / 2, "{used} of {SHARDS} shards used");
    }

    #[test]
    fn stats_keys_alike_but_at_one_end_spread_over_the_shards() {
        for name in [
            |i: usize| format!("edge.per_user_and_path.user_{i}"),
            |i: usize| format!("t{i}.edge.per_user_and_path.user"),
        ] {
            let mut counts = [0usize; SHARDS];
            for i in 0..6_400 {
                counts[shard_of(&name(i))] += 1;
            }
            let most = counts.iter().max().copied().unwrap_or(0);
            // 100 a shard if even; a copy stays a few hundred entries.
            assert!(most < 300, "{most} names in one shard: {counts:?}");
        }
    }

    #[test]
    fn concurrent_adders_share_one_series() {
        let series: Arc<Series<AtomicU64>> = Arc::default();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let series = Arc::clone(&series);
                std::thread::spawn(move || {
                    for i in 0..100 {
                        if let Some(c) = series.get_or_add(&format!("k{}", i % 10), 1_000) {
                            c.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total: u64 = series
            .load()
            .values()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        assert_eq!(total, 400);
        assert_eq!(series.load().len(), 10);
    }
}
