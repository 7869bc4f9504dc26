//! Reading the scripts' replies strictly: an unexpected shape is an error,
//! never a fresh window. Pure decoding, no I/O.

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

/// How many integers an operation's algorithm script replies.
pub(super) fn reply_len(spec: &Spec) -> usize {
    match spec {
        Spec::FixedWindow { .. } | Spec::Gcra(_) => 2,
        Spec::Concurrency(_) => 3,
        Spec::SlidingWindow(sw) => 1 + sw.buckets(),
        Spec::SlidingLog(sl) => 1 + 2 * sl.limits().len(),
    }
}

/// Reads a script reply: the same pure functions as the memory store turn
/// the state Redis saw into the answer. A reply of the wrong length is an
/// error, never a fresh window.
pub(super) fn outcome(op: &Op, reply: &[i64], now: UnixMillis) -> RedisResult<Outcome> {
    let expected = reply_len(&op.spec);
    if reply.len() != expected {
        return Err(bad_reply(format!(
            "{} integers where {expected} were expected",
            reply.len()
        )));
    }
    let at = |i: usize| reply.get(i).copied().unwrap_or(0);
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(match op.spec {
        Spec::FixedWindow { window, limit } => {
            let before = unsigned(at(0));
            if at(1) == 1 {
                let after = before.saturating_add(op.hits);
                window.outcome(Tally { before, after }, limit, now, true)
            } else {
                window.refused(before, op.hits, limit, now)
            }
        }
        Spec::SlidingWindow(sw) => {
            let counts: Vec<u64> = reply.iter().skip(1).map(|&v| unsigned(v)).collect();
            sw.outcome(&counts, op.hits, at(0) == 1, now)
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
            let (_, mut outcome) = gcra.decide(stored, now, op.hits);
            outcome.counted = at(0) == 1;
            outcome
        }
        Spec::Concurrency(c) => c.outcome(
            unsigned(at(0)),
            u64::try_from(at(1)).ok(),
            Acted::from_code(at(2)),
            op.hits,
            now,
        ),
    })
}
