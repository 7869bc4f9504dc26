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
    assert_eq!(h.want(1_000, 0), 0);
    // A burst: QUICK_HITS hits in 10 ms is 6,400 per second, measured at
    // once; a block is SPAN_MS of it.
    for _ in 0..QUICK_HITS {
        h.note(1, UnixMillis(T0 + 10));
    }
    h.note(1, UnixMillis(T0 + 11));
    // Averaged with the cold period before: about 3,200.
    assert!(h.rate >= 3_000, "rate {}", h.rate);
    assert_eq!(h.want(1_000, 0), h.rate * SPAN_MS / 1_000);
    assert_eq!(h.want(50, 0), 50);
    // A quiet second: the rate starts over from what it measures.
    h.note(1, UnixMillis(T0 + 2_000));
    assert_eq!(h.want(1_000, 0), 0);
}

#[test]
fn a_far_store_s_round_trips_make_blocks_cover_them() {
    let mut h = Held {
        rate: 100,
        ..Held::default()
    };
    // 100 per second: 5 over the span alone, 21 with two 80 ms round
    // trips on top, never over the cap.
    assert_eq!(h.want(1_000, 0), 5);
    assert_eq!(h.want(1_000, 80), 21);
    assert_eq!(h.want(10, 80), 10);
    h.rate = 0;
    assert_eq!(h.want(1_000, 80), 0);
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
