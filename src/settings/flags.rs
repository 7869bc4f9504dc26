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
    /// memcached (shared by every instance; fixed windows only).
    Memcache,
}

/// Flags of `floodgate serve`; every one is optional and falls back to its
/// environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    #[arg(long, value_name = "DIR", help = vars::help_of(&[&vars::runtime_root, &vars::runtime_subdirectory, &vars::runtime_appdirectory]))]
    pub(crate) config_dir: Option<PathBuf>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::runtime_ignoredotfiles.help())]
    pub(crate) ignore_dotfiles: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::merge_domain_config.help())]
    pub(crate) merge_domain_config: Option<bool>,
    #[arg(long, value_name = "ADDR", help = vars::help_of(&[&vars::grpc_host, &vars::grpc_port]))]
    pub(crate) grpc_addr: Option<SocketAddr>,
    #[arg(long, value_name = "PATH", help = vars::grpc_uds.help())]
    pub(crate) grpc_uds: Option<PathBuf>,
    #[arg(long, value_name = "ADDR", help = vars::help_of(&[&vars::host, &vars::port]))]
    pub(crate) http_addr: Option<SocketAddr>,
    #[arg(long, value_enum, help = vars::backend_type.help())]
    pub(crate) store: Option<BackendType>,
    #[arg(long, value_name = "FILTER", help = vars::log_level.help())]
    pub(crate) log_level: Option<String>,
    #[arg(long, value_enum, help = vars::log_format.help())]
    pub(crate) log_format: Option<LogFormat>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::shadow_mode.help())]
    pub(crate) shadow_mode: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::quota_mode.help())]
    pub(crate) quota_mode: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::limit_response_headers_enabled.help())]
    pub(crate) limit_response_headers: Option<bool>,
    #[arg(long, value_name = "NAME", help = vars::limit_limit_header.help())]
    pub(crate) limit_limit_header: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::limit_remaining_header.help())]
    pub(crate) limit_remaining_header: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::limit_reset_header.help())]
    pub(crate) limit_reset_header: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::limit_all_descriptors_headers_enabled.help())]
    pub(crate) limit_all_descriptors_headers: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::limit_request_headers_enabled.help())]
    pub(crate) limit_request_headers: Option<bool>,
    #[arg(long, value_name = "NAME", help = vars::limit_request_limit_header.help())]
    pub(crate) limit_request_limit_header: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::limit_request_remaining_header.help())]
    pub(crate) limit_request_remaining_header: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::limit_request_reset_header.help())]
    pub(crate) limit_request_reset_header: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::response_dynamic_metadata.help())]
    pub(crate) response_dynamic_metadata: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::stop_cache_key_increment_when_overlimit.help())]
    pub(crate) stop_cache_key_increment_when_overlimit: Option<bool>,
    #[arg(long, value_name = "N", help = vars::max_descriptors.help())]
    pub(crate) max_descriptors: Option<usize>,
    #[arg(long, value_name = "N", help = vars::max_descriptor_entries.help())]
    pub(crate) max_entries: Option<usize>,
    #[arg(long, value_name = "BYTES", help = vars::max_entry_bytes.help())]
    pub(crate) max_entry_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = vars::max_domain_bytes.help())]
    pub(crate) max_domain_bytes: Option<usize>,
    #[arg(long, value_name = "N", help = vars::max_hits_addend.help())]
    pub(crate) max_hits_addend: Option<u64>,
    #[arg(long, value_name = "BYTES", help = vars::max_request_bytes.help())]
    pub(crate) max_request_bytes: Option<usize>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::shutdown_grace.help())]
    pub(crate) shutdown_grace: Option<Duration>,
    #[arg(long, value_name = "N", help = vars::grpc_max_concurrent_streams.help())]
    pub(crate) grpc_max_concurrent_streams: Option<u32>,
    #[arg(long, value_name = "BYTES", help = vars::grpc_max_header_list_bytes.help())]
    pub(crate) grpc_max_header_list_bytes: Option<u32>,
    #[arg(long, value_name = "BYTES", help = vars::grpc_stream_window_bytes.help())]
    pub(crate) grpc_stream_window_bytes: Option<u32>,
    #[arg(long, value_name = "BYTES", help = vars::grpc_connection_window_bytes.help())]
    pub(crate) grpc_connection_window_bytes: Option<u32>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::grpc_max_connection_age.help())]
    pub(crate) grpc_max_connection_age: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::grpc_max_connection_age_grace.help())]
    pub(crate) grpc_max_connection_age_grace: Option<Duration>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::healthy_with_at_least_one_config_loaded.help())]
    pub(crate) healthy_with_at_least_one_config_loaded: Option<bool>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::config_poll_interval.help())]
    pub(crate) config_poll_interval: Option<Duration>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::grpc_server_use_tls.help())]
    pub(crate) grpc_server_use_tls: Option<bool>,
    #[arg(long, value_name = "FILE", help = vars::grpc_server_tls_cert.help())]
    pub(crate) grpc_server_tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::grpc_server_tls_key.help())]
    pub(crate) grpc_server_tls_key: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::grpc_client_tls_cacert.help())]
    pub(crate) grpc_client_tls_cacert: Option<PathBuf>,
    #[arg(long, value_name = "NAME", help = vars::grpc_client_tls_san.help())]
    pub(crate) grpc_client_tls_san: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::use_prometheus.help())]
    pub(crate) use_prometheus: Option<bool>,
    #[arg(long, value_name = "ADDR", help = vars::prometheus_addr.help())]
    pub(crate) prometheus_addr: Option<String>,
    #[arg(long, value_name = "PATH", help = vars::prometheus_path.help())]
    pub(crate) prometheus_path: Option<String>,
    #[arg(long, value_name = "RATIO", help = vars::near_limit_ratio.help())]
    pub(crate) near_limit_ratio: Option<f64>,
    #[arg(long, value_name = "N", help = vars::metrics_max_series.help())]
    pub(crate) metrics_max_series: Option<usize>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::tracing_enabled.help())]
    pub(crate) tracing_enabled: Option<bool>,
    #[arg(long, value_enum, help = vars::tracing_exporter_protocol.help())]
    pub(crate) tracing_exporter_protocol: Option<TracingExporterProtocol>,
    #[arg(long, value_name = "URL", help = vars::otel_exporter_otlp_endpoint.help())]
    pub(crate) otlp_endpoint: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::tracing_service_name.help())]
    pub(crate) tracing_service_name: Option<String>,
    #[arg(long, value_name = "NAME", help = vars::tracing_service_namespace.help())]
    pub(crate) tracing_service_namespace: Option<String>,
    #[arg(long, value_name = "ID", help = vars::tracing_service_instance_id.help())]
    pub(crate) tracing_service_instance_id: Option<String>,
    #[arg(long, value_name = "RATE", help = vars::tracing_sampling_rate.help())]
    pub(crate) tracing_sampling_rate: Option<f64>,
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
    /// Who may use the operator views, and what they show.
    #[command(flatten)]
    pub access_args: AccessArgs,
}

/// Flags of the operator views' access and of redaction; each falls back to
/// its environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct AccessArgs {
    #[arg(long, value_name = "CIDRS", help = vars::admin_trusted_networks.help())]
    pub(crate) admin_trusted_networks: Option<String>,
    #[arg(long, value_name = "FILE", help = vars::admin_tokens_file.help())]
    pub(crate) admin_tokens_file: Option<PathBuf>,
    #[arg(long, value_name = "KEYS", help = vars::redact_descriptor_keys.help())]
    pub(crate) redact_descriptor_keys: Option<String>,
    #[arg(long, value_name = "FILE", help = vars::redact_key_file.help())]
    pub(crate) redact_key_file: Option<PathBuf>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redact_store_keys.help())]
    pub(crate) redact_store_keys: Option<bool>,
}

/// OTLP transport of spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TracingExporterProtocol {
    /// Protobuf over HTTP POST to `<endpoint>/v1/traces`.
    Http,
    /// gRPC `TraceService/Export`.
    Grpc,
}

/// What to answer when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnStoreError {
    /// gRPC UNAVAILABLE (Envoy's `failure_mode_deny` decides).
    Error,
    /// Answer OK (fail open).
    Allow,
    /// Answer OVER_LIMIT (fail closed).
    Deny,
}

/// Redis deployment kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RedisType {
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
    #[arg(long, value_name = "URL", help = vars::redis_url.help())]
    pub(crate) redis_url: Option<String>,
    #[arg(long, value_enum, help = vars::redis_type.help())]
    pub(crate) redis_type: Option<RedisType>,
    #[arg(long, value_name = "AUTH", help = vars::redis_auth.help())]
    pub(crate) redis_auth: Option<String>,
    #[arg(long, value_name = "FILE", help = vars::redis_auth_file.help())]
    pub(crate) redis_auth_file: Option<PathBuf>,
    #[arg(long, value_name = "AUTH", help = vars::redis_sentinel_auth.help())]
    pub(crate) redis_sentinel_auth: Option<String>,
    #[arg(long, value_name = "N", help = vars::redis_pool_size.help())]
    pub(crate) redis_pool_size: Option<usize>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_timeout.help())]
    pub(crate) redis_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_op_timeout.help())]
    pub(crate) redis_op_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_connect_timeout.help())]
    pub(crate) redis_connect_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_startup_initial_interval.help())]
    pub(crate) redis_startup_initial_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_startup_max_interval.help())]
    pub(crate) redis_startup_max_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::redis_startup_max_elapsed_time.help())]
    pub(crate) redis_startup_max_elapsed_time: Option<Duration>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redis_health_check_active_connection.help())]
    pub(crate) redis_health_check_active_connection: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redis_close_connection_on_readonly_error.help())]
    pub(crate) redis_close_connection_on_readonly_error: Option<bool>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redis_persecond.help())]
    pub(crate) redis_persecond: Option<bool>,
    #[arg(long, value_name = "URL", help = vars::redis_persecond_url.help())]
    pub(crate) redis_persecond_url: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redis_tls.help())]
    pub(crate) redis_tls: Option<bool>,
    #[arg(long, value_name = "FILE", help = vars::redis_tls_cacert.help())]
    pub(crate) redis_tls_cacert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::redis_tls_client_cert.help())]
    pub(crate) redis_tls_client_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::redis_tls_client_key.help())]
    pub(crate) redis_tls_client_key: Option<PathBuf>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::redis_tls_skip_hostname_verification.help())]
    pub(crate) redis_tls_skip_hostname_verification: Option<bool>,
    #[arg(long, value_name = "PREFIX", help = vars::cache_key_prefix.help())]
    pub(crate) cache_key_prefix: Option<String>,
    #[arg(long, value_name = "SECS", help = vars::expiration_jitter_max_seconds.help())]
    pub(crate) expiration_jitter_max_seconds: Option<u64>,
    #[arg(long, value_name = "BYTES", help = vars::local_cache_size_in_bytes.help())]
    pub(crate) local_cache_size_in_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = vars::memory_store_max_bytes.help())]
    pub(crate) memory_store_max_bytes: Option<usize>,
    #[arg(long, value_name = "FILE", help = vars::memory_store_snapshot_path.help())]
    pub(crate) memory_store_snapshot_path: Option<PathBuf>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::memory_store_snapshot_interval.help())]
    pub(crate) memory_store_snapshot_interval: Option<Duration>,
    #[arg(long, value_name = "FILE", help = vars::tables_path.help())]
    pub(crate) tables_path: Option<PathBuf>,
    #[arg(long, value_enum, help = vars::failure_mode.help())]
    pub(crate) on_store_error: Option<OnStoreError>,
    #[arg(long, value_name = "FILE", help = vars::stores_file.help())]
    pub(crate) stores_file: Option<PathBuf>,
}

/// What an RLQS bucket matching no rule gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RlqsUnmatched {
    /// ALLOW_ALL (as RLS answers OK).
    Allow,
    /// DENY_ALL.
    Deny,
}

/// Flags of the Rate Limit Quota Service; each falls back to its
/// environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct RlqsArgs {
    #[arg(long, value_enum, help = vars::rlqs_unmatched_behavior.help())]
    pub(crate) rlqs_unmatched_behavior: Option<RlqsUnmatched>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::rlqs_assignment_ttl.help())]
    pub(crate) rlqs_assignment_ttl: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::rlqs_idle_timeout.help())]
    pub(crate) rlqs_idle_timeout: Option<Duration>,
    #[arg(long, value_name = "N", help = vars::rlqs_max_buckets_per_stream.help())]
    pub(crate) rlqs_max_buckets_per_stream: Option<usize>,
}
