//! The memcached store's settings: where the servers are, TLS, timeouts,
//! keys and expiry.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the memcached servers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemcacheServers {
    /// `MEMCACHE_HOST_PORT`: `host:port` (or socket paths), in this order.
    List(Vec<String>),
    /// `MEMCACHE_SRV`: the servers a DNS SRV record names.
    Srv {
        /// `_service._proto.name`.
        name: String,
        /// `MEMCACHE_SRV_REFRESH`: asked again this often; `None`: once.
        refresh: Option<Duration>,
        /// `MEMCACHE_SRV_DNS`: the DNS server to ask; `None`: the system's.
        dns: Option<SocketAddr>,
    },
}

/// TLS to memcached (`MEMCACHE_TLS` and its files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemcacheTls {
    /// PEM CA bundle to trust instead of the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate.
    pub client_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    pub client_key: Option<PathBuf>,
    /// Accept a certificate issued for another name (the chain is still
    /// verified).
    pub skip_hostname_verification: bool,
}

/// Everything needed to reach memcached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcacheConfig {
    /// The servers.
    pub servers: MemcacheServers,
    /// `MEMCACHE_MAX_IDLE_CONNS`: idle connections kept per server.
    pub max_idle_conns: usize,
    /// `MEMCACHE_TIMEOUT`: deadline of one request's calls.
    pub timeout: Duration,
    /// `CACHE_KEY_PREFIX`, prepended to every key.
    pub key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: random extra expiry in `[0, N)`,
    /// and below the window's length.
    pub expiration_jitter_max_secs: u64,
    /// `MEMCACHE_TLS`: `None` is plaintext.
    pub tls: Option<MemcacheTls>,
}

impl MemcacheConfig {
    /// Plain connections to `servers`, with the reference's defaults.
    pub fn servers(servers: Vec<String>) -> Self {
        Self {
            servers: MemcacheServers::List(servers),
            max_idle_conns: 2,
            timeout: Duration::from_millis(500),
            key_prefix: String::new(),
            expiration_jitter_max_secs: 0,
            tls: None,
        }
    }
}
