//! The Redis store: standalone, Sentinel or Cluster, shared by every
//! floodgate instance so limits are global.
//!
//! Every check-and-count runs inside Redis as Lua (EVALSHA), never as a read
//! in the service followed by a write, so concurrent callers can never
//! over-admit. All operations of one request go out together, and with them
//! those of every request that queued meanwhile (`coalesce`): one batch
//! script call per connection write on standalone and Sentinel; on a
//! Cluster, one call per node (its keys checked to be served there before
//! anything is written), all sent at once. Connections are multiplexed and
//! shared by all requests.
//!
//! The store knows counters, windows and limits, never descriptors.

mod call;
mod coalesce;
mod command;
mod config;
mod connection;
mod dialled;
mod execute;
mod fault;
mod fence;
mod keys;
mod peek;
mod reply;
mod rlqs;
mod scripts;
mod sentinel;
mod slots;
mod tables;

pub use config::{RedisConfig, RedisMode, RedisTls};
pub(crate) use tables::{TableLogLine, TableWrite, TableWritten};

use super::{Batch, Fetch, GivenBack, Outcome, Settled, Store, StoreError, Unused};
use crate::clock::UnixMillis;
use arc_swap::ArcSwapOption;
use connection::{Connection, connect_pool, no_connection, open, sentinel_master};
use fault::Signals;
use keys::Keys;
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Redis-backed counters; clones share connections.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: RedisConfig,
    keys: Keys,
    connection: ArcSwapOption<Connection>,
    /// Wakes requests waiting for the first connection.
    connected: tokio::sync::Notify,
    /// The lanes' redial signal and call counters.
    signals: Arc<Signals>,
    /// Sliding-log members: a per-process random key over a counter.
    nonce_seed: RandomState,
    nonce_counter: AtomicU64,
}

/// How often Sentinel is asked where the master is (besides following its
/// `+switch-master` announcements).
const SENTINEL_POLL: Duration = Duration::from_secs(1);
/// Least time between two redials: a server that keeps answering READONLY
/// (a Sentinel not yet told of the failover) is dialled a few times a
/// second, not once per failed call.
const REDIAL_GAP: Duration = Duration::from_millis(200);

impl RedisStore {
    /// A store for `config`, not yet connected: call [`RedisStore::maintain`]
    /// (the server does) or [`RedisStore::connect`].
    pub fn new(config: RedisConfig) -> Self {
        let keys = Keys::new(config.key_prefix.clone());
        let signals = Arc::new(Signals::new(config.redial_on_readonly));
        Self {
            inner: Arc::new(Inner {
                config,
                keys,
                connection: ArcSwapOption::empty(),
                connected: tokio::sync::Notify::new(),
                signals,
                nonce_seed: RandomState::new(),
                nonce_counter: AtomicU64::new(0),
            }),
        }
    }

    /// Whether a connection is established (health reports NOT_SERVING
    /// until it is).
    pub fn is_ready(&self) -> bool {
        self.inner.connection.load().is_some()
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// Script calls sent and the requests they carried, since start (how
    /// well requests share calls).
    pub fn call_stats(&self) -> crate::metrics::store::CallStats {
        self.inner.signals.stats()
    }

    /// Connects once.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when Redis (or Sentinel) cannot be reached in time.
    pub async fn connect(&self) -> Result<(), StoreError> {
        let connection = tokio::time::timeout(
            self.inner.config.connect_timeout.saturating_mul(2),
            open(&self.inner.config, &self.inner.signals),
        )
        .await
        .map_err(|_| StoreError::Timeout)??;
        info!(redis.url = %self.inner.config.redacted_url(), redis.connection = ?connection, "redis connected");
        self.inner.connection.store(Some(Arc::new(connection)));
        self.inner.connected.notify_waiters();
        Ok(())
    }

    /// Whether Redis answers a PING now, within the call timeout. A failed
    /// PING is a failed call: when its connection must be replaced, the
    /// store dials afresh (as after a failed request), so a Redis that
    /// comes back is found without traffic.
    pub async fn ping(&self) -> bool {
        let Some(connection) = self.inner.connection.load_full() else {
            return false;
        };
        let call = async {
            let reply = match &*connection {
                Connection::Pool(pool) => match pool.pick() {
                    Some(mut conn) => redis::cmd("PING").query_async::<String>(&mut conn).await,
                    None => Err(no_connection()),
                },
                Connection::Cluster(cluster) => {
                    let mut conn = cluster.conn.clone();
                    redis::cmd("PING").query_async::<String>(&mut conn).await
                }
            };
            match reply {
                Ok(_) => true,
                Err(err) => {
                    self.inner.signals.failed(&err);
                    false
                }
            }
        };
        tokio::time::timeout(self.inner.config.timeout, call)
            .await
            .unwrap_or(false)
    }

    /// The connection, waiting for the first one when a request arrives
    /// before it (the caller's timeout bounds the wait).
    async fn connection(&self) -> Arc<Connection> {
        loop {
            let notified = self.inner.connected.notified();
            if let Some(connection) = self.inner.connection.load_full() {
                return connection;
            }
            notified.await;
        }
    }

    /// Keeps the store connected until `shutdown`: connects with backoff at
    /// start; then dials afresh whenever a lane meets a connection that
    /// must be replaced (READONLY, LOADING, MASTERDOWN, a dropped
    /// connection: see `fault`), asking Sentinel again where the master is;
    /// and with Sentinel, follows the master when it moves (announced on
    /// `+switch-master`, and polled).
    pub async fn maintain(&self, shutdown: CancellationToken) {
        let (first, longest) = self.inner.config.startup_backoff;
        let mut backoff = first;
        while !self.is_ready() {
            match self.connect().await {
                Ok(()) => break,
                Err(err) => {
                    warn!(error = &err as &dyn std::error::Error, redis.url = %self.inner.config.redacted_url(), retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX), "redis not reachable");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = backoff.saturating_mul(2).min(longest.max(first));
        }
        let sentinel = self.inner.config.mode == RedisMode::Sentinel;
        let switches = async {
            if sentinel {
                sentinel::follow_switches(&self.inner.config, &self.inner.signals, &shutdown).await;
            }
        };
        let redials = async {
            let mut tick = tokio::time::interval(SENTINEL_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick(), if sentinel => self.follow_master(false).await,
                    () = self.inner.signals.redial.notified() => {
                        self.redial().await;
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(REDIAL_GAP) => {}
                        }
                    }
                }
            }
        };
        tokio::join!(switches, redials);
    }

    /// Replaces the connection with a fresh one (Sentinel: to the master it
    /// names now). A Cluster keeps its connections (they reconnect by
    /// themselves, and a node that moved is found by reading the slot
    /// table); a failed dial keeps the old connection, and the next failed
    /// call asks again.
    async fn redial(&self) {
        let config = &self.inner.config;
        match config.mode {
            RedisMode::Cluster => {}
            RedisMode::Sentinel => self.follow_master(true).await,
            RedisMode::Single => {
                let dialled = tokio::time::timeout(
                    config.connect_timeout.saturating_mul(2),
                    open(config, &self.inner.signals),
                )
                .await;
                match dialled {
                    Ok(Ok(connection)) => {
                        info!(redis.url = %config.redacted_url(), "redis connection replaced");
                        self.inner.connection.store(Some(Arc::new(connection)));
                    }
                    Ok(Err(err)) => {
                        debug!(
                            error = &err as &dyn std::error::Error,
                            "redis redial failed"
                        );
                    }
                    Err(_) => debug!("redis redial timed out"),
                }
            }
        }
    }

    /// Asks Sentinel where the master is and connects to it when it moved
    /// (or, with `always`, in any case: the connection answered as no
    /// master does).
    async fn follow_master(&self, always: bool) {
        let config = &self.inner.config;
        let master =
            match tokio::time::timeout(config.connect_timeout, sentinel_master(config)).await {
                Ok(Ok(master)) => master,
                Ok(Err(err)) => {
                    warn!(
                        error = &err as &dyn std::error::Error,
                        "sentinel query failed"
                    );
                    return;
                }
                Err(_) => {
                    warn!("sentinel query timed out");
                    return;
                }
            };
        let current = self.inner.connection.load();
        if !always
            && let Some(Connection::Pool(pool)) = current.as_deref()
            && pool.addr == master.addr_text
        {
            return;
        }
        match connect_pool(
            config,
            master.info,
            master.addr_text.clone(),
            &self.inner.signals,
        )
        .await
        {
            Ok(pool) => {
                info!(redis.master = %master.addr_text, "redis master changed; reconnected");
                self.inner
                    .connection
                    .store(Some(Arc::new(Connection::Pool(pool))));
            }
            Err(err) => {
                warn!(error = &err as &dyn std::error::Error, redis.master = %master.addr_text, "cannot connect to new redis master")
            }
        }
    }

    fn ttl_secs(&self, window_secs: u64) -> u64 {
        let max = self.inner.config.expiration_jitter_max_secs;
        window_secs.saturating_add(crate::store::expiry_jitter_secs(max, window_secs))
    }

    /// A value unique to this call, for sliding-log members.
    fn nonce(&self) -> u64 {
        let n = self.inner.nonce_counter.fetch_add(1, Ordering::Relaxed);
        self.inner.nonce_seed.hash_one((n, "nonce"))
    }
}

impl Store for RedisStore {
    async fn execute_within(
        &self,
        batch: Batch,
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> Result<Vec<Outcome>, StoreError> {
        // One deadline for the whole request (`REDIS_TIMEOUT`, or the
        // caller's when sooner); the lane enforces it (one timer per script
        // call, not one per request).
        let within = deadline.map_or(self.inner.config.timeout, |d| {
            d.min(self.inner.config.timeout)
        });
        let deadline = Instant::now() + within;
        let connection = match self.inner.connection.load_full() {
            Some(connection) => connection,
            // Boxed, as the other rare paths: a request's future stays small.
            None => Box::pin(timeout_at(deadline, self.connection()))
                .await
                .map_err(|_| StoreError::Timeout)?,
        };
        self.run(&connection, batch, now, deadline).await
    }

    async fn peek(&self, batch: &Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        self.peek_batch(batch, now).await
    }

    fn leases(&self) -> bool {
        true
    }

    async fn fetch(&self, fetches: &[Fetch]) -> Result<Vec<Outcome>, StoreError> {
        self.fetch_fenced(fetches).await
    }

    async fn settle(&self, fetches: Vec<Fetch>) -> Settled {
        self.settle_fetches(fetches).await
    }

    async fn give_back(&self, unused: Vec<Unused>) -> GivenBack {
        self.give_back_unused(unused).await
    }
}

#[cfg(test)]
mod tests;
