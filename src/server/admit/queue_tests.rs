//! The queue's unit tests (an injected clock: `admit_at`, `start_at`).

use super::*;

const US: fn(u64) -> Duration = Duration::from_micros;

#[test]
fn a_call_waits_the_calls_ahead_times_what_each_took_lately() {
    let queue = Arc::new(Queue::new(1));
    let t0 = queue.epoch;
    let lane = Lane::new(queue.clone());
    lane.admit_at(20, t0);
    assert_eq!(queue.waiting(), 20);
    // Nothing measured: no wait, whatever the queue.
    assert_eq!(queue.wait(0), Duration::ZERO);
    // The first calls had fewer than 8 ahead: their waits are the
    // thread coming round, not measured.
    for i in 0..8 {
        lane.start_at(t0 + US(100 + i));
    }
    assert_eq!(queue.wait(0), Duration::ZERO);
    // The ninth had 8 ahead and waited 4 ms: 500 µs a call.
    assert_eq!(lane.start_at(t0 + US(4_000)), US(4_000));
    assert_eq!(queue.waiting(), 11);
    assert_eq!(queue.wait(0), US(5_500));
    assert_eq!(queue.wait(1), US(6_000));
    // Smoothed: an eighth of each new measure (9 ahead in 7.2 ms: 800 µs;
    // 537.5 µs), grown no faster than 2 % a millisecond (3 ms: 530 µs).
    lane.start_at(t0 + US(7_200));
    assert_eq!(queue.wait(0), Duration::from_nanos(10 * 530_000));
    assert!(queue.fresh(t0 + US(7_200 + 200_000)));
    assert!(!queue.fresh(t0 + US(7_200 + 201_000)));
    // Measured again after a while with no queue: taken whole, but
    // never past the time known (300 ms over 10 calls ahead is a stall,
    // not 30 ms a call), nor past it by more than it grows in the
    // milliseconds since.
    lane.start_at(t0 + US(300_000));
    assert_eq!(queue.wait(0), Duration::from_nanos(9 * 530_000));
    for _ in 0..9 {
        lane.start_at(t0 + US(300_001));
    }
    assert_eq!(queue.waiting(), 0);
    assert_eq!(queue.wait(7), Duration::ZERO);
}

#[test]
fn calls_start_in_the_order_read_each_read_stamping_its_own() {
    let queue = Arc::new(Queue::new(1));
    let t0 = queue.epoch;
    let lane = Lane::new(queue.clone());
    let other = Lane::new(queue.clone());
    other.admit_at(10, t0);
    lane.admit_at(2, t0 + US(1_000));
    lane.admit_at(1, t0 + US(2_000));
    // The third call was read second, behind 12 calls.
    assert_eq!(lane.start_at(t0 + US(3_000)), US(2_000));
    assert_eq!(lane.start_at(t0 + US(3_000)), US(2_000));
    assert_eq!(lane.start_at(t0 + US(8_000)), US(6_000));
    // Another connection's calls are theirs to take out.
    assert_eq!(queue.waiting(), 10);
}

#[test]
fn the_queue_is_full_at_its_cap_per_worker() {
    let queue = Arc::new(Queue::new(2));
    let lane = Lane::new(queue.clone());
    lane.admit(CALLS_PER_WORKER * 2 - 3);
    assert!(!queue.full(2));
    assert!(queue.full(3));
    lane.start();
    assert!(!queue.full(3));
}

#[test]
fn calls_that_never_start_leave_the_queue_with_their_connection() {
    let queue = Arc::new(Queue::new(1));
    let lane = Lane::new(queue.clone());
    let copy = lane.clone();
    lane.admit(3);
    lane.admit(2);
    assert_eq!(queue.waiting(), 5);
    for _ in 0..4 {
        lane.start();
    }
    assert_eq!(queue.waiting(), 1);
    drop(lane);
    assert_eq!(
        queue.waiting(),
        1,
        "a request of the connection may still start"
    );
    drop(copy);
    assert_eq!(queue.waiting(), 0);
}

#[test]
fn calls_that_never_start_are_given_up_on_after_a_second() {
    let queue = Arc::new(Queue::new(1));
    let t0 = queue.epoch + Duration::from_secs(5);
    let lane = Lane::new(queue.clone());
    let idle = Lane::new(queue.clone());
    // Three calls h2 refused, then two it passed.
    idle.admit_at(3, t0);
    lane.admit_at(2, t0 + US(500_000));
    queue.sweep(t0 + US(950_000));
    assert_eq!(queue.waiting(), 5, "not a second yet");
    queue.sweep(t0 + US(1_010_000));
    assert_eq!(queue.waiting(), 5, "swept 60 ms ago");
    queue.sweep(t0 + US(1_060_000));
    assert_eq!(queue.waiting(), 2);
    // A call given up on that starts after all leaves nothing twice.
    assert_eq!(idle.start_at(t0 + US(1_002_000)), Duration::ZERO);
    assert_eq!(queue.waiting(), 2);
    lane.start_at(t0 + US(1_002_000));
    lane.start_at(t0 + US(1_002_000));
    assert_eq!(queue.waiting(), 0);
    drop(idle);
    assert_eq!(queue.waiting(), 0);
    // Ended connections' lanes are dropped from the list as it grows.
    for _ in 0..200 {
        drop(Lane::new(queue.clone()));
    }
    let lanes = queue.lanes.lock();
    assert!(lanes.0.len() <= 128, "{} lanes kept", lanes.0.len());
}

/// Starts `n` of `lane`'s calls, one every `each` from `at`; returns when
/// the last started.
fn start_every(lane: &Lane, n: u64, at: Instant, each: Duration) -> Instant {
    let mut t = at;
    for _ in 0..n {
        t += each;
        lane.start_at(t);
    }
    t
}

/// The time per call now measured, in whole microseconds.
fn per_call_us(queue: &Queue) -> u64 {
    queue.per_call_ns() / 1_000
}

#[test]
fn a_stall_does_not_raise_the_time_per_call_that_real_costs_raise_in_time() {
    let queue = Arc::new(Queue::new(1));
    let t0 = queue.epoch;
    let lane = Lane::new(queue.clone());
    // A queue of 100 calls, one served every 20 µs.
    lane.admit_at(100, t0);
    let t = start_every(&lane, 100, t0, US(20));
    assert!(
        (20..=23).contains(&per_call_us(&queue)),
        "{}",
        per_call_us(&queue)
    );
    // A second with no queue, then the host takes the core for 40 ms:
    // the 30 calls read as it began start after it, 20 µs apart, each
    // having waited out the stall. The time per call stays what it was.
    let stall = t + Duration::from_secs(1);
    lane.admit_at(30, stall);
    let t = start_every(&lane, 30, stall + US(40_000), US(20));
    assert!(per_call_us(&queue) <= 23, "{} µs", per_call_us(&queue));
    // Calls that really take 80 µs, in a queue that stands: the time per
    // call follows, doubling at most every 50 ms.
    let heavier = t + Duration::from_secs(1);
    lane.admit_at(4_000, heavier);
    let t = start_every(&lane, 310, heavier, US(80));
    assert!(
        per_call_us(&queue) <= 35,
        "25 ms on: {} µs",
        per_call_us(&queue)
    );
    start_every(&lane, 3_000, t, US(80));
    assert!(
        per_call_us(&queue) >= 70,
        "265 ms on: {} µs",
        per_call_us(&queue)
    );
}
