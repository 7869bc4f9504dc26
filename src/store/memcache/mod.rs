//! The memcached store (`BACKEND_TYPE=memcache`), as the reference has it:
//! fixed windows only, on the reference's keys and expiry times, so both
//! services can count on one memcached during a migration.
//!
//! Each hit is counted with `incr`, whose answer is the count after it:
//! the decision is taken on that count, so concurrent requests never both
//! take the last hit (the reference reads first and counts afterwards, in
//! the background, and admits more than the limit under concurrency). A
//! key that does not exist yet is created with `add` (and counted with
//! `incr` again when another instance created it first). What memcached
//! cannot do in one step: `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` takes
//! hits back with `decr` after they were counted, so for that moment other
//! requests see them.

mod config;
mod keys;
mod ops;
mod pool;
mod srv;
mod tls;

use super::{Batch, Store, StoreError};
use crate::algorithm::Outcome;
use crate::clock::UnixMillis;
use arc_swap::ArcSwap;
use futures_util::future::join_all;
use pool::Server;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// memcached reads an expiry over 30 days as a point in time, not a
/// duration.
const MAX_RELATIVE_EXPIRY_SECS: u64 = 60 * 60 * 24 * 30;

pub use config::{MemcacheConfig, MemcacheServers, MemcacheTls};

/// Counters in memcached. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct MemcacheStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: MemcacheConfig,
    servers: ArcSwap<Vec<Arc<Server>>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    srv: Option<srv::SrvLookup>,
}

impl MemcacheStore {
    /// A store on the servers `config` names: an SRV record is asked once
    /// now (the reference does not start without its answer); nothing is
    /// dialled until the first call.
    ///
    /// # Errors
    ///
    /// [`StoreError::Srv`] when the SRV record gives no server,
    /// [`StoreError::TlsFile`] or [`StoreError::Config`] when the TLS
    /// settings cannot be used.
    pub async fn connect(config: MemcacheConfig) -> Result<Self, StoreError> {
        let tls = config.tls.as_ref().map(tls::client_config).transpose()?;
        let (addrs, srv) = match &config.servers {
            MemcacheServers::List(addrs) => (addrs.clone(), None),
            MemcacheServers::Srv { name, dns, .. } => {
                let lookup = srv::SrvLookup::new(name, *dns)?;
                (lookup.servers().await?, Some(lookup))
            }
        };
        if addrs.is_empty() {
            return Err(StoreError::Config {
                reason: "no memcached server: set MEMCACHE_HOST_PORT or MEMCACHE_SRV",
            });
        }
        let servers = addrs
            .into_iter()
            .map(|addr| Arc::new(Server::new(addr)))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                servers: ArcSwap::from_pointee(servers),
                tls,
                srv,
            }),
        })
    }

    /// The servers in use, in the order keys are spread over them.
    pub fn servers(&self) -> Vec<String> {
        self.inner
            .servers
            .load()
            .iter()
            .map(|s| s.addr.clone())
            .collect()
    }

    /// `MEMCACHE_SRV_REFRESH`: asks the SRV record again every period until
    /// `shutdown`; a failed answer keeps the servers in use.
    pub async fn maintain(&self, shutdown: CancellationToken) {
        let (
            Some(lookup),
            MemcacheServers::Srv {
                refresh: Some(period),
                ..
            },
        ) = (&self.inner.srv, &self.inner.config.servers)
        else {
            return;
        };
        let mut ticks = tokio::time::interval(*period);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match lookup.servers().await {
                Ok(addrs) => self.set_servers(addrs),
                Err(err) => tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "cannot refresh the memcached servers"
                ),
            }
        }
    }

    /// Uses `addrs` from now on, keeping the idle connections of servers
    /// that stay.
    fn set_servers(&self, addrs: Vec<String>) {
        let current = self.inner.servers.load();
        if current.iter().map(|s| &s.addr).eq(addrs.iter()) {
            return;
        }
        let servers: Vec<Arc<Server>> = addrs
            .into_iter()
            .map(|addr| {
                current
                    .iter()
                    .find(|s| s.addr == addr)
                    .map_or_else(|| Arc::new(Server::new(addr)), Arc::clone)
            })
            .collect();
        tracing::info!(servers = ?servers.iter().map(|s| &s.addr).collect::<Vec<_>>(), "memcached servers changed");
        self.inner.servers.store(Arc::new(servers));
    }

    /// Whether every server answers `version` within the timeout.
    pub async fn ping(&self) -> bool {
        let servers = self.inner.servers.load_full();
        let pings = servers.iter().map(|server| async move {
            let mut conn = server.take(self.inner.tls.as_ref()).await?;
            conn.version().await?;
            server.give_back(conn, self.inner.config.max_idle_conns);
            Ok::<(), io::Error>(())
        });
        matches!(
            tokio::time::timeout(self.inner.config.timeout, join_all(pings)).await,
            Ok(results) if results.iter().all(Result::is_ok)
        )
    }
}

impl Store for MemcacheStore {
    async fn execute_within(
        &self,
        batch: Batch,
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> Result<Vec<Outcome>, StoreError> {
        let within = deadline.map_or(self.inner.config.timeout, |d| {
            d.min(self.inner.config.timeout)
        });
        self.run(batch, now, within).await
    }

    async fn peek(&self, batch: &Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        self.read(batch, now).await
    }
}

#[cfg(test)]
mod tests;
