//! The flags of `floodgate serve` (clap), each documented with the
//! environment variable it falls back to and its default.

use super::*;

/// Which store counts hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendType {
    /// Embedded in-process store (one instance, exact, lost on restart).
    Memory,
    /// Redis (shared by every instance).
    Redis,
}

/// Flags of `floodgate serve`; every one is optional and falls back to its
/// environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Rule directory [env: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY] [default: examples/config]
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Skip rule files whose name starts with '.' [env: RUNTIME_IGNOREDOTFILES]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub ignore_dotfiles: Option<bool>,
    /// Merge rule files that name the same domain [env: MERGE_DOMAIN_CONFIG]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub merge_domain_config: Option<bool>,
    /// gRPC listen address [env: GRPC_HOST, GRPC_PORT] [default: 127.0.0.1:8081]
    #[arg(long, value_name = "ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// HTTP listen address [env: HOST, PORT] [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// Counter store [env: BACKEND_TYPE] [default: memory, or redis when REDIS_URL is set]
    #[arg(long, value_enum)]
    pub store: Option<BackendType>,
    /// Log filter, e.g. `info` or `floodgate=debug` [env: LOG_LEVEL; RUST_LOG wins] [default: info]
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Log format [env: LOG_FORMAT] [default: text]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Answer OVER_LIMIT requests as OK (statuses keep OVER_LIMIT) [env: SHADOW_MODE]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub shadow_mode: Option<bool>,
    /// Treat every descriptor as quota_mode [env: QUOTA_MODE]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub quota_mode: Option<bool>,
    /// Add RateLimit-* headers to responses [env: LIMIT_RESPONSE_HEADERS_ENABLED]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub limit_response_headers: Option<bool>,
    /// Name of the limit header [env: LIMIT_LIMIT_HEADER] [default: RateLimit-Limit]
    #[arg(long, value_name = "NAME")]
    pub limit_limit_header: Option<String>,
    /// Name of the remaining header [env: LIMIT_REMAINING_HEADER] [default: RateLimit-Remaining]
    #[arg(long, value_name = "NAME")]
    pub limit_remaining_header: Option<String>,
    /// Name of the reset header [env: LIMIT_RESET_HEADER] [default: RateLimit-Reset]
    #[arg(long, value_name = "NAME")]
    pub limit_reset_header: Option<String>,
    /// Return the metadata of matched rules in responses' dynamic_metadata [env: RESPONSE_DYNAMIC_METADATA]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub response_dynamic_metadata: Option<bool>,
    /// Count nothing for a request that is over the limit on any descriptor [env: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub stop_cache_key_increment_when_overlimit: Option<bool>,
    /// Most descriptors per request [env: MAX_DESCRIPTORS] [default: 64]
    #[arg(long, value_name = "N")]
    pub max_descriptors: Option<usize>,
    /// Most entries per descriptor [env: MAX_DESCRIPTOR_ENTRIES] [default: 32]
    #[arg(long, value_name = "N")]
    pub max_entries: Option<usize>,
    /// Most bytes per entry, key plus value [env: MAX_ENTRY_BYTES] [default: 4096]
    #[arg(long, value_name = "BYTES")]
    pub max_entry_bytes: Option<usize>,
    /// Most bytes in a request's domain [env: MAX_DOMAIN_BYTES] [default: 256]
    #[arg(long, value_name = "BYTES")]
    pub max_domain_bytes: Option<usize>,
    /// Largest hits_addend, of the request or of one descriptor [env: MAX_HITS_ADDEND] [default: 1000000000]
    #[arg(long, value_name = "N")]
    pub max_hits_addend: Option<u64>,
    /// Largest request message, gRPC or `/json` body [env: MAX_REQUEST_BYTES] [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Longest drain of in-flight requests on shutdown, e.g. `10s` [env: SHUTDOWN_GRACE] [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// Report NOT_SERVING while no rule file declares a domain [env: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub healthy_with_at_least_one_config_loaded: Option<bool>,
    /// How often the rule directory is checked for changes, e.g. `250ms` [env: CONFIG_POLL_INTERVAL] [default: 250ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub config_poll_interval: Option<Duration>,
    /// Serve gRPC over TLS [env: GRPC_SERVER_USE_TLS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub grpc_server_use_tls: Option<bool>,
    /// PEM certificate chain of the gRPC server; re-read when it changes [env: GRPC_SERVER_TLS_CERT]
    #[arg(long, value_name = "FILE")]
    pub grpc_server_tls_cert: Option<PathBuf>,
    /// PEM private key of the gRPC server; re-read when it changes [env: GRPC_SERVER_TLS_KEY]
    #[arg(long, value_name = "FILE")]
    pub grpc_server_tls_key: Option<PathBuf>,
    /// PEM CA bundle; when set, gRPC clients must present a certificate it signed (mTLS) [env: GRPC_CLIENT_TLS_CACERT]
    #[arg(long, value_name = "FILE")]
    pub grpc_client_tls_cacert: Option<PathBuf>,
    /// DNS name the client certificate must be valid for; needs the CA [env: GRPC_CLIENT_TLS_SAN]
    #[arg(long, value_name = "NAME")]
    pub grpc_client_tls_san: Option<String>,
    /// Serve /metrics on a separate listener too [env: USE_PROMETHEUS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub use_prometheus: Option<bool>,
    /// Address of the separate metrics listener; `:9090` means every interface [env: PROMETHEUS_ADDR] [default: :9090]
    #[arg(long, value_name = "ADDR")]
    pub prometheus_addr: Option<String>,
    /// Path of the metrics on the separate listener [env: PROMETHEUS_PATH] [default: /metrics]
    #[arg(long, value_name = "PATH")]
    pub prometheus_path: Option<String>,
    /// Share of a limit past which hits count as near_limit [env: NEAR_LIMIT_RATIO] [default: 0.8]
    #[arg(long, value_name = "RATIO")]
    pub near_limit_ratio: Option<f64>,
    /// Most distinct per-rule metric series (runtime-valued stats keys) [env: METRICS_MAX_SERIES] [default: 10000]
    #[arg(long, value_name = "N")]
    pub metrics_max_series: Option<usize>,
    /// Export OpenTelemetry spans of calls over OTLP [env: TRACING_ENABLED]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub tracing_enabled: Option<bool>,
    /// OTLP transport [env: TRACING_EXPORTER_PROTOCOL] [default: http]
    #[arg(long, value_enum)]
    pub tracing_exporter_protocol: Option<TracingExporterProtocol>,
    /// Collector URL, e.g. http://otel-collector:4318 [env: OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins] [default: http://localhost:4318, grpc: http://localhost:4317]
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Resource attribute service.name [env: TRACING_SERVICE_NAME] [default: RateLimit]
    #[arg(long, value_name = "NAME")]
    pub tracing_service_name: Option<String>,
    /// Resource attribute service.namespace [env: TRACING_SERVICE_NAMESPACE]
    #[arg(long, value_name = "NAME")]
    pub tracing_service_namespace: Option<String>,
    /// Resource attribute service.instance.id [env: TRACING_SERVICE_INSTANCE_ID] [default: a random UUID]
    #[arg(long, value_name = "ID")]
    pub tracing_service_instance_id: Option<String>,
    /// Share of new traces sampled; a caller's sampling decision wins [env: TRACING_SAMPLING_RATE] [default: 1]
    #[arg(long, value_name = "RATE")]
    pub tracing_sampling_rate: Option<f64>,
    /// Redis and counting settings.
    #[command(flatten)]
    pub store_args: StoreArgs,
    /// Stats sinks and the debug listener.
    #[command(flatten)]
    pub stats_args: StatsArgs,
    /// Rule source settings (files or xDS).
    #[command(flatten)]
    pub xds_args: XdsArgs,
    /// Rate Limit Quota Service settings.
    #[command(flatten)]
    pub rlqs_args: RlqsArgs,
}

/// OTLP transport of spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TracingExporterProtocol {
    /// Protobuf over HTTP POST to `<endpoint>/v1/traces`.
    Http,
    /// gRPC `TraceService/Export`.
    Grpc,
}

/// What to answer when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnStoreError {
    /// gRPC UNAVAILABLE (Envoy's `failure_mode_deny` decides).
    Error,
    /// Answer OK (fail open).
    Allow,
    /// Answer OVER_LIMIT (fail closed).
    Deny,
}

/// Redis deployment kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedisType {
    /// One server.
    Single,
    /// A master found through Sentinel.
    Sentinel,
    /// Redis Cluster.
    Cluster,
}

/// Flags of the counter store; each falls back to its environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// Redis address: host:port, redis://…, a socket path; sentinel: `master,host:port,…`; cluster: `h1:p1,h2:p2` [env: REDIS_URL] [default: 127.0.0.1:6379]
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Redis deployment [env: REDIS_TYPE] [default: single]
    #[arg(long, value_enum)]
    pub redis_type: Option<RedisType>,
    /// Redis `password` or `user:password` [env: REDIS_AUTH]
    #[arg(long, value_name = "AUTH")]
    pub redis_auth: Option<String>,
    /// Password of the Sentinel nodes [env: REDIS_SENTINEL_AUTH]
    #[arg(long, value_name = "AUTH")]
    pub redis_sentinel_auth: Option<String>,
    /// Multiplexed connections per Redis [env: REDIS_POOL_SIZE] [default: 2]
    #[arg(long, value_name = "N")]
    pub redis_pool_size: Option<usize>,
    /// Deadline of one request's Redis round trip [env: REDIS_TIMEOUT] [default: 100ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Option<Duration>,
    /// Deadline of one Redis connection attempt [env: REDIS_CONNECT_TIMEOUT] [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub redis_connect_timeout: Option<Duration>,
    /// Drop and redial a Redis connection that answers READONLY (a demoted master behind a repointed address) [env: REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR] [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_close_connection_on_readonly_error: Option<bool>,
    /// Send one-second windows to a second Redis, set by REDIS_PERSECOND_* [env: REDIS_PERSECOND]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_persecond: Option<bool>,
    /// Address of the per-second Redis [env: REDIS_PERSECOND_URL]
    #[arg(long, value_name = "URL")]
    pub redis_persecond_url: Option<String>,
    /// Connect to Redis over TLS [env: REDIS_TLS, REDIS_PERSECOND_TLS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_tls: Option<bool>,
    /// PEM CA bundle to trust for Redis TLS instead of the system roots [env: REDIS_TLS_CACERT]
    #[arg(long, value_name = "FILE")]
    pub redis_tls_cacert: Option<PathBuf>,
    /// PEM client certificate for Redis TLS [env: REDIS_TLS_CLIENT_CERT]
    #[arg(long, value_name = "FILE")]
    pub redis_tls_client_cert: Option<PathBuf>,
    /// PEM key of the Redis client certificate [env: REDIS_TLS_CLIENT_KEY]
    #[arg(long, value_name = "FILE")]
    pub redis_tls_client_key: Option<PathBuf>,
    /// Accept a Redis certificate issued for another host name [env: REDIS_TLS_SKIP_HOSTNAME_VERIFICATION]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_tls_skip_hostname_verification: Option<bool>,
    /// Prefix of every Redis key [env: CACHE_KEY_PREFIX]
    #[arg(long, value_name = "PREFIX")]
    pub cache_key_prefix: Option<String>,
    /// Random extra key expiry in [0, N) seconds [env: EXPIRATION_JITTER_MAX_SECONDS] [default: 300]
    #[arg(long, value_name = "SECS")]
    pub expiration_jitter_max_seconds: Option<u64>,
    /// Budget of the in-process over-limit cache; 0 disables it [env: LOCAL_CACHE_SIZE_IN_BYTES] [default: 0]
    #[arg(long, value_name = "BYTES")]
    pub local_cache_size_in_bytes: Option<usize>,
    /// Byte budget of the embedded store; least recently used counters are evicted past it [env: MEMORY_STORE_MAX_BYTES] [default: 134217728]
    #[arg(long, value_name = "BYTES")]
    pub memory_store_max_bytes: Option<usize>,
    /// File the embedded store writes its counters to and reads them back from at start [env: MEMORY_STORE_SNAPSHOT_PATH] [default: none, counters start empty]
    #[arg(long, value_name = "FILE")]
    pub memory_store_snapshot_path: Option<PathBuf>,
    /// How often the embedded store's snapshot is written (and at shutdown) [env: MEMORY_STORE_SNAPSHOT_INTERVAL] [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub memory_store_snapshot_interval: Option<Duration>,
    /// What to answer when the store fails [env: FAILURE_MODE] [default: error]
    #[arg(long, value_enum)]
    pub on_store_error: Option<OnStoreError>,
}

/// What an RLQS bucket matching no rule gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RlqsUnmatched {
    /// ALLOW_ALL (as RLS answers OK).
    Allow,
    /// DENY_ALL.
    Deny,
}

/// Flags of the Rate Limit Quota Service; each falls back to its
/// environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct RlqsArgs {
    /// What an RLQS bucket that matches no rule (or an unknown domain) gets [env: RLQS_UNMATCHED_BEHAVIOR] [default: allow]
    #[arg(long, value_enum)]
    pub rlqs_unmatched_behavior: Option<RlqsUnmatched>,
    /// How long an Envoy keeps an RLQS assignment without news (at least 1s) [env: RLQS_ASSIGNMENT_TTL] [default: 15s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub rlqs_assignment_ttl: Option<Duration>,
    /// An RLQS bucket reporting no request for this long is abandoned [env: RLQS_IDLE_TIMEOUT] [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub rlqs_idle_timeout: Option<Duration>,
    /// Most distinct buckets one RLQS stream may track; more are denied [env: RLQS_MAX_BUCKETS_PER_STREAM] [default: 10000]
    #[arg(long, value_name = "N")]
    pub rlqs_max_buckets_per_stream: Option<usize>,
}
