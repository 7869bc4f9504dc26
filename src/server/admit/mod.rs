//! Admission: a gRPC connection's calls shed before h2, hyper or tonic
//! spend anything on them, when the wait for a thread would make them
//! late (issue #44, bench/history/2026-11-28-overload-admission.md).
//!
//! Past capacity, what a shed costs decides what is left for decisions:
//! shed after tonic has decoded the call, a request cost 81 % of a decided
//! one, so at twice the capacity nothing was left to decide with. Here a
//! call is shed from its header block alone, as the connection's bytes are
//! read: its frames never reach h2, and its answer (`FAILURE_MODE`'s,
//! written once, see `answer.rs`) goes straight to the socket between h2's
//! own frames.
//!
//! The rule: a call read now waits for its thread behind the calls
//! admitted and not started yet ([`Queue`]), each adding the time one
//! takes (the handler measures it: a call's wait over the calls that were
//! ahead of it), so about their product; its bytes waited about as long
//! to be read, and its answer waits for its connection's turn to be
//! written. While a queue stands (the worker threads were busy 90 % of
//! the last 25 ms and it did not fall by a quarter over them, and once
//! standing until they have time to spare and it drains; one a stall of
//! the host left behind drains, and a time per call measured across the
//! stall overstates it: [`Busy`]), a new
//! `ShouldRateLimit` call is shed when twice that wait and a tenth of its
//! deadline do not fit in its `grpc-timeout`, or when
//! the queue holds its cap (240 calls per worker thread: past what a
//! worker's run queue keeps in order, the oldest calls come out late).
//! Whatever the load, it is shed when the queue holds twice its cap. A
//! call without `grpc-timeout` is never shed here: it has no deadline to
//! miss. Below capacity there is no queue and
//! nothing is shed.

mod answer;
mod busy;
mod hpack;
mod io;
mod queue;
mod read;
mod rfc7541;
mod sink;

pub(crate) use answer::ShedAnswer;
pub(crate) use answer::{
    CONTINUATION, END_HEADERS, END_STREAM, FRAME_HEAD, HEADERS, fragment, frame_head, give,
    pass_rest, write_block,
};
#[cfg(test)]
pub(crate) use answer::{MAX_FRAME, PADDED, PRIORITY};
pub(crate) use busy::{Busy, Runtime as RuntimeBusy};
#[cfg(test)]
pub(crate) use hpack::huffman_encode;
pub(crate) use hpack::{Table as HpackTable, Text as HpackText};
pub(crate) use io::Admitted;
pub(crate) use queue::{Arrival, Lane, Queue};

use crate::limiter::FailureMode;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The only calls admission sheds and queues.
pub(crate) const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The least time a decided call takes from admission to its answer: a
/// deadline shorter than this (and twice the wait) is shed.
const ANSWER_TIME: Duration = Duration::from_micros(100);

/// What every connection's admission shares: the queue of calls, the
/// answer, the count.
#[derive(Debug)]
pub(crate) struct Admission {
    queue: Arc<Queue>,
    answer: ShedAnswer,
    metrics: Arc<Metrics>,
    busy: Busy,
}

impl Admission {
    /// Admission by `queue`'s wait and the threads' `busy` time, shed calls
    /// answered as `mode` says (`message`: the handler's shed error text)
    /// and counted in `metrics`.
    pub(crate) fn new(
        queue: Arc<Queue>,
        busy: Busy,
        mode: FailureMode,
        message: &str,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            queue,
            answer: ShedAnswer::new(mode, message),
            metrics,
            busy,
        }
    }
}

/// What admission asks of the process for one new call.
trait Admit {
    /// Whether a call with this `grpc-timeout` is shed at once, `more`
    /// calls admitted before it not handed to the service yet.
    fn sheds(&self, timeout: Option<Duration>, more: usize) -> bool;
    /// Writes the shed answer on `stream` to `out`; counts it.
    fn answer(&self, stream: u32, timeout: Option<Duration>, out: &mut Vec<u8>);
    /// Flow-controlled bytes one answer sends.
    fn answer_data(&self) -> u32;
}

/// Whether a call with `timeout` is shed when calls wait `wait`.
fn sheds(timeout: Option<Duration>, wait: Duration) -> bool {
    match timeout {
        Some(timeout) => wait * 2 + timeout / 10 + ANSWER_TIME >= timeout,
        // No deadline to miss: the caller waits as long as it takes (as
        // the reference's callers do); HTTP/2's stream limit bounds it.
        None => false,
    }
}

impl Admit for Admission {
    fn sheds(&self, timeout: Option<Duration>, more: usize) -> bool {
        // No deadline to miss: never shed (most callers send none).
        let Some(timeout) = timeout else {
            return false;
        };
        let timeout = Some(timeout);
        if sheds(timeout, Duration::ZERO) {
            return true;
        }
        // A call with a deadline is not queued past the cap (once calls h2
        // refused are given up on) while the threads are busy all the time
        // and it does not drain, where a queue stands and calls stop being
        // run in order; nor past the backstop however busy; nor, while the
        // threads are busy, where the calls ahead would make it late, if
        // their time was measured lately (the clock is read only then: a
        // time per call measured long ago says nothing of now). With time
        // to spare the queue drains: a time per call measured across a
        // stall of the host overstates it and would shed calls that are in
        // time.
        let full = timeout.is_some() && self.queue.full(more);
        let now = full.then(Instant::now);
        if let Some(now) = now {
            self.queue.sweep(now);
            if self.queue.overfull(more) {
                return true;
            }
        }
        let full = full && self.queue.full(more);
        let late = sheds(timeout, self.queue.wait(more));
        if !full && !late {
            return false;
        }
        let now = now.unwrap_or_else(Instant::now);
        self.busy.saturated(now, self.queue.waiting()) && (full || self.queue.fresh(now))
    }

    fn answer(&self, stream: u32, timeout: Option<Duration>, out: &mut Vec<u8>) {
        self.answer.write(stream, out);
        if timeout.is_some_and(|t| t <= ANSWER_TIME) {
            self.metrics.record_shed();
        } else {
            self.metrics.record_shed_queue();
        }
    }

    fn answer_data(&self) -> u32 {
        self.answer.data_len()
    }
}

/// Parses a `grpc-timeout` header: at most 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`); `None` when malformed (the call then has no
/// deadline). The handler reads it as admission does.
pub(crate) fn parse_grpc_timeout(text: &[u8]) -> Option<Duration> {
    let (&unit, digits) = text.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3_600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_shed_when_twice_the_wait_leaves_no_time_for_it() {
        let ms = Duration::from_millis;
        // 20 ms: 2 ms kept back, 0.1 ms to answer; the wait may be 8.95 ms.
        assert!(!sheds(Some(ms(20)), Duration::ZERO));
        assert!(!sheds(Some(ms(20)), Duration::from_micros(8_940)));
        assert!(sheds(Some(ms(20)), Duration::from_micros(8_950)));
        // A deadline that has passed, or that no call could meet.
        assert!(sheds(Some(Duration::from_nanos(1)), Duration::ZERO));
        assert!(sheds(Some(ANSWER_TIME), Duration::ZERO));
        // No deadline: never shed at admission.
        assert!(!sheds(None, ms(60_000)));
    }

    /// Threads busy all the time (each reading adds ten seconds), or
    /// never.
    #[derive(Debug)]
    struct Threads(bool, std::sync::atomic::AtomicU64);

    impl busy::BusyTime for Threads {
        fn busy(&self) -> Duration {
            let step = if self.0 { 10 } else { 0 };
            let seconds = self.1.fetch_add(step, std::sync::atomic::Ordering::Relaxed);
            Duration::from_secs(seconds)
        }
        fn workers(&self) -> u32 {
            1
        }
    }

    fn admission(busy: bool) -> (Admission, Lane) {
        let queue = Arc::new(Queue::new(1));
        let threads = Threads(busy, 0.into());
        // The first window began 50 ms ago: it has ended, and it was not
        // a quiet spell.
        let start = Instant::now().checked_sub(Duration::from_millis(50));
        let busy = Busy::new(Box::new(threads), start.unwrap_or_else(Instant::now));
        let admission = Admission::new(
            queue.clone(),
            busy,
            FailureMode::Error,
            "shed",
            Arc::new(Metrics::new(0.8, 100)),
        );
        (admission, Lane::new(queue))
    }

    #[test]
    fn a_full_queue_sheds_calls_with_a_deadline_while_the_threads_are_busy() {
        let (admission, lane) = admission(true);
        let ms = Some(Duration::from_millis(20));
        // No time per call measured: only the cap can shed.
        lane.admit(queue::CALLS_PER_WORKER - 2);
        assert!(!admission.sheds(ms, 1));
        assert!(admission.sheds(ms, 2));
        assert!(!admission.sheds(None, 2));
    }

    #[test]
    fn the_calls_wait_sheds_only_while_the_threads_are_busy() {
        let ms = Duration::from_millis;
        for busy in [true, false] {
            let (admission, lane) = admission(busy);
            // 40 calls read 20 ms ago; the ninth started 8 ms after, 8
            // calls ahead of it: 1 ms a call, so the 31 left wait 31 ms.
            let t0 = Instant::now().checked_sub(ms(20)).unwrap();
            lane.admit_at(40, t0);
            for _ in 0..8 {
                lane.start_at(t0);
            }
            lane.start_at(t0 + ms(8));
            assert_eq!(admission.queue.wait(0), ms(31));
            // Busy all the time, the queue stands: a 20 ms call is shed.
            // With time to spare, the queue a stall left drains faster
            // than a time per call measured across the stall says.
            assert_eq!(admission.sheds(Some(ms(20)), 0), busy, "busy: {busy}");
        }
    }

    #[test]
    fn threads_with_time_to_spare_let_the_queue_grow_to_its_backstop() {
        let (admission, lane) = admission(false);
        let ms = Some(Duration::from_millis(20));
        lane.admit(queue::CALLS_PER_WORKER * 2 - 2);
        assert!(!admission.sheds(ms, 1), "a stall's queue drains");
        assert!(admission.sheds(ms, 2));
        assert!(!admission.sheds(None, 2));
    }
}
