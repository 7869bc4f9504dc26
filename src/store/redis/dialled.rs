//! A pooled lane's own connection, dialled again by the lane itself (see
//! [`Dialled`]): no reconnect hidden inside the client can swap a
//! connection under a call or make a call wait for a backoff sleep.

use super::fault::{is_connection_failure, must_leave};
use redis::{RedisError, RedisResult};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A connection a lane owns and dials again itself, so no call goes on a
/// connection that died in an outage or was left on a demoted master:
/// after a call failed on its connection (refused, reset, broken) or met a
/// server that must be left (READONLY, LOADING, MASTERDOWN: see
/// `fault::needs_redial`), the lane drops its connection and raises the
/// pool's epoch; every lane of the pool, this one included, dials afresh
/// before its next call. The pool's lanes are dialled together when it is
/// built, so they all meet a failover the same way.
pub(super) struct Dialled {
    client: redis::Client,
    config: redis::AsyncConnectionConfig,
    conn: Option<redis::aio::MultiplexedConnection>,
    /// The pool's epoch when this lane last dialled.
    seen: u64,
    epoch: Arc<AtomicU64>,
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`.
    leave_readonly: bool,
}

impl Dialled {
    /// A lane's connection to the server `client` names; `epoch` is shared
    /// by the pool's lanes.
    pub(super) fn new(
        client: redis::Client,
        config: redis::AsyncConnectionConfig,
        epoch: Arc<AtomicU64>,
        leave_readonly: bool,
    ) -> Self {
        Self {
            client,
            config,
            conn: None,
            seen: 0,
            epoch,
            leave_readonly,
        }
    }

    /// Dials now (the pool's lanes at once, when it is built).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached.
    pub(super) async fn connect(&mut self) -> RedisResult<()> {
        self.ready().await.map(|_| ())
    }

    /// The connection to send on, dialled afresh when there is none or the
    /// pool's epoch moved. An error here sent nothing.
    pub(super) async fn ready(&mut self) -> RedisResult<&mut redis::aio::MultiplexedConnection> {
        let epoch = self.epoch.load(Ordering::Acquire);
        if epoch != self.seen {
            self.conn = None;
        }
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let conn = self
                    .client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?;
                self.seen = epoch;
                conn
            }
        };
        Ok(self.conn.insert(conn))
    }

    /// Notes a failed call: a connection failure, or a server to leave,
    /// drops the connection and has every lane of the pool dial afresh.
    pub(super) fn failed(&mut self, err: &RedisError) {
        if is_connection_failure(err) || must_leave(err, self.leave_readonly) {
            self.conn = None;
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }
}
