//! When a block may be used, how big blocks get, and how the rate that
//! sizes them is measured.

use super::cap_of;
use super::held::{Held, QUICK_HITS, SPAN_MS};
use crate::algorithm::{FixedWindow, Gcra, Limits, SlidingLog, SlidingWindow, Spec};
use crate::clock::UnixMillis;

const T0: u64 = 1_700_000_000_000;

fn held(taken_at: u64, left: u64) -> Held {
    Held {
        left,
        taken_at: UnixMillis(taken_at),
        ..Held::default()
    }
}

#[test]
fn a_fixed_window_block_is_used_within_its_window_only() {
    let spec = Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 1_000,
    };
    // T0 is 20 s into a minute.
    let h = held(T0, 10);
    assert!(h.usable(&spec, UnixMillis(T0 + 39_999), 0));
    assert!(!h.usable(&spec, UnixMillis(T0 + 40_000), 0));
}

#[test]
fn a_sliding_window_block_is_used_within_its_bucket_only() {
    let spec = Spec::SlidingWindow(SlidingWindow::new(Limits::new([(600, 60)]), false));
    let h = held(T0 + 250, 10);
    assert!(h.usable(&spec, UnixMillis(T0 + 999), 0));
    assert!(!h.usable(&spec, UnixMillis(T0 + 1_000), 0));
}

#[test]
fn a_gcra_block_lapses_once_its_unused_cells_would_have_drained() {
    // 1,000 per second: one cell per millisecond.
    let spec = Spec::Gcra(Gcra::new(1_000, 1_000, 1_000));
    let mut h = held(T0, 5);
    // The TAT the block left: 10 ms ahead of its take.
    h.tat_us = (T0 + 10) * 1_000;
    // Usable while now + 5 unused cells <= TAT.
    assert!(h.usable(&spec, UnixMillis(T0 + 5), 0));
    assert!(!h.usable(&spec, UnixMillis(T0 + 6), 0));
    // Fewer unused cells last longer; a margin shortens it.
    h.left = 1;
    assert!(h.usable(&spec, UnixMillis(T0 + 9), 0));
    assert!(!h.usable(&spec, UnixMillis(T0 + 9), 1_000));
}

#[test]
fn blocks_are_at_most_a_sixteenth_of_the_limit() {
    let fixed = Spec::FixedWindow {
        window: FixedWindow::new(1),
        limit: 1_600,
    };
    assert_eq!(cap_of(&fixed), 100);
    let sliding = Spec::SlidingWindow(SlidingWindow::new(
        Limits::new([(3_200, 1), (1_600, 60)]),
        false,
    ));
    assert_eq!(cap_of(&sliding), 100);
    // GCRA: of the burst, when smaller.
    assert_eq!(cap_of(&Spec::Gcra(Gcra::new(1_600, 1_000, 320))), 20);
    assert_eq!(
        cap_of(&Spec::SlidingLog(SlidingLog::new(Limits::new([(
            100, 1_000
        )])))),
        0
    );
}

#[test]
fn the_block_wanted_follows_the_rate_and_stays_under_the_cap() {
    let mut h = Held::default();
    // Cold: the first hits measure nothing yet.
    h.note(1, UnixMillis(T0));
    assert_eq!(h.want(1_000, 0, false), 0);
    // A burst: QUICK_HITS hits in 10 ms is 6,400 per second, measured at
    // once; a block is SPAN_MS of it.
    for _ in 0..QUICK_HITS {
        h.note(1, UnixMillis(T0 + 10));
    }
    h.note(1, UnixMillis(T0 + 11));
    // Averaged with the cold period before: about 3,200.
    assert!(h.rate >= 3_000, "rate {}", h.rate);
    assert_eq!(h.want(1_000, 0, false), h.rate * SPAN_MS / 1_000);
    assert_eq!(h.want(50, 0, false), 50);
    // A quiet second: the rate starts over from what it measures.
    h.note(1, UnixMillis(T0 + 2_000));
    assert_eq!(h.want(1_000, 0, false), 0);
}

#[test]
fn a_far_store_s_round_trips_make_blocks_cover_them() {
    let mut h = Held {
        rate: 100,
        ..Held::default()
    };
    // 100 per second: 5 over the span alone, 21 with two 80 ms round
    // trips on top, never over the cap.
    assert_eq!(h.want(1_000, 0, false), 5);
    assert_eq!(h.want(1_000, 80, true), 21);
    assert_eq!(h.want(10, 80, true), 10);
    // A far store's block is never empty: its hits are not asked for on
    // the request path.
    h.rate = 0;
    assert_eq!(h.want(1_000, 80, true), 1);
    assert_eq!(h.want(1_000, 10, false), 0);
}

#[test]
fn a_window_is_warm_once_a_fetch_was_answered_in_it() {
    let spec = Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 1_200,
    };
    let mut h = Held::default();
    // T0 is 20 s into a minute.
    assert!(!h.warm(&spec, UnixMillis(T0)));
    h.fetched_at = Some(UnixMillis(T0));
    assert!(h.warm(&spec, UnixMillis(T0 + 39_999)));
    assert!(!h.warm(&spec, UnixMillis(T0 + 40_000)));
    // Refused locally: over, nothing counted, the count the store said.
    h.count_after = 1_200;
    h.reset_at = UnixMillis(T0 + 40_000);
    let refused = h.refused(UnixMillis(T0 + 30_000));
    assert!(refused.over_limit && !refused.counted);
    assert_eq!((refused.remaining, refused.after), (0, 1_200));
    assert_eq!(refused.reset.as_millis(), 10_000);
}

mod far {
    //! A store across a WAN: what a hit its block cannot take gets, the
    //! next window's block, and the partition allowance.

    use super::super::{Admit, Leases, find};
    use crate::algorithm::{FixedWindow, Outcome, Spec};
    use crate::clock::UnixMillis;
    use crate::metrics::lease::{Fate, LeaseMetrics};
    use crate::store::CounterId;
    use std::time::Duration;

    /// T0 is 20 s into a minute.
    const T0: u64 = super::T0;
    const SPEC: Spec = Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 1_200,
    };

    fn id() -> CounterId {
        CounterId::new("d", [("tenant", "acme")])
    }

    /// Leases on a store whose round trips take 80 ms.
    fn far_leases() -> Leases {
        let leases = Leases::default();
        leases.observe_rtt(Duration::from_millis(80));
        assert!(leases.far() && leases.rtt_ms() == 80);
        leases
    }

    #[test]
    fn a_stalled_answer_does_not_make_a_nearby_store_far() {
        let leases = Leases::default();
        leases.observe_rtt(Duration::from_micros(300));
        // Redis paused for 10 s: blocks are sized for it, but it is near.
        leases.observe_rtt(Duration::from_secs(10));
        assert!(!leases.far());
        assert_eq!(leases.rtt_ms(), 10_000);
        // A WAN answers slowly every time: far after a few answers.
        let wan = Leases::default();
        wan.observe_rtt(Duration::from_millis(80));
        assert!(wan.far());
    }

    fn block(leased: u64, after: u64) -> Outcome {
        Outcome {
            over_limit: false,
            remaining: 1_200 - after,
            reset: Duration::from_secs(40),
            counted: true,
            before: after - leased,
            after,
            limit_index: 0,
            leased,
            tat_us: 0,
        }
    }

    fn admit(leases: &Leases, at: u64, allowance: u64, metrics: &LeaseMetrics) -> Admit {
        leases.admit(&id(), SPEC, 1, allowance, UnixMillis(at), metrics)
    }

    /// A refill's answer of `leased` hits for the window starting at
    /// `start`, landing before that window begins.
    fn deposit_next(leases: &Leases, leased: u64, start: u64, metrics: &LeaseMetrics) {
        let shard = leases.shard(&id()).read();
        let lease = find(&shard, &id(), SPEC).unwrap();
        leases.deposit_next(lease, &block(leased, leased), UnixMillis(start), metrics);
    }

    #[test]
    fn a_hit_its_block_cannot_take_is_refused_here_once_the_window_is_known() {
        let metrics = LeaseMetrics::default();
        let leases = far_leases();
        // No fetch answered in this window: the store is asked.
        assert!(matches!(admit(&leases, T0, 0, &metrics), Admit::Store));
        // A fetch answered, the window spent (no block): refused in
        // process, nothing counted.
        {
            let shard = leases.shard(&id()).read();
            let lease = find(&shard, &id(), SPEC).unwrap();
            leases.deposit_block(lease, &block(0, 1_200), UnixMillis(T0 + 10), &metrics);
        }
        match admit(&leases, T0 + 20, 0, &metrics) {
            Admit::Answered(o) => assert!(o.over_limit && !o.counted && o.remaining == 0),
            other => panic!("{other:?}"),
        }
        // The next window is not known: the store is asked again.
        assert!(matches!(
            admit(&leases, T0 + 40_000, 0, &metrics),
            Admit::Store
        ));
        // Near the store, the store is always asked.
        let near = Leases::default();
        near.observe_rtt(Duration::from_millis(1));
        assert!(matches!(admit(&near, T0, 0, &metrics), Admit::Store));
    }

    #[test]
    fn the_next_window_s_block_is_used_from_its_window_s_start() {
        let metrics = LeaseMetrics::default();
        let leases = far_leases();
        assert!(matches!(admit(&leases, T0, 0, &metrics), Admit::Store));
        let next_start = T0 + 40_000;
        deposit_next(&leases, 2, next_start, &metrics);
        // Not before its window begins.
        assert!(matches!(
            admit(&leases, next_start - 1, 0, &metrics),
            Admit::Answered(_) | Admit::Store
        ));
        for _ in 0..2 {
            match admit(&leases, next_start + 5, 0, &metrics) {
                Admit::Local(o, taken_at) => {
                    assert!(!o.over_limit && o.counted);
                    assert_eq!(taken_at, UnixMillis(next_start));
                }
                other => panic!("{other:?}"),
            }
        }
        // Spent, and known: refused here.
        assert!(
            matches!(admit(&leases, next_start + 6, 0, &metrics), Admit::Answered(o) if o.over_limit)
        );
    }

    #[test]
    fn cut_off_an_instance_admits_its_allowance_per_window_and_owes_it() {
        let metrics = LeaseMetrics::default();
        let leases = far_leases();
        leases.set_reachable(false);
        let admitted = |at: u64| {
            (0..10)
                .filter(|_| matches!(admit(&leases, at, 3, &metrics), Admit::Answered(o) if !o.over_limit))
                .count()
        };
        // Three a window, whatever is asked.
        assert_eq!(admitted(T0), 3);
        assert_eq!(admitted(T0 + 1_000), 0);
        assert_eq!(metrics.get(Fate::Credited).1, 3);
        // A new window: three more; the last window's three wait to be
        // charged to it.
        assert_eq!(admitted(T0 + 40_000), 3);
        let charges = leases.charges.lock().clone();
        assert_eq!(charges.len(), 1);
        assert_eq!(
            (charges[0].hits, charges[0].at),
            (3, UnixMillis(1_699_999_980_000))
        );
        let shard = leases.shard(&id()).read();
        let held = find(&shard, &id(), SPEC).unwrap().held.lock();
        assert_eq!(
            (held.uncharged, held.credit_at),
            (3, UnixMillis(1_700_000_040_000))
        );
    }

    #[test]
    fn a_block_answered_after_its_window_turned_is_given_back_not_merged() {
        let metrics = LeaseMetrics::default();
        let leases = far_leases();
        assert!(matches!(admit(&leases, T0, 0, &metrics), Admit::Store));
        let next_start = T0 + 40_000;
        deposit_next(&leases, 5, next_start, &metrics);
        // The next window begins: its block is the one held.
        assert!(matches!(
            admit(&leases, next_start + 1, 0, &metrics),
            Admit::Local(..)
        ));
        // A refill asked in the last window lands now: given back to it.
        {
            let shard = leases.shard(&id()).read();
            let lease = find(&shard, &id(), SPEC).unwrap();
            leases.deposit_block(lease, &block(7, 900), UnixMillis(next_start - 30), &metrics);
            let held = lease.held.lock();
            assert_eq!((held.left, held.taken_at), (4, UnixMillis(next_start)));
        }
        let lapsed = leases.lapsed.lock();
        assert_eq!(lapsed.len(), 1);
        assert_eq!(
            (lapsed[0].hits, lapsed[0].taken_at),
            (7, UnixMillis(next_start - 30))
        );
    }
}
