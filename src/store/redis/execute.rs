//! Execution over the store's connection: one round trip per request (a
//! pipeline on a pool, concurrent calls on a Cluster) with NOSCRIPT
//! recovery, and taking back a refused batch. Replies are read by
//! `reply.rs`.

use super::RedisStore;
use super::call::{is_noscript, load_scripts};
use super::coalesce::{LaneError, LaneOp};
use super::command::{Undo, algorithm_number, undo_cmd};
use super::connection::{Connection, no_connection};
use super::fence::give_back_cmd;
use super::reply::{bad_reply, integers, noscript, outcome, reply_len};
use crate::algorithm::Outcome;
use crate::clock::UnixMillis;
use crate::store::{Batch, GivenBack, Op, StoreError, Unused};
use redis::{RedisError, RedisResult};
use tokio::time::{Instant, timeout_at};

impl RedisStore {
    /// One request's operations: one script call (shared with the
    /// requests queued with it on the lane), its replies read, and a
    /// refused batch taken back.
    pub(super) async fn run(
        &self,
        connection: &Connection,
        batch: Batch,
        now: UnixMillis,
        deadline: Instant,
    ) -> Result<Vec<Outcome>, StoreError> {
        // Undos only when a refused batch is taken back (an empty vector
        // allocates nothing).
        let mut undos: Vec<Option<Undo>> = Vec::new();
        let ops = batch
            .ops
            .iter()
            .map(|op| {
                let (cmd, undo) = self.call(op, now, batch.refuses(op));
                if batch.stop_when_over {
                    undos.push(undo);
                }
                let algorithm = algorithm_number(op, batch.refuses(op));
                LaneOp {
                    algorithm,
                    reply_len: reply_len(op, algorithm),
                    cmd,
                }
            })
            .collect();
        let replies = match connection {
            Connection::Pool(pool) => {
                pool.lane()
                    .ok_or_else(no_connection)?
                    .run(ops, deadline)
                    .await
            }
            Connection::Cluster(cluster) => cluster.lanes.run(ops, deadline).await,
        };
        let replies = match replies {
            Ok(replies) => replies,
            Err(LaneError::Redis(err)) => return Err(err.into()),
            Err(LaneError::TimedOut) => return Err(StoreError::Timeout),
        };
        // The lane hands back exactly this request's integers, in order.
        let mut rest = replies.as_slice();
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(batch.ops.len());
        for op in &batch.ops {
            let algorithm = algorithm_number(op, batch.refuses(op));
            let (reply, tail) = rest
                .split_at_checked(reply_len(op, algorithm))
                .ok_or_else(|| bad_reply(format!("{} integers cut short", replies.len())))?;
            rest = tail;
            outcomes.push(outcome(op, algorithm, reply, now)?);
        }
        if batch.refused_by(&outcomes) {
            Box::pin(timeout_at(
                deadline,
                take_back(connection, &batch.ops, &undos, &mut outcomes, now),
            ))
            .await
            .map_err(|_| StoreError::Timeout)??;
        }
        Ok(outcomes)
    }

    /// [`Store::give_back`] on Redis: every block's give-back in one round
    /// trip, each fenced by its token (run once however often it is sent);
    /// the blocks Redis kept (a GCRA bucket counted on since), and all of
    /// them unanswered when the round trip fails.
    pub(super) async fn give_back_unused(&self, unused: Vec<Unused>) -> GivenBack {
        let mut sent = Vec::with_capacity(unused.len());
        let mut cmds = Vec::with_capacity(unused.len());
        let mut given = GivenBack::default();
        for u in unused {
            let fence = self.inner.keys.returned(&u.id, u.token);
            let cmd = self
                .give_back_undo(&u)
                .filter(|_| u.hits > 0)
                .and_then(|undo| Some((give_back_cmd(&fence, &undo, u.tat_us)?, undo)));
            match cmd {
                Some((cmd, undo)) => {
                    cmds.push(cmd);
                    sent.push((u, undo));
                }
                // Nothing to give back.
                None => given.back.push(u),
            }
        }
        if cmds.is_empty() {
            return given;
        }
        let Ok(replies) = self.round_trip(cmds).await else {
            given.unanswered.extend(sent.into_iter().map(|(u, _)| u));
            return given;
        };
        for ((u, undo), reply) in sent.into_iter().zip(&replies) {
            if undo.kept(reply) {
                given.kept.push(u);
            } else {
                given.back.push(u);
            }
        }
        given
    }
}

impl RedisStore {
    /// Script calls outside the lanes (give-backs, fenced fetches) in one
    /// round trip over the store's connection, by `REDIS_TIMEOUT`.
    pub(super) async fn round_trip(
        &self,
        cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<Vec<i64>>, StoreError> {
        let deadline = Instant::now() + self.inner.config.timeout;
        let connection = Box::pin(timeout_at(deadline, self.connection()))
            .await
            .map_err(|_| StoreError::Timeout)?;
        Ok(Box::pin(timeout_at(deadline, execute(&connection, cmds)))
            .await
            .map_err(|_| StoreError::Timeout)??)
    }
}

/// Undoes the counted operations of a batch refused as a whole.
pub(super) async fn take_back(
    connection: &Connection,
    ops: &[Op],
    undos: &[Option<Undo>],
    outcomes: &mut [Outcome],
    now: UnixMillis,
) -> RedisResult<()> {
    // The operations to undo: counted, with hits, and undoable.
    let undo: Vec<(usize, &Undo)> = ops
        .iter()
        .zip(outcomes.iter())
        .zip(undos)
        .enumerate()
        .filter_map(|(i, ((op, outcome), undo))| {
            let undo = undo.as_ref()?;
            (outcome.counted && op.hits > 0).then_some((i, undo))
        })
        .collect();
    let cmds: Vec<redis::Cmd> = undo
        .iter()
        .map(|&(i, undo)| undo_cmd(undo, outcomes.get(i).map_or(0, |o| o.tat_us)))
        .collect();
    if cmds.is_empty() {
        return Ok(());
    }
    let replies = execute(connection, cmds).await?;
    for (&(i, undo), reply) in undo.iter().zip(&replies) {
        // A TAT counted on since keeps the hits: the answer stays the
        // counted one (its `limit_remaining` no more than what remains).
        if undo.kept(reply) {
            continue;
        }
        if let (Some(op), Some(outcome)) = (ops.get(i), outcomes.get_mut(i)) {
            *outcome = crate::store::taken_back(op, *outcome, now);
        }
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
                    if let Some(slot) = values.get_mut(i) {
                        *slot = value;
                    }
                }
            }
            values
        }
        Connection::Cluster(cluster) => {
            let cmds = &cmds;
            let cluster = &cluster.conn;
            let mut results =
                futures_util::future::join_all(cmds.iter().map(|cmd| query(cluster.clone(), cmd)))
                    .await;
            let missing: Vec<usize> = results
                .iter()
                .enumerate()
                .filter(|(_, r)| matches!(r, Err(e) if is_noscript(e)))
                .map(|(i, _)| i)
                .collect();
            if !missing.is_empty() {
                load_scripts(&mut cluster.clone()).await?;
                let again = missing
                    .iter()
                    .filter_map(|&i| cmds.get(i))
                    .map(|cmd| query(cluster.clone(), cmd));
                let retried = futures_util::future::join_all(again).await;
                for (i, result) in missing.into_iter().zip(retried) {
                    if let Some(slot) = results.get_mut(i) {
                        *slot = result;
                    }
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

/// One command on a clone of the cluster connection (routed by its key).
async fn query(
    mut conn: redis::cluster_async::ClusterConnection,
    cmd: &redis::Cmd,
) -> RedisResult<redis::Value> {
    cmd.query_async(&mut conn).await
}
