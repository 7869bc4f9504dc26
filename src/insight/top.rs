//! The hottest and most-limited descriptors per domain, over the last
//! minute and the last hour, in bounded memory (`GET /top`, the live page).
//!
//! Each tracked domain has two rings of `SLOTS` time slots: 10-second
//! slots for the minute, 10-minute slots for the hour. Each slot holds two
//! [`SpaceSaving`] summaries of `TOP_K` counters: hits, and over-limit
//! hits (answers that were OVER_LIMIT, or would have been without shadow
//! mode). A query merges the slots of its window (the current one and the
//! five before it, so between 50 and 60 s, or 50 and 60 min, of traffic).
//!
//! Merging keeps the bound: for each item, `count` adds its count in every
//! slot that holds it and, in every full slot that does not, that slot's
//! smallest count (the most it can have had there); `error` adds the
//! matching uncertainties. So the true number lies in
//! `[count - error, count]`, and `error <= N / K` for `N` hits in the
//! window.
//!
//! Memory is fixed: at most [`MAX_DOMAINS`] domains (only domains some rule
//! file declares are tracked), each at most
//! [`TopRecorder::max_domain_bytes`], whatever the number of distinct
//! descriptors. Recording one descriptor is a keyed hash of its entries and
//! a short critical section under the lock of its domain's shard for the
//! recording thread: each domain has one set of rings per shard (as many
//! as the machine's cores, at most [`MAX_SHARDS`], each built when a
//! thread first records there), so threads recording at once never wait
//! for each other or share a lock. It allocates only when an item is new
//! to a slot with a free counter. A query merges every shard's slots as it
//! merges slots: the bounds hold, since each shard's summaries bound what
//! they saw.

mod rings;

use super::summary::{Label, SpaceSaving};
use crate::clock::UnixMillis;
use crate::descriptor::Entry;
use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use rings::{DomainTop, Slot};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

/// Counters per summary.
pub(crate) const TOP_K: usize = 64;

/// Slots per window.
pub(crate) const SLOTS: usize = 6;

/// Most domains tracked at once.
pub(crate) const MAX_DOMAINS: usize = 32;

/// Most shards per domain.
pub(crate) const MAX_SHARDS: usize = 8;

/// Shards per domain: the cores this process may use, at most
/// [`MAX_SHARDS`].
fn shard_count() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, MAX_SHARDS)
    })
}

/// The shard the current thread records into: threads take shards in
/// turn, so the runtime's workers each get one of their own.
fn my_shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    SHARD.with(|shard| *shard % shard_count())
}

/// What a top list ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Hits asked for.
    Hits,
    /// Hits answered OVER_LIMIT (or that shadow mode let through).
    OverLimit,
}

impl By {
    /// The name used in `/top` (`hits`, `over_limit`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hits => "hits",
            Self::OverLimit => "over_limit",
        }
    }

    /// Parses [`By::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Hits, Self::OverLimit]
            .into_iter()
            .find(|by| by.as_str() == text)
    }
}

/// The span a top list covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last minute (10-second slots).
    Minute,
    /// The last hour (10-minute slots).
    Hour,
}

impl Window {
    /// The name used in `/top` (`1m`, `1h`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "1m",
            Self::Hour => "1h",
        }
    }

    /// Parses [`Window::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Minute, Self::Hour]
            .into_iter()
            .find(|w| w.as_str() == text)
    }

    const fn slot_secs(self) -> u64 {
        match self {
            Self::Minute => 10,
            Self::Hour => 600,
        }
    }
}

/// One entry of a top list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopItem {
    /// The descriptor's entries (cut to fit
    /// [`MAX_LABEL_BYTES`](super::summary::MAX_LABEL_BYTES) bytes in all, at
    /// most [`MAX_LABEL_ENTRIES`](super::summary::MAX_LABEL_ENTRIES)).
    pub entries: Vec<(String, String)>,
    /// Estimated hits: never below the true number.
    pub count: u64,
    /// Bound on the overcount: the true number is at least `count - error`.
    pub error: u64,
}

/// Per-domain heavy hitters; shared by the limiter (which records) and the
/// HTTP views (which read).
#[derive(Debug)]
pub struct TopRecorder {
    hasher: foldhash::quality::RandomState,
    /// Read on every request without a shared write (no lock, no
    /// reference count); replaced whole when a domain is added.
    domains: ArcSwap<Domains>,
    /// Serialises the rare additions.
    adding: Mutex<()>,
}

/// The domain map, looked up on every request: domains are at most
/// [`MAX_DOMAINS`] names from rule files, so a caller's domain probes at
/// most that many entries whatever it hashes to; a fast hash suffices.
type Domains = HashMap<Box<str>, Arc<Shards>, foldhash::fast::RandomState>;

/// One domain's rings, one set per shard (built on first use), each
/// shard's lock on a cache line of its own: threads locking their own
/// shards must not write one line between them.
type Shards = [CachePadded<Mutex<Option<Box<DomainTop>>>>];

impl Default for TopRecorder {
    fn default() -> Self {
        Self {
            hasher: foldhash::quality::RandomState::default(),
            domains: ArcSwap::from_pointee(Domains::default()),
            adding: Mutex::new(()),
        }
    }
}

impl TopRecorder {
    /// The keyed hash of a descriptor's entries: descriptors with equal
    /// entries share an item. Two different descriptors collide with
    /// probability about 2^-64 per pair (foldhash's quality hash, seeded at
    /// random per process).
    pub fn hash(&self, entries: &[Entry]) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        for entry in entries {
            entry.key.hash(&mut hasher);
            entry.value.hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Adds the rings of `domain` while fewer than [`MAX_DOMAINS`] are
    /// tracked; `is_known` says whether a domain may be tracked (a rule file
    /// declares it), and frees the room of domains no longer declared.
    fn add_domain(&self, domain: &str, is_known: impl Fn(&str) -> bool) {
        if !is_known(domain) {
            return;
        }
        let _adding = self.adding.lock();
        let current = self.domains.load();
        if current.contains_key(domain) {
            return;
        }
        let mut domains: Domains = (**current).clone();
        if domains.len() >= MAX_DOMAINS {
            // Rules were reloaded: forget domains no rule file declares.
            domains.retain(|name, _| is_known(name));
            if domains.len() >= MAX_DOMAINS {
                return;
            }
        }
        let shards: Arc<Shards> = (0..shard_count())
            .map(|_| CachePadded::new(Mutex::new(None)))
            .collect();
        domains.insert(domain.into(), shards);
        self.domains.store(Arc::new(domains));
    }

    /// Records one request's descriptors of `domain`: for each, its entries,
    /// its hits and the hits answered over the limit (or that shadow mode
    /// let through). Domains `is_known` rejects are not tracked.
    pub fn record<'a>(
        &self,
        domain: &str,
        descriptors: impl IntoIterator<Item = (&'a [Entry], u64, u64)>,
        now: UnixMillis,
        is_known: impl Fn(&str) -> bool,
    ) {
        let mut domains = self.domains.load();
        if !domains.contains_key(domain) {
            self.add_domain(domain, is_known);
            domains = self.domains.load();
        }
        let Some(shard) = domains
            .get(domain)
            .and_then(|shards| shards.get(my_shard()))
        else {
            return;
        };
        for (entries, hits, over) in descriptors {
            if hits == 0 && over == 0 {
                continue;
            }
            let hash = self.hash(entries);
            let label = |label: &mut Label| {
                label.set(entries.iter().map(|e| (e.key.as_str(), e.value.as_str())));
            };
            let mut shard = shard.lock();
            let top = shard.get_or_insert_with(|| Box::new(DomainTop::new()));
            for ring in [&mut top.minute, &mut top.hour] {
                if let Some(slot) = ring.current(now) {
                    slot.hits.add(hash, hits, label);
                    slot.over.add(hash, over, label);
                }
            }
        }
    }

    /// The `n` heaviest descriptors of `domain` by `by` over `window` ending
    /// at `now`, heaviest first (ties by text); empty for a domain not
    /// tracked.
    pub fn top(
        &self,
        domain: &str,
        by: By,
        window: Window,
        n: usize,
        now: UnixMillis,
    ) -> Vec<TopItem> {
        let Some(shards) = self.domains.load().get(domain).cloned() else {
            return Vec::new();
        };
        let locked: Vec<_> = shards.iter().map(|shard| shard.lock()).collect();
        let slots: Vec<&SpaceSaving> = locked
            .iter()
            .filter_map(|shard| shard.as_deref())
            .flat_map(|top| top.ring(window).live(now).map(|s| s.summary(by)))
            .collect();
        let mut merged: HashMap<u64, TopItem> = HashMap::new();
        for summary in &slots {
            for held in summary.items() {
                merged.entry(held.hash).or_insert_with(|| TopItem {
                    entries: held
                        .label
                        .entries()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    count: 0,
                    error: 0,
                });
            }
        }
        for (hash, item) in &mut merged {
            for summary in &slots {
                let (count, error) = match summary.get(*hash) {
                    Some(held) => held,
                    // The most it can have had in a full slot that lost it.
                    None if summary.is_full() => (summary.min_count(), summary.min_count()),
                    None => (0, 0),
                };
                item.count = item.count.saturating_add(count);
                item.error = item.error.saturating_add(error);
            }
        }
        let mut items: Vec<TopItem> = merged.into_values().collect();
        items.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.entries.cmp(&b.entries))
        });
        items.truncate(n);
        items
    }

    /// Total hits (by `by`) of `domain` over `window`, exact.
    pub fn total(&self, domain: &str, by: By, window: Window, now: UnixMillis) -> u64 {
        let Some(shards) = self.domains.load().get(domain).cloned() else {
            return 0;
        };
        shards
            .iter()
            .map(|shard| {
                shard.lock().as_deref().map_or(0, |top| {
                    top.ring(window)
                        .live(now)
                        .map(|s| s.summary(by).total())
                        .fold(0, u64::saturating_add)
                })
            })
            .fold(0, u64::saturating_add)
    }

    /// The domains tracked, sorted.
    pub fn domains(&self) -> Vec<String> {
        let mut names: Vec<String> = self.domains.load().keys().map(|d| d.to_string()).collect();
        names.sort();
        names
    }

    /// Heap bytes held by every tracked domain.
    pub fn heap_bytes(&self) -> usize {
        self.domains
            .load()
            .values()
            .flat_map(|shards| shards.iter())
            .map(|shard| {
                shard
                    .lock()
                    .as_deref()
                    .map_or(0, |top| top.minute.heap_bytes() + top.hour.heap_bytes())
            })
            .sum()
    }

    /// The most heap bytes one domain can hold: per shard, two rings of
    /// `SLOTS` slots, each two summaries of `TOP_K` counters.
    pub fn max_domain_bytes() -> usize {
        shard_count()
            * (std::mem::size_of::<DomainTop>()
                + 2 * SLOTS
                    * (std::mem::size_of::<Slot>() + 2 * SpaceSaving::max_heap_bytes(TOP_K)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(value: &str) -> Vec<Entry> {
        vec![Entry::new("user", value)]
    }

    const T0: UnixMillis = UnixMillis(1_700_000_000_000);

    fn at_secs(secs: u64) -> UnixMillis {
        UnixMillis(T0.0 + secs * 1_000)
    }

    #[test]
    fn threads_record_into_shards_that_queries_merge() {
        let top = Arc::new(TopRecorder::default());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let top = Arc::clone(&top);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        let hot = entries("hot");
                        let own = entries(&format!("t{t}"));
                        top.record(
                            "d",
                            [(hot.as_slice(), 1, 0), (own.as_slice(), 2, 1)],
                            T0,
                            |_| true,
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let items = top.top("d", By::Hits, Window::Minute, 10, T0);
        assert_eq!(items[0].entries, [("user".to_owned(), "hot".to_owned())]);
        assert_eq!((items[0].count, items[0].error), (400, 0));
        assert!(items[1..].iter().all(|i| i.count == 200 && i.error == 0));
        assert_eq!(top.total("d", By::Hits, Window::Minute, T0), 400 + 4 * 200);
        assert_eq!(top.total("d", By::OverLimit, Window::Minute, T0), 400);
        assert!(top.heap_bytes() <= TopRecorder::max_domain_bytes());
    }

    #[test]
    fn hot_first_within_the_bound_and_exactly_the_limited_ones() {
        let top = TopRecorder::default();
        let hot = entries("hot");
        let others: Vec<Vec<Entry>> = (0..200).map(|i| entries(&format!("u{i}"))).collect();
        for round in 0..5 {
            for (i, other) in others.iter().enumerate() {
                // u0..u19 are limited from their fourth hit on.
                let over = u64::from(i < 20 && round >= 3);
                top.record("d", [(other.as_slice(), 1, over)], T0, |_| true);
            }
            for _ in 0..200 {
                top.record("d", [(hot.as_slice(), 1, 0)], T0, |_| true);
            }
        }
        let hits = top.top("d", By::Hits, Window::Minute, 10, T0);
        let first = &hits[0];
        assert_eq!(first.entries, [("user".to_owned(), "hot".to_owned())]);
        assert!(first.count >= 1_000 && first.count - first.error <= 1_000);
        assert!(first.error <= 2_000 / TOP_K as u64, "error {}", first.error);
        let over = top.top("d", By::OverLimit, Window::Minute, 100, T0);
        let mut limited: Vec<String> = over.iter().map(|i| i.entries[0].1.clone()).collect();
        limited.sort();
        let mut expected: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
        expected.sort();
        assert_eq!(limited, expected);
        assert!(over.iter().all(|i| i.count == 2 && i.error == 0));
        assert_eq!(top.total("d", By::Hits, Window::Minute, T0), 2_000);
    }

    #[test]
    fn windows_slide_by_slots() {
        let top = TopRecorder::default();
        let a = entries("a");
        top.record("d", [(a.as_slice(), 3, 0)], T0, |_| true);
        let count = |now| {
            top.top("d", By::Hits, Window::Minute, 1, now)
                .first()
                .map_or(0, |i| i.count)
        };
        assert_eq!(count(at_secs(0)), 3);
        assert_eq!(count(at_secs(49)), 3);
        assert_eq!(count(at_secs(70)), 0, "a minute later it left the minute");
        let hour = top.top("d", By::Hits, Window::Hour, 1, at_secs(70));
        assert_eq!(hour[0].count, 3, "but not the hour");
        // The slot is reused for a later epoch: old counts are gone.
        top.record("d", [(a.as_slice(), 1, 0)], at_secs(60), |_| true);
        assert_eq!(count(at_secs(60)), 1);
    }

    #[test]
    fn unknown_domains_are_not_tracked_and_domains_are_capped() {
        let top = TopRecorder::default();
        let a = entries("a");
        top.record("ghost", [(a.as_slice(), 1, 0)], T0, |_| false);
        assert!(top.domains().is_empty());
        for d in 0..MAX_DOMAINS + 5 {
            top.record(&format!("d{d}"), [(a.as_slice(), 1, 0)], T0, |_| true);
        }
        assert_eq!(top.domains().len(), MAX_DOMAINS);
        // After a reload that dropped every domain, new ones take the room.
        top.record("fresh", [(a.as_slice(), 1, 0)], T0, |d| d == "fresh");
        assert_eq!(top.domains(), ["fresh"]);
    }

    #[test]
    fn memory_stays_bounded_with_a_million_distinct_values() {
        let top = TopRecorder::default();
        let long = "v".repeat(500);
        for i in 0..1_000_000u64 {
            let e = vec![Entry::new("user", format!("{long}{i}"))];
            // Spread over the minute ring's slots and the hour's first.
            top.record("d", [(e.as_slice(), 1, i % 2)], at_secs(i / 20_000), |_| {
                true
            });
        }
        assert!(
            top.heap_bytes() <= TopRecorder::max_domain_bytes(),
            "{} > {}",
            top.heap_bytes(),
            TopRecorder::max_domain_bytes()
        );
    }
}
