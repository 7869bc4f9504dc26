//! Maps of metric series, read on every request without a shared write:
//! a reader loads the current map (arc-swap: no lock, no reference count
//! on the map), and finds its series' atomics there. A new series copies
//! the map and swaps it in, under a lock only adders take. Copies are rare
//! and bounded: a series is added once, and never past the series cap.

use arc_swap::{ArcSwap, Guard};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The series of one kind, by name.
/// A fast keyed hash: the names are looked up on every request, and a
/// caller cannot add past the series cap.
pub(crate) type Map<V> = HashMap<String, Arc<V>, foldhash::fast::RandomState>;

/// Series by name; see the module.
#[derive(Debug)]
pub(crate) struct Series<V> {
    map: ArcSwap<Map<V>>,
    adding: Mutex<()>,
}

impl<V> Default for Series<V> {
    fn default() -> Self {
        Self {
            map: ArcSwap::from_pointee(HashMap::default()),
            adding: Mutex::new(()),
        }
    }
}

impl<V: Default> Series<V> {
    /// Runs `f` on the series `name` if it exists; no shared write.
    pub(crate) fn with<R>(&self, name: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.map.load().get(name).map(|series| f(series))
    }

    /// The series `name`, added when fewer than `max` exist; `None` when
    /// it does not exist and there is no room.
    pub(crate) fn get_or_add(&self, name: &str, max: usize) -> Option<Arc<V>> {
        if let Some(series) = self.map.load().get(name) {
            return Some(Arc::clone(series));
        }
        let _adding = self.adding.lock();
        let current = self.map.load_full();
        if let Some(series) = current.get(name) {
            return Some(Arc::clone(series));
        }
        if current.len() >= max {
            return None;
        }
        let series = Arc::new(V::default());
        let mut next = (*current).clone();
        next.insert(name.to_owned(), Arc::clone(&series));
        self.map.store(Arc::new(next));
        Some(series)
    }

    /// Every series now (for rendering).
    pub(crate) fn load(&self) -> Guard<Arc<Map<V>>> {
        self.map.load()
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
        assert!(series.get_or_add("b", 2).is_some());
        assert!(series.get_or_add("c", 2).is_none(), "past the cap");
        assert!(series.get_or_add("b", 2).is_some(), "existing series stay");
        assert_eq!(series.load().len(), 2);
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
