//! Execution over the store's connection: one round trip per request (a
//! pipeline on a pool, concurrent calls on a Cluster) with NOSCRIPT
//! recovery, and taking back a refused batch. Replies are read by
//! `reply.rs`.

use super::call::{is_noscript, load_scripts};
use super::command::Undo;
use super::connection::{Connection, no_connection};
use super::reply::{integers, noscript};
use super::scripts;
use crate::algorithm::Outcome;
use crate::clock::UnixMillis;
use crate::store::Op;
use redis::{RedisError, RedisResult};

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
