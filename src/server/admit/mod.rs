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
//! The rule: calls take now the wait for a thread the handler measures
//! (about what a call's bytes wait in the socket before their connection
//! is read) plus the time from header block read to answer written that
//! the connections measure (two [`Backlog`]s, the longest lately held),
//! or, on a connection with 8 or more calls in flight, that many times
//! the time one of its answers takes (which sees a queue as it forms,
//! before its calls are answered late). A new `ShouldRateLimit` call is
//! shed when twice that time and a tenth of its deadline do not fit in its
//! `grpc-timeout` (a call without one is never shed here: it has no
//! deadline to miss). Below capacity these are microseconds and nothing is
//! shed.

mod answer;
mod backlog;
mod hpack;
mod io;
mod read;
mod rfc7541;

pub(crate) use answer::ShedAnswer;
pub(crate) use answer::{
    CONTINUATION, END_HEADERS, END_STREAM, FRAME_HEAD, HEADERS, fragment, frame_head, give,
    write_block,
};
#[cfg(test)]
pub(crate) use answer::{MAX_FRAME, PADDED, PRIORITY};
pub(crate) use backlog::Backlog;
pub(crate) use io::Admitted;

use crate::limiter::FailureMode;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time a decided call takes from admission to its answer: a
/// deadline shorter than this (and twice the wait) is shed.
const ANSWER_TIME: Duration = Duration::from_micros(100);

/// What every connection's admission shares: the wait the handler
/// measures, the answer, the count.
#[derive(Debug)]
pub(crate) struct Admission {
    /// How long calls wait for a thread (the handler's measure): about
    /// what a call's bytes wait in the socket before their connection is
    /// read.
    waits: Arc<Backlog>,
    /// How long calls take from read to answer written.
    backlog: Arc<Backlog>,
    answer: ShedAnswer,
    metrics: Arc<Metrics>,
}

impl Admission {
    /// Admission by `backlog`'s wait, shed calls answered as `mode` says
    /// (`message`: the handler's shed error text) and counted in `metrics`.
    pub(crate) fn new(
        waits: Arc<Backlog>,
        backlog: Arc<Backlog>,
        mode: FailureMode,
        message: &str,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            waits,
            backlog,
            answer: ShedAnswer::new(mode, message),
            metrics,
        }
    }
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

impl read::Admit for Admission {
    fn sheds(&self, timeout: Option<Duration>, local: Duration) -> bool {
        // The clock is read only when the last times published could shed.
        let last = self.waits.last_wait() + self.backlog.last_wait();
        sheds(timeout, last.max(local))
            && (sheds(timeout, local) || {
                let now = Instant::now();
                sheds(timeout, self.waits.wait(now) + self.backlog.wait(now))
            })
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
}
