//! What serving needs before it starts: bound listeners, options, and
//! the errors it can end with.

use super::tls::{TlsError, TlsOptions};
use crate::config::xds::RuleFeed;
use crate::config::{Fingerprint, LoadOptions};
use crate::metrics::ReloadStats;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Listeners bound before serving (so tests can bind port 0 and read the
/// address without any sleep).
#[derive(Debug)]
pub struct Listeners {
    /// gRPC listener (RLS, RLQS, health, reflection).
    pub grpc: GrpcListener,
    /// HTTP listener (`/healthcheck`, `/json`, `/rlconfig`, `/metrics`).
    pub http: TcpListener,
    /// Separate metrics listener (`USE_PROMETHEUS` + `PROMETHEUS_ADDR`).
    pub metrics: Option<TcpListener>,
}

/// Where gRPC is served: a TCP address, or a unix socket (`GRPC_UDS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrpcAt {
    /// `GRPC_HOST:GRPC_PORT`.
    Tcp(SocketAddr),
    /// `GRPC_UDS`: a unix domain socket at this path.
    Unix(PathBuf),
}

impl std::fmt::Display for GrpcAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(addr) => write!(f, "{addr}"),
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The bound gRPC listener.
#[derive(Debug)]
pub enum GrpcListener {
    /// On TCP.
    Tcp(TcpListener),
    /// On a unix domain socket.
    Unix(tokio::net::UnixListener),
}

impl From<TcpListener> for GrpcListener {
    fn from(listener: TcpListener) -> Self {
        Self::Tcp(listener)
    }
}

impl GrpcListener {
    /// Where it listens.
    ///
    /// # Errors
    ///
    /// The listener's address cannot be read.
    pub fn local(&self) -> std::io::Result<GrpcAt> {
        match self {
            Self::Tcp(listener) => listener.local_addr().map(GrpcAt::Tcp),
            Self::Unix(listener) => {
                let addr = listener.local_addr()?;
                Ok(GrpcAt::Unix(
                    addr.as_pathname().map(PathBuf::from).unwrap_or_default(),
                ))
            }
        }
    }
}

impl Listeners {
    /// Binds the addresses (the metrics one when given). A unix socket's
    /// path is taken over when a socket file is left there (a previous
    /// process's); any other file there is an error.
    ///
    /// # Errors
    ///
    /// [`ServeError::Bind`] naming the address that could not be bound.
    pub async fn bind(
        grpc: GrpcAt,
        http: SocketAddr,
        metrics: Option<SocketAddr>,
    ) -> Result<Self, ServeError> {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: addr.to_string(),
                    source,
                })
        };
        let grpc = match grpc {
            GrpcAt::Tcp(addr) => GrpcListener::Tcp(bind(addr).await?),
            GrpcAt::Unix(path) => GrpcListener::Unix(bind_unix(&path)?),
        };
        Ok(Self {
            grpc,
            http: bind(http).await?,
            metrics: match metrics {
                Some(addr) => Some(bind(addr).await?),
                None => None,
            },
        })
    }
}

/// Serving options that are not decisions.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Longest time in-flight requests may take to drain on shutdown.
    pub shutdown_grace: Duration,
    /// Most concurrent requests per gRPC connection, advertised as HTTP/2's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (streams past it are refused by
    /// HTTP/2 itself).
    pub max_concurrent_per_connection: usize,
    /// A gRPC connection older than this is sent GOAWAY
    /// (`GRPC_MAX_CONNECTION_AGE`); `None`: never.
    pub max_connection_age: Option<Duration>,
    /// How long calls in flight may take after that GOAWAY
    /// (`GRPC_MAX_CONNECTION_AGE_GRACE`); `None`: as long as they take.
    pub max_connection_age_grace: Option<Duration>,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: health follows whether the
    /// store answers (checked every second), not only its first connect.
    pub health_follows_store: bool,
    /// Largest request message accepted, gRPC message or `/json` body
    /// (`MAX_REQUEST_BYTES`); larger ones are refused before decoding.
    pub max_request_bytes: usize,
    /// What HTTP/2 lets one gRPC stream and connection hold.
    pub http2: Http2Bounds,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: report NOT_SERVING while
    /// the rule index in force has no domain.
    pub healthy_only_with_rules: bool,
    /// Reload the rules from a directory when it changes; `None` serves the
    /// limiter's index as it is.
    pub reload: Option<ReloadOptions>,
    /// Serve gRPC over TLS (certificates re-read when they change); `None`
    /// serves plaintext.
    pub tls: Option<TlsOptions>,
    /// Path of the metrics on the separate metrics listener
    /// (`PROMETHEUS_PATH`).
    pub metrics_path: String,
    /// Stats export: the Prometheus listener's mapping, `EXTRA_TAGS`, the
    /// statsd sink.
    pub stats: StatsExport,
    /// Rules swapped in by an xDS client running beside the server: health
    /// follows each rule set it applies, and metrics report its load
    /// counters. `None` without xDS.
    pub rule_feed: Option<RuleFeed>,
    /// The Rate Limit Quota Service (RLQS) settings.
    pub rlqs: crate::rlqs::RlqsOptions,
    /// `TRACING_ENABLED`: span every `ShouldRateLimit` call; `None` traces
    /// nothing and reads no trace header.
    pub tracer: Option<crate::otel::RequestTracer>,
    /// Who may use the operator views.
    pub access: super::access::AccessOptions,
    /// `STORES_FILE`, watched for changes; `None` without one.
    pub stores_file: Option<StoresWatch>,
}

/// The stores file (`STORES_FILE`) as the instance started with it, and
/// how a new text of it is checked. Stores are opened at start only: a
/// change that reads is logged at WARN (it takes effect at the next start),
/// one that does not at ERROR (the stores in force are kept either way).
#[derive(Debug, Clone)]
pub struct StoresWatch {
    /// The file.
    pub path: std::path::PathBuf,
    /// Its text at start.
    pub text: String,
    /// Whether a text of it reads, and why not.
    pub check: fn(&str) -> Result<(), String>,
}

/// Largest HTTP/2 flow-control window, 2^31 - 1 bytes (RFC 9113, 6.9.1).
pub(crate) const MAX_WINDOW_BYTES: u32 = (1 << 31) - 1;

/// What HTTP/2 lets one gRPC stream and one connection make floodgate
/// hold, besides `GRPC_MAX_CONCURRENT_STREAMS` streams: with the defaults a
/// connection holds at most 1 MiB of request bytes unread and 16 KiB of
/// headers a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Bounds {
    /// Largest header block of a request, bytes as HTTP/2 counts them
    /// (names, values and 32 an entry) (`GRPC_MAX_HEADER_LIST_BYTES`).
    pub max_header_list_bytes: u32,
    /// Request bytes a stream may send before floodgate reads them
    /// (`GRPC_STREAM_WINDOW_BYTES`); at most 2^31 - 1.
    pub stream_window_bytes: u32,
    /// Request bytes all streams of a connection may send before
    /// floodgate reads them (`GRPC_CONNECTION_WINDOW_BYTES`); at most
    /// 2^31 - 1.
    pub connection_window_bytes: u32,
}

impl Default for Http2Bounds {
    /// hyper's own defaults, which floodgate had before they were settings.
    fn default() -> Self {
        Self {
            max_header_list_bytes: 16 << 10,
            stream_window_bytes: 1 << 20,
            connection_window_bytes: 1 << 20,
        }
    }
}

/// How the reference's stats leave the process.
#[derive(Debug, Clone, Default)]
pub struct StatsExport {
    /// statsd_exporter mapping of the Prometheus listener
    /// (`PROMETHEUS_MAPPER_YAML`); `None` is the reference's built-in one.
    pub mapper: Option<Arc<crate::metrics::Mapper>>,
    /// `EXTRA_TAGS`, appended to every stat name.
    pub extra_tags: crate::metrics::statsd_names::Tags,
    /// The statsd sink (`USE_STATSD`), flushed by a background task.
    pub statsd: Option<crate::metrics::statsd::StatsdOptions>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            shutdown_grace: Duration::from_secs(10),
            max_concurrent_per_connection: 1_024,
            max_connection_age: None,
            max_connection_age_grace: None,
            health_follows_store: false,
            max_request_bytes: 1 << 20,
            http2: Http2Bounds::default(),
            healthy_only_with_rules: false,
            reload: None,
            tls: None,
            metrics_path: "/metrics".to_owned(),
            stats: StatsExport::default(),
            rule_feed: None,
            rlqs: crate::rlqs::RlqsOptions::default(),
            tracer: None,
            access: super::access::AccessOptions::default(),
            stores_file: None,
        }
    }
}

/// Where reloaded rules come from, and how often to look.
#[derive(Debug, Clone)]
pub struct ReloadOptions {
    /// Rule directory.
    pub dir: PathBuf,
    /// How its files are combined.
    pub load: LoadOptions,
    /// Time between two checks of the directory.
    pub interval: Duration,
    /// Reload outcome counters, updated by the watcher (shared so metrics
    /// and tests can read them).
    pub stats: Arc<ReloadStats>,
    /// The directory as it was when the limiter's index was loaded: any
    /// later difference triggers a reload.
    pub baseline: Fingerprint,
}

impl ReloadOptions {
    /// Reloads from `dir` with `load`, checking every
    /// `DEFAULT_POLL_INTERVAL`.
    ///
    /// Takes the directory's `Fingerprint` now: call it *before* loading
    /// the initial index, so a change made during that load is not missed.
    /// Blocking file I/O.
    pub fn new(dir: PathBuf, load: LoadOptions) -> Self {
        let baseline = Fingerprint::of(&dir);
        Self {
            dir,
            load,
            interval: crate::config::DEFAULT_POLL_INTERVAL,
            stats: Arc::default(),
            baseline,
        }
    }
}

/// Binds a unix socket at `path`, replacing a stale socket file.
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, ServeError> {
    use std::os::unix::fs::FileTypeExt as _;
    let failed = |source| ServeError::Bind {
        addr: format!("unix:{}", path.display()),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(failed(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            )));
        }
        std::fs::remove_file(path).map_err(failed)?;
    }
    tokio::net::UnixListener::bind(path).map_err(failed)
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// Address asked for (`host:port`, or `unix:<path>`).
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading a listener's address failed.
    #[error("cannot read listener address")]
    LocalAddr(#[source] std::io::Error),
    /// The gRPC server failed.
    #[error("grpc server failed")]
    Grpc(#[source] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("http server failed")]
    Http(#[source] std::io::Error),
    /// The reflection service could not be built from the descriptor set.
    #[error("cannot build grpc reflection service")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The gRPC TLS configuration could not be built.
    #[error("cannot set up grpc tls")]
    Tls(#[source] TlsError),
    /// The admin tokens file cannot be used.
    #[error("cannot use the admin tokens")]
    Tokens(#[source] super::access::TokensError),
}
