//! Unit tests of `memory`.

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
        lease: None,
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

mod snapshots;

#[test]
fn the_keys_of_one_shard_spread_over_its_map() {
    // A shard's identities share the low bits of their keyed hash; the
    // key's own hash must not, or the shard's map would use a 64th of its
    // slots.
    use std::hash::BuildHasher as _;
    let store = MemoryStore::new();
    let kind = CounterKind::Fixed {
        window_secs: 60,
        start_secs: 1_700_000_040,
    };
    let (mut low_bits, mut in_shard) = (std::collections::HashSet::new(), 0);
    for n in 0..4_096 {
        let id = CounterId::new("d", [("k", n.to_string().as_str())]);
        let (key, shard) = store.key(id.clone(), kind);
        if !std::ptr::eq(shard, &store.inner.shards[0]) {
            continue;
        }
        in_shard += 1;
        low_bits.insert(CarriedHash::default().hash_one(&key) & 0x3f);
        // The same identity and kind: the same key; another window: not.
        assert_eq!(key, store.key(id.clone(), kind).0);
        let next = CounterKind::Fixed {
            window_secs: 60,
            start_secs: 1_700_000_100,
        };
        assert_ne!(key, store.key(id, next).0);
    }
    assert!(in_shard > 30, "{in_shard} identities in shard 0");
    assert!(low_bits.len() > 20, "{} low-bit patterns", low_bits.len());
}
