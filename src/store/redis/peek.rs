//! Reading without counting, for `/explain`: each operation's own command,
//! sent to the read-only twin of its script ([`scripts::PEEK`]), whose reply
//! is the one the counting script would give now; the same pure functions
//! turn it into the answer, so a peek answers exactly what the next call
//! would.

use super::command::{algorithm_number, bytes_of};
use super::execute::execute;
use super::reply::{bad_reply, outcome};
use super::{RedisStore, scripts};
use crate::algorithm::Outcome;
use crate::clock::UnixMillis;
use crate::store::{Batch, StoreError};
use redis::RedisResult;

impl RedisStore {
    /// What every operation of `batch` would answer at `now`; nothing is
    /// written. One round trip, as a decision.
    pub(super) async fn peek_batch(
        &self,
        batch: &Batch,
        now: UnixMillis,
    ) -> Result<Vec<Outcome>, StoreError> {
        let call = async {
            let connection = self.connection().await;
            let cmds: Vec<redis::Cmd> = batch
                .ops
                .iter()
                .map(|op| {
                    let algorithm = algorithm_number(op, batch.refuses(op));
                    peek_cmd(algorithm, &self.call(op, now, batch.refuses(op)).0)
                })
                .collect();
            let replies = execute(&connection, cmds).await?;
            if replies.len() != batch.ops.len() {
                return Err(bad_reply(format!(
                    "{} replies for {} operations",
                    replies.len(),
                    batch.ops.len()
                )));
            }
            batch
                .ops
                .iter()
                .zip(&replies)
                .map(|(op, reply)| outcome(op, algorithm_number(op, batch.refuses(op)), reply, now))
                .collect::<RedisResult<Vec<Outcome>>>()
        };
        match tokio::time::timeout(self.inner.config.timeout, call).await {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout),
        }
    }
}

/// An operation's `key args…` as the peek script's
/// `EVALSHA peek 1 key algorithm args…`.
fn peek_cmd(algorithm: u8, cmd: &redis::Cmd) -> redis::Cmd {
    let mut peek = redis::cmd("EVALSHA");
    peek.arg(scripts::PEEK.get_hash()).arg(1);
    let mut args = bytes_of(cmd);
    if let Some(key) = args.next() {
        peek.arg(key);
    }
    peek.arg(algorithm);
    for arg in args {
        peek.arg(arg);
    }
    peek
}
