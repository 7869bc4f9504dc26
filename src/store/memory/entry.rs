//! One counter of the embedded store: its key (identity and kind), its
//! algorithm state, its expiry, what it is charged against the budget, and
//! how one operation runs on it.

use crate::algorithm::concurrency::Slots;
use crate::algorithm::fixed_window::{Counter, is_over_limit};
use crate::algorithm::gcra::Gcra;
use crate::algorithm::sliding_log::Log;
use crate::algorithm::sliding_window::Buckets;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::store::CounterId;

/// Which state of a counter identity: each algorithm (and window shape) has
/// its own, as each has its own Redis key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum CounterKind {
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
    Concurrency,
}

impl CounterKind {
    pub(super) fn of(spec: &Spec, now: UnixMillis) -> Self {
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
            Spec::Concurrency(_) => Self::Concurrency,
        }
    }
}

/// A counter's key in its shard's map, carrying its hash: the identity is
/// hashed once per operation (with the store's keyed hasher, which also
/// picks the shard), outside the shard's lock, and the map only reads the
/// hash back.
#[derive(Debug, Clone)]
pub(super) struct EntryKey {
    pub(super) id: CounterId,
    pub(super) kind: CounterKind,
    hash: u64,
}

impl EntryKey {
    /// The key of `id`'s `kind` state, `id_hash` being the keyed hash of
    /// `id`. Its hash mixes the kind into it with a bijective finalizer,
    /// so the keys of one shard (whose identity hashes share their low
    /// bits) spread over the whole map, and stay as unpredictable to a
    /// caller choosing descriptors as the keyed hash is.
    pub(super) fn new(id_hash: u64, id: CounterId, kind: CounterKind) -> Self {
        let code = match kind {
            CounterKind::Fixed {
                window_secs,
                start_secs,
            } => mix(mix(1 ^ window_secs) ^ start_secs),
            CounterKind::Sliding => 2,
            CounterKind::Log => 3,
            CounterKind::Gcra { interval_us, burst } => mix(mix(4 ^ interval_us) ^ burst),
            CounterKind::Concurrency => 5,
        };
        Self {
            id,
            kind,
            hash: mix(id_hash ^ code),
        }
    }
}

/// SplitMix64's finalizer: every input bit moves every output bit.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl PartialEq for EntryKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.kind == other.kind && self.id == other.id
    }
}

impl Eq for EntryKey {}

impl std::hash::Hash for EntryKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The map's hasher: hands on the hash an [`EntryKey`] carries.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Carried(u64);

impl std::hash::Hasher for Carried {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only write_u64 is ever called (EntryKey's Hash); anything else
        // still hashes, by folding.
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
}

/// Builds [`Carried`] hashers.
pub(super) type CarriedHash = std::hash::BuildHasherDefault<Carried>;

#[derive(Debug, Clone)]
pub(super) enum State {
    Fixed(Counter),
    Sliding(Buckets),
    Log(Log),
    /// Theoretical arrival time, µs.
    Gcra(Option<u64>),
    Slots(Slots),
}

impl State {
    pub(super) fn new(spec: &Spec) -> Self {
        match spec {
            Spec::FixedWindow { .. } => Self::Fixed(Counter::default()),
            Spec::SlidingWindow(_) => Self::Sliding(Buckets::default()),
            Spec::SlidingLog(_) => Self::Log(Log::default()),
            Spec::Gcra(_) => Self::Gcra(None),
            Spec::Concurrency(_) => Self::Slots(Slots::default()),
        }
    }
}

impl State {
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Self::Sliding(buckets) => buckets.heap_bytes(),
            Self::Log(log) => log.heap_bytes(),
            Self::Slots(slots) => slots.heap_bytes(),
            Self::Fixed(_) | Self::Gcra(_) => 0,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) state: State,
    pub(super) expires_at: UnixMillis,
    /// When it was last used: its shard's LRU order is only the order
    /// within the shard, so a snapshot keeps this to replay the counters
    /// of every shard oldest first.
    pub(super) used_at: UnixMillis,
    /// What this counter is charged against the budget.
    pub(super) bytes: usize,
}

/// Per-entry bookkeeping of the LRU map beyond key and value (hash table
/// slot, list links, allocation headers), charged to every counter.
pub(super) const ENTRY_OVERHEAD: usize = 64;

/// The bytes one counter holds: its key's text, its state's heap and the
/// fixed size of an entry.
pub(super) fn charge(key_len: usize, state: &State) -> usize {
    key_len
        + state.heap_bytes()
        + std::mem::size_of::<EntryKey>()
        + std::mem::size_of::<Entry>()
        + ENTRY_OVERHEAD
}

impl Entry {
    /// Runs one operation on this counter's state.
    pub(super) fn apply(
        &mut self,
        spec: &Spec,
        hits: u64,
        now: UnixMillis,
        refuse_over: bool,
    ) -> Outcome {
        match (spec, &mut self.state) {
            (Spec::FixedWindow { window, limit }, State::Fixed(counter)) => {
                if refuse_over && hits > 0 {
                    let before = window.current(counter, now);
                    if is_over_limit(before.saturating_add(hits), *limit) {
                        return window.refused(before, hits, *limit, now);
                    }
                }
                let tally = window.apply(counter, now, hits);
                self.expires_at = window.expires_at(now);
                window.outcome(tally, *limit, now, true)
            }
            (Spec::SlidingWindow(sw), State::Sliding(buckets)) => {
                let counts = buckets.counts(sw, now);
                let admitted = sw.admits(&counts, hits);
                let counted = sw.counts_hits(admitted, hits) && (admitted || !refuse_over);
                if counted {
                    buckets.add(sw, now, hits);
                    self.expires_at =
                        now.saturating_add(std::time::Duration::from_secs(sw.ttl_secs()));
                }
                sw.outcome(&counts, hits, counted, now)
            }
            (Spec::SlidingLog(sl), State::Log(log)) => {
                let outcome = log.apply(sl, now, hits);
                if outcome.counted {
                    self.expires_at =
                        now.saturating_add(std::time::Duration::from_millis(sl.longest_ms()));
                }
                outcome
            }
            (Spec::Gcra(gcra), State::Gcra(tat)) => {
                let (new_tat, outcome) = gcra.decide(*tat, now, hits);
                if let Some(new_tat) = new_tat {
                    *tat = Some(new_tat);
                    self.expires_at = now.saturating_add(std::time::Duration::from_millis(
                        Gcra::ttl_ms(new_tat, now),
                    ));
                }
                outcome
            }
            (Spec::Concurrency(c), State::Slots(slots)) => {
                let outcome = slots.apply(c, now, hits);
                // Kept while a slot is held; then reclaimable.
                self.expires_at = UnixMillis(slots.last_expiry_ms()).max(now);
                outcome
            }
            // The slot kind is derived from the spec, so the state always
            // matches; answer "nothing known" rather than panic.
            (spec, state) => {
                *state = State::new(spec);
                Outcome::NOTHING
            }
        }
    }
}
