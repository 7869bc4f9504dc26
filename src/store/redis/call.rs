//! One script call on one connection: NOSCRIPT recovery (the call ran
//! nothing, so it runs again once the scripts are loaded) and, for a
//! Cluster node dialled directly, the refusals that mean "served
//! elsewhere". Decoding the reply is `reply.rs`'s.

use super::reply::flat_integers;
use super::scripts;
use redis::{RedisError, RedisResult};
use tracing::debug;

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
pub(super) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Loads every script floodgate calls on `conn` (after NOSCRIPT, or when a
/// connection is opened).
pub(super) async fn load_scripts<C: redis::aio::ConnectionLike>(conn: &mut C) -> RedisResult<()> {
    for script in scripts::all() {
        script.prepare_invoke().load_async(conn).await?;
    }
    Ok(())
}
