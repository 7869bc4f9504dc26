//! Space-saving (Metwally, Agrawal and El Abbadi, 2005): the heaviest items
//! of a stream in `K` counters, whatever the number of distinct items.
//!
//! Definition: an item already held adds its weight to its counter. A new
//! item takes a free counter while there is one; otherwise it replaces the
//! item of the smallest counter `m`, starting from `m + weight` with
//! `error = m`. So a held item's `count` never undercounts and overcounts by
//! at most its `error`, `error <= N / K` (`N` the total weight), and every
//! item whose true weight is over `N / K` is held.
//!
//! Items are keyed by a 64-bit hash the caller computes (keyed per process);
//! each counter also keeps a bounded copy of the item's text to show it.
//! `K` is small (64), so items are found by a vectorisable scan. The
//! smallest count is kept with how many counters hold it: counters only
//! ever grow, so the ones at the smallest count are used up one by one by
//! a cursor that goes round once, and the counters are scanned again only
//! when none is left at it. A stream of new items (a wide key space, every
//! request a new descriptor) then costs one scan per `K` replacements, not
//! two per item.
//! Memory is fixed by `K` and [`MAX_LABEL_BYTES`]/[`MAX_LABEL_ENTRIES`]:
//! replacing an item reuses the buffers of the one it replaces.

/// Most bytes of descriptor text (keys and values) kept per item; longer
/// values are cut at a character boundary.
pub(crate) const MAX_LABEL_BYTES: usize = 128;

/// Most descriptor entries kept per item; later entries are not shown.
pub(crate) const MAX_LABEL_ENTRIES: usize = 8;

/// The shown text of an item: its descriptor entries, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Label {
    /// Keys and values, one after the other.
    text: String,
    /// Byte lengths of each (key, value) in `text`.
    lens: Vec<(u16, u16)>,
}

impl Label {
    /// Replaces the text with `entries`, bounded, reusing the buffers.
    pub(crate) fn set<'a>(&mut self, entries: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.text.clear();
        self.lens.clear();
        for (key, value) in entries.into_iter().take(MAX_LABEL_ENTRIES) {
            let key = self.push_bounded(key);
            let value = self.push_bounded(value);
            self.lens.push((key, value));
        }
    }

    /// Appends as much of `part` as the budget leaves; returns its length.
    fn push_bounded(&mut self, part: &str) -> u16 {
        let room = MAX_LABEL_BYTES.saturating_sub(self.text.len());
        let mut end = part.len().min(room);
        while !part.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(part.get(..end).unwrap_or_default());
        // `end` is at most MAX_LABEL_BYTES, far below u16::MAX.
        u16::try_from(end).unwrap_or(u16::MAX)
    }

    /// The entries, as kept.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut at = 0usize;
        self.lens.iter().map(move |&(k, v)| {
            let (k, v) = (usize::from(k), usize::from(v));
            let key = self.text.get(at..at + k).unwrap_or_default();
            let value = self.text.get(at + k..at + k + v).unwrap_or_default();
            at += k + v;
            (key, value)
        })
    }

    /// Heap bytes held.
    fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.lens.capacity() * std::mem::size_of::<(u16, u16)>()
    }
}

/// One held item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held<'a> {
    /// The item's hash.
    pub hash: u64,
    /// Its shown text.
    pub label: &'a Label,
    /// Estimated weight: never below the true weight.
    pub count: u64,
    /// Bound on the overcount: the true weight is at least `count - error`.
    pub error: u64,
}

/// A space-saving summary of `K` counters.
#[derive(Debug, Clone)]
pub(crate) struct SpaceSaving {
    capacity: usize,
    hashes: Vec<u64>,
    counts: Vec<u64>,
    errors: Vec<u64>,
    labels: Vec<Label>,
    total: u64,
    /// The smallest count held (0 when empty).
    min: u64,
    /// How many counters hold `min`.
    at_min: usize,
    /// Where the search for a counter at `min` resumes.
    cursor: usize,
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            hashes: Vec::with_capacity(capacity),
            counts: Vec::with_capacity(capacity),
            errors: Vec::with_capacity(capacity),
            labels: Vec::with_capacity(capacity),
            total: 0,
            min: 0,
            at_min: 0,
            cursor: 0,
        }
    }

    /// Adds `weight` to the item `hash`; `label` writes its text when the
    /// item is new here (so a held item costs no copy).
    pub(crate) fn add(&mut self, hash: u64, weight: u64, label: impl FnOnce(&mut Label)) {
        if weight == 0 {
            return;
        }
        self.total = self.total.saturating_add(weight);
        if let Some(at) = self.find(hash) {
            if let Some(count) = self.counts.get_mut(at) {
                let old = *count;
                *count = old.saturating_add(weight);
                if old == self.min && *count != old {
                    self.left_min();
                }
            }
            return;
        }
        if self.hashes.len() < self.capacity {
            let mut text = Label::default();
            label(&mut text);
            if self.hashes.is_empty() || weight < self.min {
                (self.min, self.at_min) = (weight, 1);
            } else if weight == self.min {
                self.at_min += 1;
            }
            self.hashes.push(hash);
            self.counts.push(weight);
            self.errors.push(0);
            self.labels.push(text);
            return;
        }
        // Full: the new item takes a counter at the smallest count.
        let min = self.min;
        let Some(at) = self.next_at_min() else {
            return;
        };
        if let (Some(old), Some(count), Some(error), Some(text)) = (
            self.hashes.get_mut(at),
            self.counts.get_mut(at),
            self.errors.get_mut(at),
            self.labels.get_mut(at),
        ) {
            *old = hash;
            *count = min.saturating_add(weight);
            *error = min;
            label(text);
            if *count != min {
                self.left_min();
            }
        }
    }

    /// The next counter at `min` from the cursor, round once. Counters
    /// only grow, so none reaches `min` between scans: one round finds
    /// every counter at it.
    fn next_at_min(&mut self) -> Option<usize> {
        let len = self.counts.len();
        let start = self.cursor.min(len);
        let after = self.counts.get(start..).unwrap_or_default();
        let before = self.counts.get(..start).unwrap_or_default();
        let at = after
            .iter()
            .position(|&c| c == self.min)
            .map(|i| start + i)
            .or_else(|| before.iter().position(|&c| c == self.min))?;
        self.cursor = at + 1;
        Some(at)
    }

    /// One counter left `min`: when it was the last, finds the new
    /// smallest count and how many hold it.
    fn left_min(&mut self) {
        self.at_min = self.at_min.saturating_sub(1);
        if self.at_min == 0 {
            self.min = self.counts.iter().copied().min().unwrap_or(0);
            self.at_min = self.counts.iter().filter(|&&c| c == self.min).count();
            self.cursor = 0;
        }
    }

    /// Forgets every item, keeping the buffers.
    pub(crate) fn clear(&mut self) {
        self.hashes.clear();
        self.counts.clear();
        self.errors.clear();
        // Labels are kept allocated for reuse only up to `capacity`, which
        // they never exceed; dropping them here keeps the accounting simple.
        self.labels.clear();
        self.total = 0;
        (self.min, self.at_min, self.cursor) = (0, 0, 0);
    }

    /// Total weight added since the last clear.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Whether every counter holds an item (then an absent item's weight is
    /// at most [`SpaceSaving::min_count`]).
    pub(crate) fn is_full(&self) -> bool {
        self.hashes.len() >= self.capacity
    }

    /// The smallest count held (0 when empty).
    pub(crate) fn min_count(&self) -> u64 {
        self.min
    }

    /// The held items, in no order.
    pub(crate) fn items(&self) -> impl Iterator<Item = Held<'_>> {
        self.hashes
            .iter()
            .zip(&self.counts)
            .zip(&self.errors)
            .zip(&self.labels)
            .map(|(((&hash, &count), &error), label)| Held {
                hash,
                label,
                count,
                error,
            })
    }

    /// Where `hash` is held: a scan of the hashes in blocks of 8, each
    /// compared without a branch so the compiler can vectorise it (with
    /// `K` = 64 this beats a hash map, which would also have to be kept up
    /// to date on every replacement).
    fn find(&self, hash: u64) -> Option<usize> {
        let mut base = 0;
        for block in self.hashes.chunks(8) {
            if block.iter().fold(false, |hit, &h| hit | (h == hash)) {
                return block.iter().position(|&h| h == hash).map(|i| base + i);
            }
            base += block.len();
        }
        None
    }

    /// The count and error of `hash`, if held.
    pub(crate) fn get(&self, hash: u64) -> Option<(u64, u64)> {
        let at = self.find(hash)?;
        Some((*self.counts.get(at)?, *self.errors.get(at)?))
    }

    /// Heap bytes held, buffers included.
    pub(crate) fn heap_bytes(&self) -> usize {
        let per = std::mem::size_of::<u64>();
        (self.hashes.capacity() + self.counts.capacity() + self.errors.capacity()) * per
            + self.labels.capacity() * std::mem::size_of::<Label>()
            + self.labels.iter().map(Label::heap_bytes).sum::<usize>()
    }

    /// The most heap bytes a summary of `capacity` counters can hold.
    pub(crate) fn max_heap_bytes(capacity: usize) -> usize {
        let per = std::mem::size_of::<u64>();
        // Vectors never grow past `capacity`; labels grow to at most twice
        // their budget.
        let label = 2 * MAX_LABEL_BYTES + 2 * MAX_LABEL_ENTRIES * std::mem::size_of::<(u16, u16)>();
        capacity * (3 * per + std::mem::size_of::<Label>() + label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as Map;

    fn label_of(n: u64) -> impl FnOnce(&mut Label) {
        move |label: &mut Label| label.set([("k", n.to_string().as_str())])
    }

    #[test]
    fn labels_are_bounded_and_read_back() {
        let mut label = Label::default();
        label.set([("user", "alice"), ("path", "/a")]);
        let entries: Vec<_> = label.entries().collect();
        assert_eq!(entries, [("user", "alice"), ("path", "/a")]);
        let long = "é".repeat(200);
        label.set([("k", long.as_str())]);
        let (_, value) = label.entries().next().unwrap();
        assert!(value.len() < MAX_LABEL_BYTES && long.starts_with(value));
        let many: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), "v".into())).collect();
        label.set(many.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(label.entries().count(), MAX_LABEL_ENTRIES);
    }

    #[test]
    fn memory_stays_bounded_with_a_million_distinct_items() {
        let mut summary = SpaceSaving::new(64);
        let long = "x".repeat(1_000);
        for n in 0..1_000_000u64 {
            summary.add(n, 1, |label: &mut Label| {
                label.set([("key", long.as_str()), ("n", n.to_string().as_str())]);
            });
        }
        assert_eq!(summary.items().count(), 64);
        assert_eq!(summary.total(), 1_000_000);
        assert!(
            summary.heap_bytes() <= SpaceSaving::max_heap_bytes(64),
            "{} > {}",
            summary.heap_bytes(),
            SpaceSaving::max_heap_bytes(64)
        );
    }

    proptest! {
        /// The kept smallest count and how many hold it are what a scan
        /// finds, after any mix of new items, held ones, weights and clears.
        #[test]
        fn the_smallest_count_is_kept_exactly(
            ops in proptest::collection::vec((0u64..40, prop_oneof![Just(1u64), 1u64..4, Just(u64::MAX)], 0u8..50), 1..400),
            k in 1usize..12,
        ) {
            let mut summary = SpaceSaving::new(k);
            for (item, weight, clear) in ops {
                if clear == 0 {
                    summary.clear();
                }
                summary.add(item, weight, label_of(item));
                let min = summary.counts.iter().copied().min().unwrap_or(0);
                prop_assert_eq!(summary.min_count(), min);
                prop_assert_eq!(summary.at_min, summary.counts.iter().filter(|&&c| c == min).count());
            }
        }

        /// Against an exact count: every held item's count is within
        /// [true, true + error], error <= N / K, and every item heavier
        /// than N / K is held.
        #[test]
        fn counts_stay_within_the_error_bound(
            stream in proptest::collection::vec((0u64..60, 1u64..5), 1..600),
            k in 1usize..20,
        ) {
            let mut summary = SpaceSaving::new(k);
            let mut exact: Map<u64, u64> = Map::new();
            for &(item, weight) in &stream {
                summary.add(item, weight, label_of(item));
                *exact.entry(item).or_default() += weight;
            }
            let n: u64 = exact.values().sum();
            let bound = n / u64::try_from(k).unwrap();
            for held in summary.items() {
                let truth = exact[&held.hash];
                prop_assert!(held.count >= truth && held.count - held.error <= truth);
                prop_assert!(held.error <= bound);
                let shown: Vec<_> = held.label.entries().collect();
                let text = held.hash.to_string();
                prop_assert_eq!(shown, vec![("k", text.as_str())]);
            }
            for (&item, &truth) in &exact {
                if truth > bound {
                    prop_assert!(summary.get(item).is_some(), "{} ({} > {}) not held", item, truth, bound);
                }
            }
        }
    }
}
