//! Reading the scripts' replies strictly: an unexpected shape is an error,
//! never a fresh window. Pure decoding, no I/O.

use super::command::COUNT;
use crate::algorithm::concurrency::Acted;
use crate::algorithm::fixed_window::Tally;
use crate::algorithm::sliding_log::WindowProbe;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::store::Op;
use redis::{RedisError, RedisResult};

/// The batch script's flat reply: exactly `expected` integers; any other
/// shape or length is an unexpected reply.
pub(super) fn flat_integers(value: &redis::Value, expected: usize) -> RedisResult<Vec<i64>> {
    let redis::Value::Array(items) = value else {
        return Err(bad_reply(format!("batch reply {value:?}")));
    };
    if items.len() != expected {
        return Err(bad_reply(format!(
            "{} batch reply items where {expected} were expected",
            items.len()
        )));
    }
    all_ints(items, "batch reply item")
}

/// Every item of a reply array as an integer; `what` names an item that
/// is not one in the error.
fn all_ints(items: &[redis::Value], what: &str) -> RedisResult<Vec<i64>> {
    items
        .iter()
        .map(|item| match item {
            redis::Value::Int(n) => Ok(*n),
            other => Err(bad_reply(format!("{what} {other:?}"))),
        })
        .collect()
}

/// Positions of the replies that are NOSCRIPT errors.
pub(super) fn noscript(values: &[redis::Value]) -> Vec<usize> {
    values
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            matches!(v, redis::Value::ServerError(err)
                if err.kind() == Some(redis::ServerErrorKind::NoScript))
        })
        .map(|(i, _)| i)
        .collect()
}

/// A script reply as integers: an integer, or an array of integers.
/// Anything else is an unexpected reply, never read as zero.
pub(super) fn integers(value: &redis::Value) -> RedisResult<Vec<i64>> {
    match value {
        redis::Value::Int(n) => Ok(vec![*n]),
        redis::Value::Array(items) => all_ints(items, "array item"),
        other => Err(bad_reply(format!("{other:?}"))),
    }
}

/// The error of a script reply floodgate cannot read (a script from another
/// version, a proxy in between): a typed store error, answered by the
/// failure policy.
pub(super) fn bad_reply(detail: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        detail,
    ))
}

/// How many integers an operation's algorithm script replies (`algorithm`
/// its number in the batch script): a lease adds the hits it took.
pub(super) fn reply_len(op: &Op, algorithm: u8) -> usize {
    if algorithm == COUNT {
        return 1;
    }
    let leased = usize::from(op.lease.is_some());
    match &op.spec {
        Spec::FixedWindow { .. } | Spec::Gcra(_) => 2 + leased,
        Spec::Concurrency(_) => 3,
        Spec::SlidingWindow(sw) => 1 + sw.buckets() + leased,
        Spec::SlidingLog(sl) => 1 + 2 * sl.limits().len(),
    }
}

/// Reads a script reply: the same pure functions as the memory store turn
/// the state Redis saw into the answer. A reply of the wrong length is an
/// error, never a fresh window.
pub(super) fn outcome(
    op: &Op,
    algorithm: u8,
    reply: &[i64],
    now: UnixMillis,
) -> RedisResult<Outcome> {
    let expected = reply_len(op, algorithm);
    if reply.len() != expected {
        return Err(bad_reply(format!(
            "{} integers where {expected} were expected",
            reply.len()
        )));
    }
    let at = |i: usize| reply.get(i).copied().unwrap_or(0);
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    // A lease's hits taken beyond the operation's: its reply's last item
    // (0 when refused: a refused lease takes nothing).
    let leased = match op.lease {
        Some(_) => reply.last().map_or(0, |&v| unsigned(v)),
        None => 0,
    };
    let mut outcome = match op.spec {
        Spec::FixedWindow { window, limit } => {
            let before = unsigned(at(0));
            // count.lua's reply is the count before alone: always counted.
            if algorithm == COUNT || at(1) == 1 {
                // The answer after the block: what the store has left.
                let after = before.saturating_add(op.hits).saturating_add(leased);
                window.outcome(Tally { before, after }, limit, now, true)
            } else {
                window.refused(before, op.hits, limit, now)
            }
        }
        Spec::SlidingWindow(sw) => {
            let counts: Vec<u64> = reply
                .iter()
                .skip(1)
                .take(sw.buckets())
                .map(|&v| unsigned(v))
                .collect();
            sw.outcome(&counts, op.hits.saturating_add(leased), at(0) == 1, now)
        }
        Spec::SlidingLog(sl) => {
            let probes: Vec<WindowProbe> = reply
                .get(1..)
                .unwrap_or_default()
                .chunks_exact(2)
                .map(|pair| WindowProbe {
                    count: pair.first().map_or(0, |&v| unsigned(v)),
                    at_us: pair.get(1).and_then(|&v| u64::try_from(v).ok()),
                })
                .collect();
            sl.outcome(&probes, op.hits, at(0) == 1, now)
        }
        Spec::Gcra(gcra) => {
            let stored = u64::try_from(at(1)).ok();
            let (_, mut outcome) = gcra.decide(stored, now, op.hits.saturating_add(leased));
            outcome.counted = at(0) == 1;
            if !outcome.counted {
                outcome.tat_us = 0;
            }
            outcome
        }
        Spec::Concurrency(c) => c.outcome(
            unsigned(at(0)),
            u64::try_from(at(1)).ok(),
            Acted::from_code(at(2)),
            op.hits,
            now,
        ),
    };
    outcome.leased = if outcome.counted { leased } else { 0 };
    Ok(outcome)
}
