//! Connections: a pool of multiplexed connections to one server (standalone,
//! or the master Sentinel names), or a Cluster connection; opening them and
//! loading the scripts.

use super::call::load_scripts;
use super::coalesce::{ClusterLanes, Lane, Target, in_runs};
use super::config::{RedisConfig, RedisMode, connection_info, redact};
use super::dialled::Dialled;
use super::fault::Signals;
use super::scripts;
use super::slots::SlotTable;
use crate::store::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ConnectionInfo, RedisError, RedisResult};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use tracing::warn;

pub(super) enum Connection {
    Pool(Pool),
    Cluster(Cluster),
}

/// A Cluster connection (multiplexed, routing by key) and the lanes: per
/// master, over connections of their own, and routed.
pub(super) struct Cluster {
    pub(super) conn: ClusterConnection,
    pub(super) lanes: ClusterLanes,
    /// For limit tables: answers wait up to [`TABLES_TIMEOUT`], as an
    /// import runs for seconds inside Redis.
    pub(super) tables: ClusterConnection,
}

/// How long a limit-table call may wait for its answer: an import of a
/// million entries runs for seconds inside Redis, and a call given up
/// early would leave the API unsure whether its change was made.
pub(super) const TABLES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pool(pool) => {
                write!(f, "Pool({} connections to {})", pool.conns.len(), pool.addr)
            }
            Self::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

pub(super) struct Pool {
    pub(super) addr: String,
    /// The connections, each with its lane (`lanes[i]` sends on `conns[i]`).
    conns: Vec<(ConnectionManager, Lane)>,
    next: AtomicUsize,
    /// For limit tables (answers within [`TABLES_TIMEOUT`]), dialled on
    /// first use.
    pub(super) tables: ConnectionManager,
}

impl Pool {
    /// The next connection and its lane, round robin in runs (see
    /// [`LANE_RUN`]); `None` only for a pool without connections, which
    /// `connect_pool` never builds.
    fn next(&self) -> Option<&(ConnectionManager, Lane)> {
        self.conns.get(in_runs(&self.next, self.conns.len()))
    }

    /// A connection for commands of their own (pipelines, script loading).
    pub(super) fn pick(&self) -> Option<ConnectionManager> {
        self.next().map(|(conn, _)| conn.clone())
    }

    /// A lane, for operations that may share a script call.
    pub(super) fn lane(&self) -> Option<&Lane> {
        self.next().map(|(_, lane)| lane)
    }
}

pub(super) async fn open(
    config: &RedisConfig,
    signals: &Arc<Signals>,
) -> Result<Connection, StoreError> {
    match config.mode {
        RedisMode::Single => {
            let info = connection_info(&config.url, config.auth.as_deref(), config.tls.as_ref())?;
            let addr = redact(&config.url);
            Ok(Connection::Pool(
                connect_pool(config, info, addr, signals).await?,
            ))
        }
        RedisMode::Sentinel => {
            let master = sentinel_master(config).await?;
            Ok(Connection::Pool(
                connect_pool(config, master.info, master.addr_text, signals).await?,
            ))
        }
        RedisMode::Cluster => {
            let seeds = config
                .url
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| connection_info(s, None, config.tls.as_ref()))
                .collect::<RedisResult<Vec<_>>>()?;
            let client = cluster_client(config, seeds.clone(), config.timeout)?;
            let conn = client.get_async_connection().await?;
            let tables = cluster_client(config, seeds, TABLES_TIMEOUT)?
                .get_async_connection()
                .await?;
            // Every master gets the scripts up front (SCRIPT LOAD goes to
            // all), so the first requests do not pay for it.
            load_scripts(&mut conn.clone()).await?;
            let slots = Arc::new(SlotTable::new());
            if let Err(err) = slots.read_now(&mut conn.clone()).await {
                // Served per hash tag until a lane's refresh reads it.
                warn!(error = %err, "could not read the Cluster's slot table");
            }
            let node_config = config.clone();
            let lanes = ClusterLanes::new(
                conn.clone(),
                slots,
                Box::new(move |addr| dial_node(&node_config, addr)),
                config.pool_size,
                Arc::clone(signals),
                config.connect_timeout,
            );
            Ok(Connection::Cluster(Cluster {
                conn,
                lanes,
                tables,
            }))
        }
    }
}

/// A Cluster client from `seeds` with the configuration's TLS and auth,
/// its answers waited for `timeout`.
fn cluster_client(
    config: &RedisConfig,
    seeds: Vec<ConnectionInfo>,
    timeout: std::time::Duration,
) -> Result<redis::cluster::ClusterClient, StoreError> {
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(config.connect_timeout)
        .response_timeout(timeout)
        .retries(2);
    if let Some(tls) = &config.tls {
        builder = builder
            .certs(tls.certificates()?)
            .danger_accept_invalid_hostnames(tls.skip_hostname_verification);
    }
    if let Some(auth) = config.auth.as_deref().filter(|a| !a.is_empty()) {
        builder = match auth.split_once(':') {
            Some((user, password)) => builder.username(user).password(password),
            None => builder.password(auth),
        };
    }
    Ok(builder.build()?)
}

/// A client for one server, with the configuration's TLS.
fn client(config: &RedisConfig, info: ConnectionInfo) -> Result<Client, StoreError> {
    Ok(match &config.tls {
        Some(tls) => Client::build_with_tls(info, tls.certificates()?)?,
        None => Client::open(info)?,
    })
}

/// How pooled and node connections (re)connect: one attempt within the
/// connect timeout, and answers within `REDIS_TIMEOUT`. No retry with a
/// backoff inside the client: a call that finds its connection being
/// re-dialled waits for that one attempt, never for a backoff sleep taken
/// while Redis was still down (which made calls time out after Redis was
/// back); a refused call goes once more by itself (`fault::is_unsent`), and
/// the store's own redial paces attempts during an outage.
fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.timeout))
        .set_number_of_retries(0)
}

/// A connection to one Cluster master at `addr`, dialled on its first call
/// (so a dead master costs nothing until a request needs it), with the
/// Cluster's auth and TLS.
fn dial_node(config: &RedisConfig, addr: &str) -> Result<ConnectionManager, StoreError> {
    let info = connection_info(addr, config.auth.as_deref(), config.tls.as_ref())?;
    Ok(ConnectionManager::new_lazy_with_config(
        client(config, info)?,
        manager_config(config),
    )?)
}

pub(super) async fn connect_pool(
    config: &RedisConfig,
    info: ConnectionInfo,
    addr: String,
    signals: &Arc<Signals>,
) -> Result<Pool, StoreError> {
    let client = client(config, info)?;
    let manager_config = manager_config(config);
    let lane_config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.timeout));
    let epoch = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut conns = Vec::with_capacity(config.pool_size.max(1));
    for _ in 0..config.pool_size.max(1) {
        conns.push(
            ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?,
        );
    }
    // Load the scripts up front so the first requests do not pay for it.
    if let Some(conn) = conns.first_mut() {
        for script in scripts::all() {
            script.prepare_invoke().load_async(conn).await?;
        }
    }
    let mut lanes = Vec::with_capacity(conns.len());
    for conn in conns {
        let mut dialled = Dialled::new(
            client.clone(),
            lane_config.clone(),
            Arc::clone(&epoch),
            config.redial_on_readonly,
        );
        dialled.connect().await?;
        lanes.push((
            conn,
            Lane::spawn(Target::Server(Box::new(dialled)), Arc::clone(signals)),
        ));
    }
    let conns = lanes;
    let tables = ConnectionManager::new_lazy_with_config(
        client,
        manager_config.set_response_timeout(Some(TABLES_TIMEOUT)),
    )?;
    Ok(Pool {
        addr,
        conns,
        next: AtomicUsize::new(0),
        tables,
    })
}

/// The error of a pool without connections (never built; typed anyway so
/// no request path can panic).
pub(super) fn no_connection() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "redis pool has no connection"))
}

pub(super) struct Master {
    pub(super) info: ConnectionInfo,
    pub(super) addr_text: String,
}

/// Asks the Sentinel nodes, in order, where the master is.
pub(super) async fn sentinel_master(config: &RedisConfig) -> Result<Master, StoreError> {
    let mut parts = config.url.split(',').map(str::trim);
    let name = parts
        .next()
        .filter(|n| !n.is_empty())
        .ok_or(StoreError::Config {
            reason: "sentinel REDIS_URL must be 'mastername,host:port[,host:port…]'",
        })?;
    let mut last_error = None;
    for node in parts.filter(|p| !p.is_empty()) {
        let attempt = async {
            let info = connection_info(node, config.sentinel_auth.as_deref(), None)?;
            let client = Client::open(info)?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let (host, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>((host, port))
        };
        match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(Ok((host, port))) => {
                let addr_text = format!("{host}:{port}");
                let info =
                    connection_info(&addr_text, config.auth.as_deref(), config.tls.as_ref())?;
                return Ok(Master { info, addr_text });
            }
            Ok(Err(err)) => last_error = Some(StoreError::from(err)),
            Err(_) => last_error = Some(StoreError::Timeout),
        }
    }
    Err(last_error.unwrap_or(StoreError::Config {
        reason: "sentinel REDIS_URL names no sentinel node",
    }))
}
