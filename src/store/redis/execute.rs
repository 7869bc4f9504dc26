//! Execution and replies: one round trip per request (a pipeline on a
//! pool, concurrent calls on a Cluster), NOSCRIPT recovery, taking back a
//! refused batch, and reading replies strictly (an unexpected shape is an
//! error, never a fresh window).

use super::command::Undo;
use super::connection::{Connection, load_scripts, no_connection};
use super::scripts;
use crate::algorithm::fixed_window::Tally;
use crate::algorithm::sliding_log::WindowProbe;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::store::Op;
use redis::{RedisError, RedisResult};
use tracing::debug;

/// Undoes the counted operations of a batch refused as a whole.
pub(super) async fn take_back(
    connection: &Connection,
    ops: &[Op],
    undos: &[Option<Undo>],
    outcomes: &mut [Outcome],
    now: UnixMillis,
) -> RedisResult<()> {
    let undo: Vec<usize> = (0..ops.len())
        .filter(|&i| outcomes[i].counted && ops[i].hits > 0 && undos[i].is_some())
        .collect();
    let cmds: Vec<redis::Cmd> = undo
        .iter()
        .filter_map(|&i| undos[i].as_ref())
        .map(|undo| {
            let mut cmd = redis::cmd("EVALSHA");
            match undo {
                Undo::Decrement { keys, amount } => {
                    cmd.arg(scripts::TAKE_BACK.get_hash()).arg(keys.len());
                    for key in keys {
                        cmd.arg(key.as_str());
                    }
                    cmd.arg(*amount);
                }
                Undo::Members { key, prefix, hits } => {
                    cmd.arg(scripts::TAKE_BACK_LOG.get_hash())
                        .arg(1)
                        .arg(key.as_str())
                        .arg(prefix.as_str())
                        .arg(*hits);
                }
            }
            cmd
        })
        .collect();
    if cmds.is_empty() {
        return Ok(());
    }
    execute(connection, cmds).await?;
    for &i in &undo {
        outcomes[i] = crate::store::taken_back(&ops[i], outcomes[i], now);
    }
    Ok(())
}

/// Runs EVALSHA commands in one round trip: one pipeline on a standalone or
/// Sentinel connection; concurrent commands on a Cluster (each routed to its
/// key's node, pipelined per node by the client). Commands that meet
/// NOSCRIPT (Redis restarted, failed over or flushed its scripts) are run
/// again, alone, once the scripts are loaded: the others already counted.
pub(super) async fn execute(
    connection: &Connection,
    cmds: Vec<redis::Cmd>,
) -> RedisResult<Vec<Vec<i64>>> {
    let values = match connection {
        Connection::Pool(pool) => {
            let mut conn = pool.pick().ok_or_else(no_connection)?;
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            let mut values: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
            let missing = noscript(&values);
            if !missing.is_empty() {
                load_scripts(&mut conn).await?;
                let mut again = redis::pipe();
                again.ignore_errors();
                for (i, cmd) in pipe.cmd_iter().enumerate() {
                    if missing.contains(&i) {
                        again.add_command(cmd.clone());
                    }
                }
                let retried: Vec<redis::Value> = again.query_async(&mut conn).await?;
                for (i, value) in missing.into_iter().zip(retried) {
                    values[i] = value;
                }
            }
            values
        }
        Connection::Cluster(cluster) => {
            let cmds = &cmds;
            let cluster = &cluster.conn;
            let run = |i: usize| {
                let mut conn = cluster.clone();
                async move { cmds[i].query_async::<redis::Value>(&mut conn).await }
            };
            let mut results = futures_util::future::join_all((0..cmds.len()).map(run)).await;
            let missing: Vec<usize> = results
                .iter()
                .enumerate()
                .filter(|(_, r)| matches!(r, Err(e) if is_noscript(e)))
                .map(|(i, _)| i)
                .collect();
            if !missing.is_empty() {
                load_scripts(&mut cluster.clone()).await?;
                let retried = futures_util::future::join_all(missing.iter().map(|&i| run(i))).await;
                for (i, result) in missing.into_iter().zip(retried) {
                    results[i] = result;
                }
            }
            return results
                .into_iter()
                .map(|r| r.and_then(|value| integers(&value)))
                .collect();
        }
    };
    values
        .into_iter()
        .map(|value| match value {
            redis::Value::ServerError(err) => Err(RedisError::from(err)),
            value => integers(&value),
        })
        .collect()
}

/// Runs one batch-script call, loading the scripts once on NOSCRIPT (a
/// NOSCRIPT call ran nothing, so running it again counts nothing twice),
/// and returns its flat reply: `expected` integers.
pub(super) async fn execute_batch<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    cmd: &redis::Cmd,
    expected: usize,
) -> RedisResult<Vec<i64>> {
    let value = match cmd.query_async::<redis::Value>(conn).await {
        Err(err) if is_noscript(&err) => {
            load_scripts(conn).await?;
            cmd.query_async::<redis::Value>(conn).await?
        }
        other => other?,
    };
    flat_integers(&value, expected)
}

/// Runs one call on a Cluster master dialled directly (the node batch
/// script, or the batch script for one hash tag), loading the scripts once
/// on NOSCRIPT. `None` when the node does not serve one of the call's slots
/// stably: the node batch script's NOTLOCAL, or the server's own MOVED,
/// ASK, TRYAGAIN or READONLY (a master demoted to a replica), all given
/// before anything was written.
pub(super) async fn execute_on_node<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    cmd: &redis::Cmd,
    expected: usize,
) -> RedisResult<Option<Vec<i64>>> {
    let sent = match cmd.query_async::<redis::Value>(conn).await {
        Err(err) if is_noscript(&err) => {
            load_scripts(conn).await?;
            cmd.query_async::<redis::Value>(conn).await
        }
        other => other,
    };
    let value = match sent {
        Err(err) if is_elsewhere(&err) => {
            debug!(error = %err, "a node call met a slot its node does not serve; sending per hash tag");
            return Ok(None);
        }
        other => other?,
    };
    match value {
        redis::Value::SimpleString(status) if status.starts_with("NOTLOCAL") => {
            debug!(%status, "a node call met a slot its node does not serve stably; sending per hash tag");
            Ok(None)
        }
        value => flat_integers(&value, expected).map(Some),
    }
}

/// Whether a Cluster node refused a call because its slots are served
/// elsewhere (or not served stably here): nothing was run.
fn is_elsewhere(err: &RedisError) -> bool {
    use redis::ServerErrorKind::{Ask, Moved, ReadOnly, TryAgain};
    matches!(
        err.kind(),
        redis::ErrorKind::Server(Moved | Ask | TryAgain | ReadOnly)
    )
}

/// Whether Redis answered NOSCRIPT: the script is not loaded (a restart, a
/// failover, SCRIPT FLUSH), so the call ran nothing and may run again.
fn is_noscript(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

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
    })
}
