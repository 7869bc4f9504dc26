//! What one RLQS stream remembers: its domain, and per bucket the last
//! assignment pushed, when, and when the bucket last saw traffic. Decides
//! what to push after a report (first report, a changed split, or a
//! refresh before the assignment's TTL runs out) and when a bucket has been
//! idle long enough to be abandoned. Pure: time comes in as `now`.

use crate::algorithm::quota_split::Strategy;
use crate::clock::UnixMillis;
use crate::descriptor::Entry;
use std::collections::HashMap;
use std::time::Duration;

/// A bucket id as a descriptor: its pairs sorted by key.
pub(crate) type BucketKey = Vec<(String, String)>;

/// Why a bucket id or a domain is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InputError {
    /// A bucket id without any pair.
    #[error("bucket id has no entries")]
    EmptyBucket,
    /// A bucket id with more pairs than allowed.
    #[error("bucket id has {count} entries, more than the limit of {max}")]
    TooManyEntries {
        /// Pairs sent.
        count: usize,
        /// The bound (`MAX_DESCRIPTOR_ENTRIES`).
        max: usize,
    },
    /// One pair longer than allowed.
    #[error("bucket id entry '{key}' has {bytes} bytes, more than the limit of {max}")]
    EntryTooLarge {
        /// The key, cut to 64 bytes.
        key: String,
        /// Key plus value bytes.
        bytes: usize,
        /// The bound (`MAX_ENTRY_BYTES`).
        max: usize,
    },
    /// A pair with an empty key.
    #[error("bucket id has an empty key")]
    EmptyKey,
    /// The first report has no domain.
    #[error("rate limit quota domain must not be empty")]
    EmptyDomain,
    /// A domain longer than allowed.
    #[error("domain has {bytes} bytes, more than the limit of {max}")]
    DomainTooLong {
        /// Bytes sent.
        bytes: usize,
        /// The bound (`MAX_DOMAIN_BYTES`).
        max: usize,
    },
    /// A later report names another domain than the first.
    #[error("domain changed on the stream from '{from}'; open a new stream for another domain")]
    DomainChanged {
        /// The stream's domain.
        from: String,
    },
}

/// Bounds on what one stream may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBounds {
    /// Most pairs in a bucket id (`MAX_DESCRIPTOR_ENTRIES`).
    pub max_entries: usize,
    /// Most bytes in one pair, key plus value (`MAX_ENTRY_BYTES`).
    pub max_entry_bytes: usize,
    /// Most bytes in the domain (`MAX_DOMAIN_BYTES`).
    pub max_domain_bytes: usize,
    /// Most distinct buckets one stream may track at once.
    pub max_buckets: usize,
}

impl Default for StreamBounds {
    fn default() -> Self {
        Self {
            max_entries: 32,
            max_entry_bytes: 4_096,
            max_domain_bytes: 256,
            max_buckets: 10_000,
        }
    }
}

/// The bucket id's pairs sorted by key, checked against `bounds`.
///
/// # Errors
///
/// [`InputError`] naming the bound that was crossed.
pub(crate) fn bucket_key(
    pairs: impl ExactSizeIterator<Item = (String, String)>,
    bounds: &StreamBounds,
) -> Result<BucketKey, InputError> {
    let count = pairs.len();
    if count == 0 {
        return Err(InputError::EmptyBucket);
    }
    if count > bounds.max_entries {
        return Err(InputError::TooManyEntries {
            count,
            max: bounds.max_entries,
        });
    }
    let mut key: BucketKey = pairs.collect();
    for (k, v) in &key {
        if k.is_empty() {
            return Err(InputError::EmptyKey);
        }
        let bytes = k.len() + v.len();
        if bytes > bounds.max_entry_bytes {
            let mut end = k.len().min(64);
            while !k.is_char_boundary(end) {
                end -= 1;
            }
            return Err(InputError::EntryTooLarge {
                key: k.get(..end).unwrap_or_default().to_owned(),
                bytes,
                max: bounds.max_entry_bytes,
            });
        }
    }
    key.sort();
    Ok(key)
}

/// The descriptor entries a bucket key is matched as.
pub(crate) fn entries(key: &BucketKey) -> Vec<Entry> {
    key.iter()
        .map(|(k, v)| Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// What the stream remembers of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketState {
    /// The last assignment pushed, if any.
    pub pushed: Option<Strategy>,
    /// When it was pushed.
    pub pushed_at: UnixMillis,
    /// When the bucket last reported requests (or was first seen).
    pub active_at: UnixMillis,
}

/// What to do with one reported bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Keep it and decide its assignment.
    Track,
    /// Tell the Envoy to forget it: idle past the idle timeout. Carries the
    /// assignment it had, now withdrawn.
    Abandon(Option<Strategy>),
    /// Not tracked: the stream already tracks its most buckets.
    Refuse,
}

/// One stream's memory.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    domain: Option<String>,
    buckets: HashMap<BucketKey, BucketState>,
}

impl StreamState {
    /// Number of buckets tracked.
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no bucket is tracked.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Every tracked bucket's last assignment.
    pub(crate) fn pushed(&self) -> impl Iterator<Item = Strategy> + '_ {
        self.buckets.values().filter_map(|state| state.pushed)
    }

    /// Checks a report's `domain` (empty means "as before"): the first
    /// report names it, later ones may not change it.
    ///
    /// # Errors
    ///
    /// [`InputError`] for a missing, too long or changed domain.
    pub(crate) fn check_domain(
        &mut self,
        domain: &str,
        max_bytes: usize,
    ) -> Result<&str, InputError> {
        match &self.domain {
            Some(known) if domain.is_empty() || domain == known => {}
            Some(known) => {
                return Err(InputError::DomainChanged {
                    from: known.clone(),
                });
            }
            None if domain.is_empty() => return Err(InputError::EmptyDomain),
            None if domain.len() > max_bytes => {
                return Err(InputError::DomainTooLong {
                    bytes: domain.len(),
                    max: max_bytes,
                });
            }
            None => self.domain = Some(domain.to_owned()),
        }
        Ok(self.domain.as_deref().unwrap_or_default())
    }

    /// Records a report of `requests` on `key` at `now` and says what to
    /// do with the bucket. A new bucket is tracked while the stream has
    /// room; a bucket that saw no request for `idle` is abandoned (and
    /// forgotten here).
    pub(crate) fn observe(
        &mut self,
        key: &BucketKey,
        requests: u64,
        now: UnixMillis,
        idle: Duration,
        max_buckets: usize,
    ) -> (Step, bool) {
        let full = self.buckets.len() >= max_buckets;
        match self.buckets.get_mut(key) {
            Some(state) => {
                if requests > 0 {
                    state.active_at = now;
                    return (Step::Track, false);
                }
                let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
                if now.0.saturating_sub(state.active_at.0) >= idle_ms {
                    let withdrawn = state.pushed;
                    self.buckets.remove(key);
                    return (Step::Abandon(withdrawn), false);
                }
                (Step::Track, false)
            }
            None if full => (Step::Refuse, false),
            None => {
                self.buckets.insert(
                    key.clone(),
                    BucketState {
                        pushed: None,
                        pushed_at: now,
                        active_at: now,
                    },
                );
                (Step::Track, true)
            }
        }
    }

    /// Whether `strategy` must be pushed for `key` at `now`: never pushed,
    /// changed, or pushed half a `ttl` ago or more (a refresh, so the
    /// Envoy's copy never expires while the stream lives). Records the
    /// push and returns the assignment it replaces.
    pub(crate) fn should_push(
        &mut self,
        key: &BucketKey,
        strategy: Strategy,
        now: UnixMillis,
        ttl: Duration,
    ) -> Option<Option<Strategy>> {
        let state = self.buckets.get_mut(key)?;
        let half_ttl = u64::try_from(ttl.as_millis() / 2).unwrap_or(u64::MAX);
        let due = match state.pushed {
            None => true,
            Some(previous) => {
                previous != strategy || now.0.saturating_sub(state.pushed_at.0) >= half_ttl
            }
        };
        if !due {
            return None;
        }
        let previous = state.pushed.replace(strategy);
        state.pushed_at = now;
        Some(previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::quota_split::TokenBucket;

    fn key(pairs: &[(&str, &str)]) -> BucketKey {
        bucket_key(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            &StreamBounds::default(),
        )
        .unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn bucket_ids_are_sorted_and_bounded() {
        assert_eq!(
            key(&[("b", "2"), ("a", "1")]),
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        let bounds = StreamBounds {
            max_entries: 2,
            max_entry_bytes: 8,
            ..StreamBounds::default()
        };
        let pairs = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
                .into_iter()
        };
        assert_eq!(
            bucket_key(pairs(&[("a", "1"), ("b", "2"), ("c", "3")]), &bounds),
            Err(InputError::TooManyEntries { count: 3, max: 2 })
        );
        assert_eq!(
            bucket_key(pairs(&[("key", "value!")]), &bounds)
                .unwrap_err()
                .to_string(),
            "bucket id entry 'key' has 9 bytes, more than the limit of 8"
        );
        assert_eq!(
            bucket_key(pairs(&[]), &bounds),
            Err(InputError::EmptyBucket)
        );
        assert_eq!(
            bucket_key(pairs(&[("", "v")]), &bounds),
            Err(InputError::EmptyKey)
        );
    }

    #[test]
    fn the_domain_is_set_once() {
        let mut state = StreamState::default();
        assert_eq!(state.check_domain("", 8), Err(InputError::EmptyDomain));
        assert!(matches!(
            state.check_domain("much-too-long", 8),
            Err(InputError::DomainTooLong { bytes: 13, max: 8 })
        ));
        assert_eq!(state.check_domain("edge", 8), Ok("edge"));
        assert_eq!(state.check_domain("", 8), Ok("edge"));
        assert_eq!(state.check_domain("edge", 8), Ok("edge"));
        assert_eq!(
            state.check_domain("other", 8).unwrap_err().to_string(),
            "domain changed on the stream from 'edge'; open a new stream for another domain"
        );
    }

    #[test]
    fn pushes_first_changed_and_refreshes_before_the_ttl() {
        let mut state = StreamState::default();
        let k = key(&[("user", "a")]);
        let t = |s: u64| UnixMillis(1_000_000 + s * 1_000);
        let ttl = 10 * SECOND;
        assert_eq!(
            state.observe(&k, 1, t(0), 60 * SECOND, 10),
            (Step::Track, true)
        );
        assert_eq!(
            state.should_push(&k, Strategy::AllowAll, t(0), ttl),
            Some(None)
        );
        assert_eq!(state.should_push(&k, Strategy::AllowAll, t(4), ttl), None);
        assert_eq!(
            state.should_push(&k, Strategy::DenyAll, t(4), ttl),
            Some(Some(Strategy::AllowAll))
        );
        // Half the TTL after the last push, the same assignment again.
        assert_eq!(
            state.should_push(&k, Strategy::DenyAll, t(9), ttl),
            Some(Some(Strategy::DenyAll))
        );
        let bucket = Strategy::TokenBucket(TokenBucket {
            max_tokens: 1,
            tokens_per_fill: 1,
            fill_interval_secs: 1,
        });
        assert_eq!(
            state.should_push(&k, bucket, t(9), ttl),
            Some(Some(Strategy::DenyAll))
        );
        assert_eq!(state.pushed().collect::<Vec<_>>(), vec![bucket]);
    }

    #[test]
    fn idle_buckets_are_abandoned_and_busy_ones_kept() {
        let mut state = StreamState::default();
        let k = key(&[("user", "a")]);
        let t = |s: u64| UnixMillis(1_000_000 + s * 1_000);
        let idle = 30 * SECOND;
        state.observe(&k, 3, t(0), idle, 10);
        assert_eq!(state.observe(&k, 0, t(29), idle, 10).0, Step::Track);
        assert_eq!(state.observe(&k, 2, t(29), idle, 10).0, Step::Track);
        assert_eq!(state.observe(&k, 0, t(58), idle, 10).0, Step::Track);
        assert_eq!(state.observe(&k, 0, t(59), idle, 10).0, Step::Abandon(None));
        assert!(state.is_empty());
        // Seen again: a new bucket.
        assert_eq!(state.observe(&k, 1, t(60), idle, 10), (Step::Track, true));
    }

    #[test]
    fn a_stream_tracks_a_bounded_number_of_buckets() {
        let mut state = StreamState::default();
        let now = UnixMillis(1_000);
        for i in 0..3 {
            let k = key(&[("user", &i.to_string())]);
            assert_eq!(state.observe(&k, 1, now, SECOND, 3).0, Step::Track);
        }
        let extra = key(&[("user", "x")]);
        assert_eq!(
            state.observe(&extra, 1, now, SECOND, 3),
            (Step::Refuse, false)
        );
        assert_eq!(state.len(), 3);
        // Known buckets still report.
        let known = key(&[("user", "0")]);
        assert_eq!(state.observe(&known, 1, now, SECOND, 3).0, Step::Track);
    }
}
