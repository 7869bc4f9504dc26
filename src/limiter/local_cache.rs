//! The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`): fixed-window
//! counters known to be over their limit until their window ends are
//! answered in process, with no store round trip, as the reference's
//! freecache does.
//!
//! Bounded by an approximate byte budget; when full, expired entries are
//! dropped first and new entries are skipped if it is still full, so memory
//! never grows past the budget.

use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::store::CounterId;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Bytes charged per entry beyond the identity text: map slot, window and
/// expiry.
const ENTRY_OVERHEAD_BYTES: usize = 64;

#[derive(Debug, Default)]
struct Entries {
    /// Per counter identity: (window length, window end) of each window
    /// known to be over its limit.
    map: HashMap<CounterId, Vec<(u64, UnixMillis)>>,
    bytes: usize,
}

/// Counters known to be over their limit, until their window ends.
#[derive(Debug)]
pub(crate) struct LocalCache {
    max_bytes: usize,
    entries: Mutex<Entries>,
}

impl LocalCache {
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The over-limit answer for `id` under `spec` at `now`, if cached.
    pub(crate) fn get(&self, id: &CounterId, spec: Spec, now: UnixMillis) -> Option<Outcome> {
        let Spec::FixedWindow { window, limit } = spec else {
            return None;
        };
        let entries = self.entries.lock();
        let windows = entries.map.get(id)?;
        // Only inside the very window that went over: after a clock step
        // back into an earlier window, that window's own counter decides.
        let ends_now = window.expires_at(now);
        let hit = windows
            .iter()
            .any(|&(secs, ends)| secs == window.window_secs() && ends == ends_now);
        hit.then(|| {
            let mut outcome = window.refused(limit, 1, limit, now);
            outcome.before = 0;
            outcome.after = 0;
            outcome
        })
    }

    /// Remembers that `id` is over its limit under `spec` until the window
    /// containing `now` ends.
    pub(crate) fn insert(&self, id: &CounterId, spec: Spec, now: UnixMillis) {
        // Only fixed windows have a known end; other algorithms recover
        // continuously and are always asked.
        let Spec::FixedWindow { window, .. } = spec else {
            return;
        };
        let ends = window.expires_at(now);
        let mut entries = self.entries.lock();
        let cost = id.as_str().len() + ENTRY_OVERHEAD_BYTES;
        if entries.bytes + cost > self.max_bytes {
            entries.evict_expired(now);
            if entries.bytes + cost > self.max_bytes {
                return;
            }
        }
        let windows = entries.map.entry(id.clone()).or_default();
        match windows
            .iter_mut()
            .find(|(secs, _)| *secs == window.window_secs())
        {
            Some(slot) => slot.1 = ends,
            None => {
                windows.push((window.window_secs(), ends));
                entries.bytes += cost;
            }
        }
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.entries.lock().bytes
    }
}

impl Entries {
    fn evict_expired(&mut self, now: UnixMillis) {
        let mut freed = 0;
        self.map.retain(|id, windows| {
            let before = windows.len();
            windows.retain(|&(_, ends)| now < ends);
            freed += (before - windows.len()) * (id.as_str().len() + ENTRY_OVERHEAD_BYTES);
            !windows.is_empty()
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::FixedWindow;

    fn spec(window_secs: u64) -> Spec {
        Spec::FixedWindow {
            window: FixedWindow::new(window_secs),
            limit: 5,
        }
    }

    #[test]
    fn hits_until_the_window_ends() {
        let cache = LocalCache::new(1 << 20);
        let id = CounterId::new("d", [("k", "v")]);
        let now = UnixMillis::from_secs(1_210);
        assert!(cache.get(&id, spec(60), now).is_none());
        cache.insert(&id, spec(60), now);
        let hit = cache.get(&id, spec(60), UnixMillis(1_259_999)).unwrap();
        assert!(hit.over_limit && !hit.counted);
        assert_eq!((hit.remaining, hit.reset.as_secs()), (0, 1));
        assert!(
            cache
                .get(&id, spec(60), UnixMillis::from_secs(1_260))
                .is_none()
        );
        assert!(
            cache.get(&id, spec(1), now).is_none(),
            "other window lengths are separate"
        );
    }

    #[test]
    fn never_grows_past_its_budget() {
        let budget = 10 * (20 + ENTRY_OVERHEAD_BYTES);
        let cache = LocalCache::new(budget);
        let now = UnixMillis::from_secs(1_000);
        for i in 0..1_000 {
            cache.insert(
                &CounterId::new("d", [("k", format!("v{i}").as_str())]),
                spec(60),
                now,
            );
            assert!(cache.bytes() <= budget);
        }
        // Once the old entries expire they make room again.
        let later = UnixMillis::from_secs(1_100);
        let fresh = CounterId::new("d", [("k", "fresh")]);
        cache.insert(&fresh, spec(60), later);
        assert!(cache.get(&fresh, spec(60), later).is_some());
    }
}
