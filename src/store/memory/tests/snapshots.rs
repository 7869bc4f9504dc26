//! Snapshots of the embedded store: written, read back, under budgets.

use super::*;
use crate::algorithm::{Concurrency, Gcra, Limits, SlidingLog, SlidingWindow};
use proptest::prelude::*;

/// One spec per algorithm, with limits small enough to be reached
/// (concurrency: 4 acquires, 5 releases, the member given).
fn spec(alg: u8, member: u64) -> Spec {
    match alg % 6 {
        4 | 5 => Spec::Concurrency(Concurrency::new(2, 10_000).for_member(member, alg == 5)),
        0 => Spec::FixedWindow {
            window: FixedWindow::new(60),
            limit: 7,
        },
        1 => Spec::SlidingWindow(SlidingWindow::new(Limits::new([(5, 10), (9, 60)]), false)),
        2 => Spec::SlidingLog(SlidingLog::new(Limits::new([(4, 5_000), (8, 60_000)]))),
        _ => Spec::Gcra(Gcra::new(6, 60_000, 3)),
    }
}

/// Concurrency operations take `hits` as the member and count 1.
fn apply(store: &MemoryStore, alg: u8, key: u8, hits: u64, now: UnixMillis) -> Outcome {
    let slot = alg % 6 >= 4;
    store.apply(
        batch(vec![Op {
            id: CounterId::new("d", [("k", format!("{key}").as_str())]),
            spec: spec(alg, hits),
            hits: if slot { 1 } else { hits },
            lease: None,
        }]),
        now,
    )[0]
}

fn config(dir: &tempfile::TempDir) -> SnapshotConfig {
    SnapshotConfig {
        path: dir.path().join("counters.snap"),
        interval: std::time::Duration::from_secs(1),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Counters of every algorithm, written and read back into a new
    /// store, continue exactly: every later request gets the same
    /// answer from both stores.
    #[test]
    fn a_restored_store_answers_as_the_one_it_was_written_from(
        before in proptest::collection::vec((0u8..6, 0u8..3, 0u64..3, 0u64..4_000), 1..60),
        down_ms in 0u64..20_000,
        after in proptest::collection::vec((0u8..6, 0u8..3, 0u64..3, 0u64..4_000), 1..60),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let original = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
        let mut now = UnixMillis::from_secs(1_700_000_000);
        for &(alg, key, hits, step) in &before {
            now = now.saturating_add(std::time::Duration::from_millis(step));
            apply(&original, alg, key, hits, now);
        }
        original.write_snapshot_file(&config(&dir).path, now).unwrap();
        now = now.saturating_add(std::time::Duration::from_millis(down_ms));
        let restored = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
        restored.load_snapshot(now).unwrap();
        for &(alg, key, hits, step) in &after {
            now = now.saturating_add(std::time::Duration::from_millis(step));
            let expected = apply(&original, alg, key, hits, now);
            let got = apply(&restored, alg, key, hits, now);
            prop_assert_eq!(got, expected);
        }
    }
}

/// The identity of counter `n` (lengths vary, so do their charges),
/// and a day-long fixed window or a GCRA: states of a fixed size.
fn used(n: u16, gcra: bool) -> (CounterId, Spec) {
    let value = format!("{}{n}", "x".repeat(usize::from(n % 37)));
    let id = CounterId::new("d", [("k", value.as_str())]);
    let spec = if gcra {
        Spec::Gcra(Gcra::new(1_000, 86_400_000, 10))
    } else {
        Spec::FixedWindow {
            window: FixedWindow::new(86_400),
            limit: 1_000,
        }
    };
    (id, spec)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random uses of random counters, then a snapshot read back under
    /// a random smaller budget: each shard keeps exactly the most
    /// recently used of its counters that fit its share, as its LRU
    /// would have, whichever shard each counter was in before.
    #[test]
    fn a_smaller_budget_keeps_exactly_the_most_recently_used(
        uses in proptest::collection::vec((0u16..400, any::<bool>()), 1..1_500),
        share in 150usize..2_000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let original = MemoryStore::with_snapshot(1 << 24, Some(config(&dir)));
        let mut now = UnixMillis::from_secs(1_700_000_000);
        let mut last_used = std::collections::HashMap::new();
        for &(n, gcra) in &uses {
            // One use a millisecond: recency is never a tie.
            now = now.saturating_add(std::time::Duration::from_millis(1));
            let (id, spec) = used(n, gcra);
            original.apply(
                batch(vec![Op { id, spec, hits: 1, lease: None }]),
                now,
            );
            last_used.insert((n, gcra), now);
        }
        original.write_snapshot_file(&config(&dir).path, now).unwrap();
        let restored = MemoryStore::with_snapshot(SHARDS * share, Some(config(&dir)));
        let read = restored.load_snapshot(now).unwrap();
        prop_assert_eq!(read.kept, restored.len());
        prop_assert_eq!(read.kept + read.dropped, last_used.len());

        // Per shard of the restored store: its counters, most recent
        // first, taken while they fit (the most recent always stays).
        let mut by_shard: Vec<Vec<(UnixMillis, EntryKey, usize)>> = vec![Vec::new(); SHARDS];
        for (&(n, gcra), &at) in &last_used {
            let (id, spec) = used(n, gcra);
            let bytes = charge(id.as_str().len(), &State::new(&spec));
            let (key, shard) = restored.key(id, CounterKind::of(&spec, now));
            let i = restored.inner.shards.iter().position(|s| std::ptr::eq(s, shard)).unwrap();
            by_shard[i].push((at, key, bytes));
        }
        for (i, mut counters) in by_shard.into_iter().enumerate() {
            counters.sort_by_key(|c| std::cmp::Reverse(c.0));
            let mut held = 0;
            let mut expected = std::collections::HashSet::new();
            for (_, key, bytes) in counters {
                if !expected.is_empty() && held + bytes > restored.inner.shard_budget {
                    break;
                }
                held += bytes;
                expected.insert(key);
            }
            let kept: std::collections::HashSet<EntryKey> =
                restored.inner.shards[i].lock().map.iter().map(|(k, _)| k.clone()).collect();
            prop_assert_eq!(kept, expected, "shard {}", i);
        }
    }
}

#[test]
fn counters_whose_window_ended_while_down_are_not_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
    let now = UnixMillis::from_secs(1_700_000_000);
    apply(&store, 0, 1, 3, now);
    store.write_snapshot_file(&config(&dir).path, now).unwrap();
    let later = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
    assert_eq!(later.load_snapshot(now).unwrap().kept, 1);
    let much_later = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
    let next_hour = UnixMillis::from_secs(1_700_003_600);
    assert_eq!(much_later.load_snapshot(next_hour).unwrap().kept, 0);
    assert!(much_later.is_empty());
}

#[test]
fn a_missing_file_is_an_empty_start_and_a_bad_one_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(&dir).path;
    let store = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
    let now = UnixMillis::from_secs(1_700_000_000);
    assert_eq!(store.load_snapshot(now).unwrap(), SnapshotRead::default());
    // A good snapshot, then damaged in every way a file can be.
    apply(&store, 1, 1, 2, now);
    apply(&store, 2, 1, 2, now);
    let good = store.encode_snapshot(now);
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    let mut other_version = good.clone();
    other_version[7] = b'9';
    for (bytes, reason) in [
        (
            b"garbage, not a snapshot".to_vec(),
            "does not start with FGSNAP02 or FGSNAP01",
        ),
        (Vec::new(), "does not start with FGSNAP02 or FGSNAP01"),
        (good[..good.len() - 3].to_vec(), "checksum"),
        (good[..12].to_vec(), "checksum"),
        (flipped, "checksum"),
        (other_version, "does not start with FGSNAP02 or FGSNAP01"),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let err = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)))
            .load_snapshot(now)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(reason), "{reason}: {err}");
    }
    // Unreadable (a directory where the file should be).
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)))
        .load_snapshot(now)
        .unwrap_err();
    assert!(matches!(err, SnapshotError::Io { .. }), "{err}");
}

#[test]
fn a_snapshot_of_the_previous_version_is_read_back() {
    // FGSNAP01: no last-used time; one fixed window of a minute with 4
    // hits, written by hand as earlier versions wrote it.
    let dir = tempfile::tempdir().unwrap();
    let now = UnixMillis::from_secs(1_700_000_040);
    let id = CounterId::new("d", [("k", "1")]);
    let mut bytes = b"FGSNAP01".to_vec();
    for n in [now.0, 1] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    let text = id.as_str().as_bytes();
    bytes.extend_from_slice(&u32::try_from(text.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(text);
    bytes.extend_from_slice(&[0, 0]);
    for n in [60, 1_700_000_040, now.0 + 60_000, 1_700_000_040, 4] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    std::fs::write(config(&dir).path, &bytes).unwrap();
    let store = MemoryStore::with_snapshot(1 << 20, Some(config(&dir)));
    assert_eq!(store.load_snapshot(now).unwrap().kept, 1);
    let o = store.apply(batch(vec![op_limit("1", 60, 0, 10)]), now);
    assert_eq!(o[0].after, 4);
}

#[test]
fn reading_back_stays_within_the_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let big = MemoryStore::with_snapshot(1 << 24, Some(config(&dir)));
    let now = UnixMillis::from_secs(1_700_000_000);
    for key in 0..=255u8 {
        for alg in 0..4 {
            apply(&big, alg, key, 1, now);
        }
    }
    big.write_snapshot_file(&config(&dir).path, now).unwrap();
    let small = MemoryStore::with_snapshot(64 * 1_024, Some(config(&dir)));
    small.load_snapshot(now).unwrap();
    let stats = small.stats();
    assert!(stats.bytes <= 64 * 1_024, "{stats:?}");
    assert!(stats.counters > 0 && stats.evictions > 0, "{stats:?}");
}

#[tokio::test]
async fn snapshots_are_written_every_interval_and_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.interval = std::time::Duration::from_millis(20);
    let store = MemoryStore::with_snapshot(1 << 20, Some(config.clone()));
    let clock = crate::clock::ManualClock::new(UnixMillis::from_secs(1_700_000_000));
    apply(&store, 0, 1, 4, crate::clock::Clock::now(&clock));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let store = store.clone();
        let shutdown = shutdown.clone();
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(clock.clone());
        async move { store.snapshot_until(clock, shutdown).await }
    });
    // Bounded: 500 looks, 10 ms apart.
    let mut written = false;
    for _ in 0..500 {
        if store.stats().snapshot.unwrap().written > 0 {
            written = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(written, "no snapshot written");
    apply(&store, 0, 1, 2, crate::clock::Clock::now(&clock));
    shutdown.cancel();
    task.await.unwrap();
    let back = MemoryStore::with_snapshot(1 << 20, Some(config));
    back.load_snapshot(crate::clock::Clock::now(&clock))
        .unwrap();
    // The last write (at shutdown) has all six hits.
    let o = apply(&back, 0, 1, 0, crate::clock::Clock::now(&clock));
    assert_eq!(o.after, 6);
    assert_eq!(store.stats().snapshot.unwrap().failed, 0);
}
