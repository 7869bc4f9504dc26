//! The stores a test runs against: the embedded store, a standalone Redis
//! of its own, or the Redis Cluster the test binary shares.

use super::redis::{RedisServer, shared_cluster};
use floodgate::{MemoryStore, RedisConfig, RedisMode, RedisStore, StoreKind};
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A store and whatever keeps its servers alive.
pub struct Backend {
    pub store: StoreKind,
    _servers: Box<dyn Any + Send>,
}

impl Backend {
    /// `store`, with `servers` kept alive as long as it is.
    pub fn new(store: StoreKind, servers: impl Any + Send) -> Self {
        Self {
            store,
            _servers: Box::new(servers),
        }
    }
}

pub async fn memory() -> Backend {
    Backend {
        store: StoreKind::Memory(MemoryStore::new()),
        _servers: Box::new(()),
    }
}

pub fn redis_config(mode: RedisMode, url: String) -> RedisConfig {
    RedisConfig {
        mode,
        timeout: Duration::from_secs(2),
        ..RedisConfig::single(url)
    }
}

pub async fn connected(config: RedisConfig) -> StoreKind {
    let store = RedisStore::new(config);
    store.connect().await.expect("redis reachable");
    StoreKind::Redis {
        main: store,
        per_second: None,
    }
}

pub async fn standalone() -> Backend {
    let server = RedisServer::start();
    let store = connected(redis_config(RedisMode::Single, server.addr())).await;
    Backend {
        store,
        _servers: Box::new(server),
    }
}

/// A store on the Cluster this test binary shares ([`shared_cluster`]),
/// under a key prefix of its own, so tests on it never see each other's
/// counters.
pub async fn cluster() -> Backend {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cluster = tokio::task::spawn_blocking(shared_cluster).await.unwrap();
    let prefix = format!("t{}_", NEXT.fetch_add(1, Ordering::Relaxed));
    let store = connected(RedisConfig {
        key_prefix: prefix,
        ..redis_config(RedisMode::Cluster, cluster.seeds())
    })
    .await;
    Backend {
        store,
        _servers: Box::new(()),
    }
}
