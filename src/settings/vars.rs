//! Every environment variable `floodgate serve` reads, declared once: its
//! name, the flag that wins over it, its default as users read it, and one
//! line of doc. The flags' `--help`, the error messages and the generated
//! settings reference (`floodgate settings-doc`, docs/settings.md) all
//! read these declarations; code refers to a variable by its declaration
//! (`vars::redis_url`), never by its name.
//!
//! Docs and defaults name other variables as `{lowercase_name}`, so each
//! name is written once; [`expand`] puts the names back.
#![allow(non_upper_case_globals)] // one declaration per variable, named after it

/// One environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Var {
    /// The variable's name.
    pub(crate) name: &'static str,
    /// The long flag that wins over it (`grpc-addr`), or empty.
    pub(crate) flag: &'static str,
    /// The default, as users read it (markdown).
    pub(crate) default: &'static str,
    /// What it sets, one line (markdown).
    pub(crate) doc: &'static str,
}

impl Var {
    /// The flag's `--help`: the doc, the variable and the default.
    pub(crate) fn help(&self) -> String {
        help_of(&[self])
    }
}

/// The `--help` of a flag that falls back to several variables: the first
/// one's doc and default, every variable named.
pub(crate) fn help_of(vars: &[&Var]) -> String {
    let names: Vec<&str> = vars.iter().map(|v| v.name).collect();
    let Some(first) = vars.first() else {
        return String::new();
    };
    let plain = |text: &str| expand(text).replace('`', "");
    format!(
        "{} [env: {}] [default: {}]",
        plain(first.doc),
        names.join(", "),
        plain(first.default)
    )
}

/// `text` with every `{lowercase_name}` replaced by the variable's name in
/// backquotes.
pub(crate) fn expand(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').and_then(|close| {
            let id = &after[..close];
            ALL.iter()
                .find(|v| v.name.eq_ignore_ascii_case(id))
                .map(|v| (v, close))
        }) {
            Some((var, close)) => {
                out.push('`');
                out.push_str(var.name);
                out.push('`');
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

mod access;
mod memcache;
mod serve;
mod sources;
mod stats;
mod store;

pub(crate) use access::*;
pub(crate) use memcache::*;
pub(crate) use serve::*;
pub(crate) use sources::*;
pub(crate) use stats::*;
pub(crate) use store::*;

/// Every variable, in the order the settings reference lists them.
pub(crate) const ALL: &[Var] = &[
    runtime_root,
    runtime_subdirectory,
    runtime_appdirectory,
    runtime_ignoredotfiles,
    merge_domain_config,
    grpc_host,
    grpc_port,
    grpc_uds,
    host,
    port,
    backend_type,
    log_level,
    rust_log,
    log_format,
    shadow_mode,
    quota_mode,
    limit_response_headers_enabled,
    limit_limit_header,
    limit_remaining_header,
    limit_reset_header,
    limit_all_descriptors_headers_enabled,
    limit_request_headers_enabled,
    limit_request_limit_header,
    limit_request_remaining_header,
    limit_request_reset_header,
    max_descriptors,
    max_descriptor_entries,
    max_entry_bytes,
    max_domain_bytes,
    max_hits_addend,
    max_request_bytes,
    memory_store_max_bytes,
    memory_store_snapshot_path,
    memory_store_snapshot_interval,
    tables_path,
    shutdown_grace,
    grpc_max_concurrent_streams,
    grpc_max_header_list_bytes,
    grpc_stream_window_bytes,
    grpc_connection_window_bytes,
    grpc_max_connection_age,
    grpc_max_connection_age_grace,
    config_poll_interval,
    healthy_with_at_least_one_config_loaded,
    grpc_server_use_tls,
    grpc_server_tls_cert,
    grpc_server_tls_key,
    grpc_client_tls_cacert,
    grpc_client_tls_san,
    redis_url,
    redis_type,
    redis_auth,
    redis_auth_file,
    redis_sentinel_auth,
    redis_pool_size,
    redis_timeout,
    redis_op_timeout,
    redis_connect_timeout,
    redis_startup_initial_interval,
    redis_startup_max_interval,
    redis_startup_max_elapsed_time,
    redis_health_check_active_connection,
    redis_close_connection_on_readonly_error,
    redis_persecond,
    redis_persecond_url,
    redis_tls,
    redis_persecond_tls,
    redis_tls_cacert,
    redis_tls_client_cert,
    redis_tls_client_key,
    redis_tls_skip_hostname_verification,
    memcache_host_port,
    memcache_srv,
    memcache_srv_refresh,
    memcache_srv_dns,
    memcache_max_idle_conns,
    memcache_timeout,
    memcache_tls,
    memcache_tls_cacert,
    memcache_tls_client_cert,
    memcache_tls_client_key,
    memcache_tls_skip_hostname_verification,
    cache_key_prefix,
    expiration_jitter_max_seconds,
    local_cache_size_in_bytes,
    stop_cache_key_increment_when_overlimit,
    response_dynamic_metadata,
    tracing_enabled,
    tracing_exporter_protocol,
    otel_exporter_otlp_endpoint,
    otel_exporter_otlp_traces_endpoint,
    tracing_service_name,
    tracing_service_namespace,
    tracing_service_instance_id,
    tracing_sampling_rate,
    otel_exporter_otlp_headers,
    otel_exporter_otlp_traces_headers,
    otel_exporter_otlp_insecure,
    otel_bsp_schedule_delay,
    failure_mode,
    stores_file,
    near_limit_ratio,
    metrics_max_series,
    use_prometheus,
    prometheus_addr,
    prometheus_path,
    prometheus_mapper_yaml,
    prometheus_response_time_as_milliseconds,
    debug_host,
    debug_port,
    use_statsd,
    statsd_host,
    statsd_port,
    statsd_protocol,
    stats_flush_interval,
    extra_tags,
    use_dog_statsd,
    use_dog_statsd_mogrifiers,
    disable_stats,
    config_type,
    force_start_without_initial_config,
    config_grpc_xds_server_url,
    config_grpc_xds_node_id,
    config_grpc_xds_node_metadata,
    config_grpc_xds_client_additional_headers,
    config_grpc_xds_server_use_tls,
    config_grpc_xds_server_tls_cacert,
    config_grpc_xds_client_tls_cert,
    config_grpc_xds_client_tls_key,
    config_grpc_xds_server_tls_san,
    config_grpc_xds_server_connect_retry_interval,
    xds_client_backoff_initial_interval,
    xds_client_backoff_max_interval,
    xds_client_backoff_random_factor,
    xds_client_backoff_jitter,
    xds_client_max_msg_size_in_bytes,
    rlqs_unmatched_behavior,
    rlqs_assignment_ttl,
    rlqs_idle_timeout,
    rlqs_max_buckets_per_stream,
    admin_trusted_networks,
    admin_tokens_file,
    redact_descriptor_keys,
    redact_key_file,
    redact_store_keys,
    redis_persecond_type,
    redis_persecond_auth,
    redis_persecond_auth_file,
    redis_persecond_sentinel_auth,
    redis_persecond_pool_size,
    redis_persecond_timeout,
    redis_persecond_op_timeout,
    redis_persecond_connect_timeout,
    otel_exporter_otlp_traces_insecure,
    redis_socket_type,
    redis_persecond_socket_type,
    grpc_server_tls_ca_cert,
    runtime_watch_root,
];
