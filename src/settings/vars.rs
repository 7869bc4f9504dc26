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

/// `runtime_root`.
pub(crate) const runtime_root: Var = Var {
    name: "RUNTIME_ROOT",
    flag: "config-dir",
    default: "`examples/config` (when none is set)",
    doc: "Rule directory: {runtime_root}/{runtime_subdirectory}/{runtime_appdirectory} (root `/srv/runtime_data/current` and app `config` when one of the three is set)",
};

/// `runtime_subdirectory`.
pub(crate) const runtime_subdirectory: Var = Var {
    name: "RUNTIME_SUBDIRECTORY",
    flag: "config-dir",
    default: "`examples/config` (when none is set)",
    doc: "Middle part of the rule directory (see {runtime_root})",
};

/// `runtime_appdirectory`.
pub(crate) const runtime_appdirectory: Var = Var {
    name: "RUNTIME_APPDIRECTORY",
    flag: "config-dir",
    default: "`examples/config` (when none is set)",
    doc: "Last part of the rule directory (see {runtime_root})",
};

/// `runtime_ignoredotfiles`.
pub(crate) const runtime_ignoredotfiles: Var = Var {
    name: "RUNTIME_IGNOREDOTFILES",
    flag: "ignore-dotfiles",
    default: "false",
    doc: "Skip rule files whose name starts with '.'",
};

/// `merge_domain_config`.
pub(crate) const merge_domain_config: Var = Var {
    name: "MERGE_DOMAIN_CONFIG",
    flag: "merge-domain-config",
    default: "false",
    doc: "Merge rule files that name the same domain",
};

/// `grpc_host`.
pub(crate) const grpc_host: Var = Var {
    name: "GRPC_HOST",
    flag: "grpc-addr",
    default: "`127.0.0.1:8081`",
    doc: "gRPC listen address: its host ({grpc_port}: its port)",
};

/// `grpc_port`.
pub(crate) const grpc_port: Var = Var {
    name: "GRPC_PORT",
    flag: "grpc-addr",
    default: "`127.0.0.1:8081`",
    doc: "gRPC listen address: its port ({grpc_host}: its host)",
};

/// `grpc_uds`.
pub(crate) const grpc_uds: Var = Var {
    name: "GRPC_UDS",
    flag: "grpc-uds",
    default: "(none: gRPC on TCP)",
    doc: "Serve gRPC on this unix domain socket instead of {grpc_host}:{grpc_port} (a stale socket file there is replaced); not with TLS",
};

/// `host`.
pub(crate) const host: Var = Var {
    name: "HOST",
    flag: "http-addr",
    default: "`127.0.0.1:8080`",
    doc: "HTTP listen address: its host ({port}: its port)",
};

/// `port`.
pub(crate) const port: Var = Var {
    name: "PORT",
    flag: "http-addr",
    default: "`127.0.0.1:8080`",
    doc: "HTTP listen address: its port ({host}: its host)",
};

/// `backend_type`.
pub(crate) const backend_type: Var = Var {
    name: "BACKEND_TYPE",
    flag: "store",
    default: "`memory` (`redis` when {redis_url} is set)",
    doc: "Counter store",
};

/// `log_level`.
pub(crate) const log_level: Var = Var {
    name: "LOG_LEVEL",
    flag: "log-level",
    default: "`info`",
    doc: "Log filter, e.g. `info` or `floodgate=debug`",
};

/// `rust_log`.
pub(crate) const rust_log: Var = Var {
    name: "RUST_LOG",
    flag: "",
    default: "(none)",
    doc: "A tracing filter that wins over {log_level} and `--log-level`",
};

/// `log_format`.
pub(crate) const log_format: Var = Var {
    name: "LOG_FORMAT",
    flag: "log-format",
    default: "`text`",
    doc: "Log format",
};

/// `shadow_mode`.
pub(crate) const shadow_mode: Var = Var {
    name: "SHADOW_MODE",
    flag: "shadow-mode",
    default: "false",
    doc: "Answer OVER_LIMIT requests as OK (statuses keep OVER_LIMIT)",
};

/// `quota_mode`.
pub(crate) const quota_mode: Var = Var {
    name: "QUOTA_MODE",
    flag: "quota-mode",
    default: "false",
    doc: "Treat every descriptor as quota_mode",
};

/// `limit_response_headers_enabled`.
pub(crate) const limit_response_headers_enabled: Var = Var {
    name: "LIMIT_RESPONSE_HEADERS_ENABLED",
    flag: "limit-response-headers",
    default: "false",
    doc: "Add RateLimit-* headers to responses",
};

/// `limit_limit_header`.
pub(crate) const limit_limit_header: Var = Var {
    name: "LIMIT_LIMIT_HEADER",
    flag: "limit-limit-header",
    default: "`RateLimit-Limit`",
    doc: "Name of the limit header",
};

/// `limit_remaining_header`.
pub(crate) const limit_remaining_header: Var = Var {
    name: "LIMIT_REMAINING_HEADER",
    flag: "limit-remaining-header",
    default: "`RateLimit-Remaining`",
    doc: "Name of the remaining header",
};

/// `limit_reset_header`.
pub(crate) const limit_reset_header: Var = Var {
    name: "LIMIT_RESET_HEADER",
    flag: "limit-reset-header",
    default: "`RateLimit-Reset`",
    doc: "Name of the reset header",
};

/// `limit_all_descriptors_headers_enabled`.
pub(crate) const limit_all_descriptors_headers_enabled: Var = Var {
    name: "LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED",
    flag: "limit-all-descriptors-headers",
    default: "false",
    doc: "Instead of the most constrained descriptor's headers, `ratelimit-limit-<unit>s` and `ratelimit-remaining-<unit>s` for every limited descriptor (the reference's pull request #1190)",
};

/// `limit_request_headers_enabled`.
pub(crate) const limit_request_headers_enabled: Var = Var {
    name: "LIMIT_REQUEST_HEADERS_ENABLED",
    flag: "limit-request-headers",
    default: "false",
    doc: "Add the most constrained descriptor's limit, remaining and reset to the request sent upstream (`request_headers_to_add`; pull request #1168)",
};

/// `limit_request_limit_header`.
pub(crate) const limit_request_limit_header: Var = Var {
    name: "LIMIT_REQUEST_LIMIT_HEADER",
    flag: "limit-request-limit-header",
    default: "`RateLimit-Limit`",
    doc: "Name of the upstream request's limit header",
};

/// `limit_request_remaining_header`.
pub(crate) const limit_request_remaining_header: Var = Var {
    name: "LIMIT_REQUEST_REMAINING_HEADER",
    flag: "limit-request-remaining-header",
    default: "`RateLimit-Remaining`",
    doc: "Name of the upstream request's remaining header",
};

/// `limit_request_reset_header`.
pub(crate) const limit_request_reset_header: Var = Var {
    name: "LIMIT_REQUEST_RESET_HEADER",
    flag: "limit-request-reset-header",
    default: "`RateLimit-Reset`",
    doc: "Name of the upstream request's reset header",
};

/// `max_descriptors`.
pub(crate) const max_descriptors: Var = Var {
    name: "MAX_DESCRIPTORS",
    flag: "max-descriptors",
    default: "64",
    doc: "Most descriptors per request",
};

/// `max_descriptor_entries`.
pub(crate) const max_descriptor_entries: Var = Var {
    name: "MAX_DESCRIPTOR_ENTRIES",
    flag: "max-entries",
    default: "32",
    doc: "Most entries per descriptor",
};

/// `max_entry_bytes`.
pub(crate) const max_entry_bytes: Var = Var {
    name: "MAX_ENTRY_BYTES",
    flag: "max-entry-bytes",
    default: "4096",
    doc: "Most bytes per entry, key plus value",
};

/// `max_domain_bytes`.
pub(crate) const max_domain_bytes: Var = Var {
    name: "MAX_DOMAIN_BYTES",
    flag: "max-domain-bytes",
    default: "256",
    doc: "Most bytes in a request's domain",
};

/// `max_hits_addend`.
pub(crate) const max_hits_addend: Var = Var {
    name: "MAX_HITS_ADDEND",
    flag: "max-hits-addend",
    default: "1000000000",
    doc: "Largest hits_addend, of the request or of one descriptor",
};

/// `max_request_bytes`.
pub(crate) const max_request_bytes: Var = Var {
    name: "MAX_REQUEST_BYTES",
    flag: "max-request-bytes",
    default: "1048576",
    doc: "Largest request message, gRPC or `/json` body",
};

/// `memory_store_max_bytes`.
pub(crate) const memory_store_max_bytes: Var = Var {
    name: "MEMORY_STORE_MAX_BYTES",
    flag: "memory-store-max-bytes",
    default: "134217728",
    doc: "Byte budget of the embedded store; least recently used counters are evicted past it",
};

/// `memory_store_snapshot_path`.
pub(crate) const memory_store_snapshot_path: Var = Var {
    name: "MEMORY_STORE_SNAPSHOT_PATH",
    flag: "memory-store-snapshot-path",
    default: "(none: counters start empty)",
    doc: "File the embedded store writes its counters to and reads them back from at start",
};

/// `memory_store_snapshot_interval`.
pub(crate) const memory_store_snapshot_interval: Var = Var {
    name: "MEMORY_STORE_SNAPSHOT_INTERVAL",
    flag: "memory-store-snapshot-interval",
    default: "`1s`",
    doc: "How often the embedded store's snapshot is written (and at shutdown)",
};

/// `shutdown_grace`.
pub(crate) const shutdown_grace: Var = Var {
    name: "SHUTDOWN_GRACE",
    flag: "shutdown-grace",
    default: "`10s`",
    doc: "Longest drain of in-flight requests on shutdown, e.g. `10s`",
};

/// `grpc_max_concurrent_streams`.
pub(crate) const grpc_max_concurrent_streams: Var = Var {
    name: "GRPC_MAX_CONCURRENT_STREAMS",
    flag: "grpc-max-concurrent-streams",
    default: "1024",
    doc: "Most concurrent requests per gRPC connection (HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS`); 0 keeps 1024, for floodgate never serves unbounded streams (the reference's 0 is unlimited)",
};

/// `grpc_max_connection_age`.
pub(crate) const grpc_max_connection_age: Var = Var {
    name: "GRPC_MAX_CONNECTION_AGE",
    flag: "grpc-max-connection-age",
    default: "`24h`",
    doc: "A gRPC connection older than this is sent GOAWAY (calls in flight finish), so clients spread over new instances",
};

/// `grpc_max_connection_age_grace`.
pub(crate) const grpc_max_connection_age_grace: Var = Var {
    name: "GRPC_MAX_CONNECTION_AGE_GRACE",
    flag: "grpc-max-connection-age-grace",
    default: "`1h`",
    doc: "After GOAWAY, how long calls in flight may take before the connection is closed",
};

/// `config_poll_interval`.
pub(crate) const config_poll_interval: Var = Var {
    name: "CONFIG_POLL_INTERVAL",
    flag: "config-poll-interval",
    default: "`250ms`",
    doc: "How often the rule directory is checked for changes, e.g. `250ms`",
};

/// `healthy_with_at_least_one_config_loaded`.
pub(crate) const healthy_with_at_least_one_config_loaded: Var = Var {
    name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    flag: "healthy-with-at-least-one-config-loaded",
    default: "false",
    doc: "Report NOT_SERVING while no rule file declares a domain",
};

/// `grpc_server_use_tls`.
pub(crate) const grpc_server_use_tls: Var = Var {
    name: "GRPC_SERVER_USE_TLS",
    flag: "grpc-server-use-tls",
    default: "false",
    doc: "Serve gRPC over TLS",
};

/// `grpc_server_tls_cert`.
pub(crate) const grpc_server_tls_cert: Var = Var {
    name: "GRPC_SERVER_TLS_CERT",
    flag: "grpc-server-tls-cert",
    default: "(none; required with TLS)",
    doc: "PEM certificate chain of the gRPC server; re-read when it changes",
};

/// `grpc_server_tls_key`.
pub(crate) const grpc_server_tls_key: Var = Var {
    name: "GRPC_SERVER_TLS_KEY",
    flag: "grpc-server-tls-key",
    default: "(none; required with TLS)",
    doc: "PEM private key of the gRPC server; re-read when it changes",
};

/// `grpc_client_tls_cacert`.
pub(crate) const grpc_client_tls_cacert: Var = Var {
    name: "GRPC_CLIENT_TLS_CACERT",
    flag: "grpc-client-tls-cacert",
    default: "(none: no client certificate asked)",
    doc: "PEM CA bundle; when set, gRPC clients must present a certificate it signed (mTLS)",
};

/// `grpc_client_tls_san`.
pub(crate) const grpc_client_tls_san: Var = Var {
    name: "GRPC_CLIENT_TLS_SAN",
    flag: "grpc-client-tls-san",
    default: "(none; needs the CA)",
    doc: "DNS name the client certificate must be valid for; needs the CA",
};

/// `redis_url`.
pub(crate) const redis_url: Var = Var {
    name: "REDIS_URL",
    flag: "redis-url",
    default: "`127.0.0.1:6379`",
    doc: "Redis address: host:port, redis://…, a socket path; sentinel: `master,host:port,…`; cluster: `h1:p1,h2:p2`",
};

/// `redis_type`.
pub(crate) const redis_type: Var = Var {
    name: "REDIS_TYPE",
    flag: "redis-type",
    default: "`single`",
    doc: "Redis deployment",
};

/// `redis_auth`.
pub(crate) const redis_auth: Var = Var {
    name: "REDIS_AUTH",
    flag: "redis-auth",
    default: "(none)",
    doc: "Redis `password` or `user:password`",
};

/// `redis_auth_file`.
pub(crate) const redis_auth_file: Var = Var {
    name: "REDIS_AUTH_FILE",
    flag: "redis-auth-file",
    default: "(none)",
    doc: "A file holding {redis_auth}'s value (a password, or `user:password`), trailing CR/LF stripped; an empty file, or both set, is refused at start",
};

/// `redis_sentinel_auth`.
pub(crate) const redis_sentinel_auth: Var = Var {
    name: "REDIS_SENTINEL_AUTH",
    flag: "redis-sentinel-auth",
    default: "(none)",
    doc: "Password of the Sentinel nodes",
};

/// `redis_pool_size`.
pub(crate) const redis_pool_size: Var = Var {
    name: "REDIS_POOL_SIZE",
    flag: "redis-pool-size",
    default: "2 multiplexed connections",
    doc: "Multiplexed connections per Redis",
};

/// `redis_timeout`.
pub(crate) const redis_timeout: Var = Var {
    name: "REDIS_TIMEOUT",
    flag: "redis-timeout",
    default: "`100ms`",
    doc: "Deadline of one request's Redis round trip",
};

/// `redis_op_timeout`.
pub(crate) const redis_op_timeout: Var = Var {
    name: "REDIS_OP_TIMEOUT",
    flag: "redis-op-timeout",
    default: "`0` (off: {redis_timeout} bounds each call)",
    doc: "Longest wait for one call to Redis when not 0; wins over {redis_timeout} for calls (the reference's pull request #1188)",
};

/// `redis_connect_timeout`.
pub(crate) const redis_connect_timeout: Var = Var {
    name: "REDIS_CONNECT_TIMEOUT",
    flag: "redis-connect-timeout",
    default: "`1s`",
    doc: "Deadline of one Redis connection attempt",
};

/// `redis_startup_initial_interval`.
pub(crate) const redis_startup_initial_interval: Var = Var {
    name: "REDIS_STARTUP_INITIAL_INTERVAL",
    flag: "redis-startup-initial-interval",
    default: "`100ms` (the reference: `1s`)",
    doc: "First wait before the first connection to Redis is tried again; doubles each time. floodgate serves meanwhile, health NOT_SERVING",
};

/// `redis_startup_max_interval`.
pub(crate) const redis_startup_max_interval: Var = Var {
    name: "REDIS_STARTUP_MAX_INTERVAL",
    flag: "redis-startup-max-interval",
    default: "`5s` (the reference: `30s`)",
    doc: "Longest wait between two tries of the first connection to Redis",
};

/// `redis_startup_max_elapsed_time`.
pub(crate) const redis_startup_max_elapsed_time: Var = Var {
    name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
    flag: "redis-startup-max-elapsed-time",
    default: "`0` (try forever)",
    doc: "When not 0: Redis still not connected this long after start stops the process (exit 1, the error names Redis), as the reference gives up",
};

/// `redis_health_check_active_connection`.
pub(crate) const redis_health_check_active_connection: Var = Var {
    name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    flag: "redis-health-check-active-connection",
    default: "false (health follows the first connect only)",
    doc: "Health follows whether Redis answers (a PING every second): NOT_SERVING while it does not, SERVING again when it does",
};

/// `redis_close_connection_on_readonly_error`.
pub(crate) const redis_close_connection_on_readonly_error: Var = Var {
    name: "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR",
    flag: "redis-close-connection-on-readonly-error",
    default: "true: a connection answering READONLY is dialled afresh",
    doc: "Drop and redial a Redis connection that answers READONLY (a demoted master behind a repointed address)",
};

/// `redis_persecond`.
pub(crate) const redis_persecond: Var = Var {
    name: "REDIS_PERSECOND",
    flag: "redis-persecond",
    default: "false",
    doc: "Send one-second windows to a second Redis, set by REDIS_PERSECOND_*",
};

/// `redis_persecond_url`.
pub(crate) const redis_persecond_url: Var = Var {
    name: "REDIS_PERSECOND_URL",
    flag: "redis-persecond-url",
    default: "`127.0.0.1:6379`",
    doc: "Where the per-second Redis is",
};

/// `redis_tls`.
pub(crate) const redis_tls: Var = Var {
    name: "REDIS_TLS",
    flag: "redis-tls",
    default: "false (a `rediss://` URL is TLS anyway)",
    doc: "Connect to Redis over TLS",
};

/// `redis_persecond_tls`.
pub(crate) const redis_persecond_tls: Var = Var {
    name: "REDIS_PERSECOND_TLS",
    flag: "",
    default: "false",
    doc: "TLS to the per-second Redis, as {redis_tls}",
};

/// `redis_tls_cacert`.
pub(crate) const redis_tls_cacert: Var = Var {
    name: "REDIS_TLS_CACERT",
    flag: "redis-tls-cacert",
    default: "(system roots)",
    doc: "PEM CA bundle to trust for Redis TLS instead of the system roots",
};

/// `redis_tls_client_cert`.
pub(crate) const redis_tls_client_cert: Var = Var {
    name: "REDIS_TLS_CLIENT_CERT",
    flag: "redis-tls-client-cert",
    default: "(none)",
    doc: "PEM client certificate for Redis TLS",
};

/// `redis_tls_client_key`.
pub(crate) const redis_tls_client_key: Var = Var {
    name: "REDIS_TLS_CLIENT_KEY",
    flag: "redis-tls-client-key",
    default: "(none)",
    doc: "PEM key of the Redis client certificate",
};

/// `redis_tls_skip_hostname_verification`.
pub(crate) const redis_tls_skip_hostname_verification: Var = Var {
    name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    flag: "redis-tls-skip-hostname-verification",
    default: "false (the chain is always verified)",
    doc: "Accept a Redis certificate issued for another host name",
};

/// `cache_key_prefix`.
pub(crate) const cache_key_prefix: Var = Var {
    name: "CACHE_KEY_PREFIX",
    flag: "cache-key-prefix",
    default: "(none)",
    doc: "Prefix of every Redis key",
};

/// `expiration_jitter_max_seconds`.
pub(crate) const expiration_jitter_max_seconds: Var = Var {
    name: "EXPIRATION_JITTER_MAX_SECONDS",
    flag: "expiration-jitter-max-seconds",
    default: "300",
    doc: "Random extra key expiry in [0, N) seconds",
};

/// `local_cache_size_in_bytes`.
pub(crate) const local_cache_size_in_bytes: Var = Var {
    name: "LOCAL_CACHE_SIZE_IN_BYTES",
    flag: "local-cache-size-in-bytes",
    default: "0 (off)",
    doc: "Budget of the in-process over-limit cache; 0 disables it",
};

/// `stop_cache_key_increment_when_overlimit`.
pub(crate) const stop_cache_key_increment_when_overlimit: Var = Var {
    name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    flag: "stop-cache-key-increment-when-overlimit",
    default: "false",
    doc: "Count nothing for a request that is over the limit on any descriptor",
};

/// `response_dynamic_metadata`.
pub(crate) const response_dynamic_metadata: Var = Var {
    name: "RESPONSE_DYNAMIC_METADATA",
    flag: "response-dynamic-metadata",
    default: "false",
    doc: "Return the metadata of matched rules in responses' dynamic_metadata",
};

/// `tracing_enabled`.
pub(crate) const tracing_enabled: Var = Var {
    name: "TRACING_ENABLED",
    flag: "tracing-enabled",
    default: "false",
    doc: "Export OpenTelemetry spans of calls over OTLP",
};

/// `tracing_exporter_protocol`.
pub(crate) const tracing_exporter_protocol: Var = Var {
    name: "TRACING_EXPORTER_PROTOCOL",
    flag: "tracing-exporter-protocol",
    default: "`http`",
    doc: "OTLP transport",
};

/// `otel_exporter_otlp_endpoint`.
pub(crate) const otel_exporter_otlp_endpoint: Var = Var {
    name: "OTEL_EXPORTER_OTLP_ENDPOINT",
    flag: "otlp-endpoint",
    default: "`http://localhost:4318` (`http://localhost:4317` for gRPC)",
    doc: "Collector base URL (`/v1/traces` is added for HTTP)",
};

/// `otel_exporter_otlp_traces_endpoint`.
pub(crate) const otel_exporter_otlp_traces_endpoint: Var = Var {
    name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    flag: "",
    default: "(none)",
    doc: "Where spans go, used as it is (wins over {otel_exporter_otlp_endpoint} and `--otlp-endpoint`)",
};

/// `tracing_service_name`.
pub(crate) const tracing_service_name: Var = Var {
    name: "TRACING_SERVICE_NAME",
    flag: "tracing-service-name",
    default: "`RateLimit`",
    doc: "Resource attribute service.name",
};

/// `tracing_service_namespace`.
pub(crate) const tracing_service_namespace: Var = Var {
    name: "TRACING_SERVICE_NAMESPACE",
    flag: "tracing-service-namespace",
    default: "(empty)",
    doc: "Resource attribute service.namespace",
};

/// `tracing_service_instance_id`.
pub(crate) const tracing_service_instance_id: Var = Var {
    name: "TRACING_SERVICE_INSTANCE_ID",
    flag: "tracing-service-instance-id",
    default: "a random UUID",
    doc: "Resource attribute service.instance.id",
};

/// `tracing_sampling_rate`.
pub(crate) const tracing_sampling_rate: Var = Var {
    name: "TRACING_SAMPLING_RATE",
    flag: "tracing-sampling-rate",
    default: "1",
    doc: "Share of new traces sampled; a caller's sampling decision wins",
};

/// `otel_exporter_otlp_headers`.
pub(crate) const otel_exporter_otlp_headers: Var = Var {
    name: "OTEL_EXPORTER_OTLP_HEADERS",
    flag: "",
    default: "(none)",
    doc: "Headers sent to the collector, `name=value` pairs, comma-separated, percent-decoded",
};

/// `otel_exporter_otlp_traces_headers`.
pub(crate) const otel_exporter_otlp_traces_headers: Var = Var {
    name: "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    flag: "",
    default: "(none)",
    doc: "As {otel_exporter_otlp_headers}, winning for a name in both",
};

/// `otel_exporter_otlp_insecure`.
pub(crate) const otel_exporter_otlp_insecure: Var = Var {
    name: "OTEL_EXPORTER_OTLP_INSECURE",
    flag: "",
    default: "false",
    doc: "An endpoint without a scheme is plaintext `http://`",
};

/// `otel_bsp_schedule_delay`.
pub(crate) const otel_bsp_schedule_delay: Var = Var {
    name: "OTEL_BSP_SCHEDULE_DELAY",
    flag: "",
    default: "5000",
    doc: "Milliseconds between two exports of the spans batched",
};

/// `failure_mode`.
pub(crate) const failure_mode: Var = Var {
    name: "FAILURE_MODE",
    flag: "on-store-error",
    default: "`error` (gRPC UNAVAILABLE)",
    doc: "What to answer when the store fails",
};

/// `near_limit_ratio`.
pub(crate) const near_limit_ratio: Var = Var {
    name: "NEAR_LIMIT_RATIO",
    flag: "near-limit-ratio",
    default: "0.8",
    doc: "Share of a limit past which hits count as near_limit",
};

/// `metrics_max_series`.
pub(crate) const metrics_max_series: Var = Var {
    name: "METRICS_MAX_SERIES",
    flag: "metrics-max-series",
    default: "10000",
    doc: "Most distinct per-rule metric series (runtime-valued stats keys)",
};

/// `use_prometheus`.
pub(crate) const use_prometheus: Var = Var {
    name: "USE_PROMETHEUS",
    flag: "use-prometheus",
    default: "false",
    doc: "Serve /metrics on a separate listener too",
};

/// `prometheus_addr`.
pub(crate) const prometheus_addr: Var = Var {
    name: "PROMETHEUS_ADDR",
    flag: "prometheus-addr",
    default: "`:9090` (every interface)",
    doc: "Address of the separate metrics listener; `:9090` means every interface",
};

/// `prometheus_path`.
pub(crate) const prometheus_path: Var = Var {
    name: "PROMETHEUS_PATH",
    flag: "prometheus-path",
    default: "`/metrics`",
    doc: "Path of the metrics on the separate listener",
};

/// `prometheus_mapper_yaml`.
pub(crate) const prometheus_mapper_yaml: Var = Var {
    name: "PROMETHEUS_MAPPER_YAML",
    flag: "prometheus-mapper-yaml",
    default: "the reference's built-in mapping",
    doc: "statsd_exporter mapping file for the Prometheus listener",
};

/// `prometheus_response_time_as_milliseconds`.
pub(crate) const prometheus_response_time_as_milliseconds: Var = Var {
    name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    flag: "prometheus-response-time-as-milliseconds",
    default: "false",
    doc: "With the built-in mapping, export the response time in milliseconds",
};

/// `debug_host`.
pub(crate) const debug_host: Var = Var {
    name: "DEBUG_HOST",
    flag: "debug-addr",
    default: "off unless one is set (then `127.0.0.1`, `6070`); the image sets `0.0.0.0:6070`",
    doc: "Debug listener address: its host ({debug_port}: its port)",
};

/// `debug_port`.
pub(crate) const debug_port: Var = Var {
    name: "DEBUG_PORT",
    flag: "debug-addr",
    default: "off unless one is set (then `127.0.0.1`, `6070`); the image sets `0.0.0.0:6070`",
    doc: "Debug listener address: its port ({debug_host}: its host)",
};

/// `use_statsd`.
pub(crate) const use_statsd: Var = Var {
    name: "USE_STATSD",
    flag: "use-statsd",
    default: "true (unless {use_prometheus})",
    doc: "Send stats to statsd",
};

/// `statsd_host`.
pub(crate) const statsd_host: Var = Var {
    name: "STATSD_HOST",
    flag: "statsd-host",
    default: "`localhost`",
    doc: "Statsd host",
};

/// `statsd_port`.
pub(crate) const statsd_port: Var = Var {
    name: "STATSD_PORT",
    flag: "statsd-port",
    default: "8125",
    doc: "Statsd port",
};

/// `statsd_protocol`.
pub(crate) const statsd_protocol: Var = Var {
    name: "STATSD_PROTOCOL",
    flag: "statsd-protocol",
    default: "`tcp` (`udp` with {use_dog_statsd})",
    doc: "statsd transport, tcp or udp",
};

/// `stats_flush_interval`.
pub(crate) const stats_flush_interval: Var = Var {
    name: "STATS_FLUSH_INTERVAL",
    flag: "stats-flush-interval",
    default: "`10s`",
    doc: "Time between two statsd flushes",
};

/// `extra_tags`.
pub(crate) const extra_tags: Var = Var {
    name: "EXTRA_TAGS",
    flag: "extra-tags",
    default: "(none)",
    doc: "Tags added to every stat, `k1:v1,k2:v2`",
};

/// `use_dog_statsd`.
pub(crate) const use_dog_statsd: Var = Var {
    name: "USE_DOG_STATSD",
    flag: "use-dog-statsd",
    default: "false",
    doc: "Send DogStatsD lines (tags as |#k:v) over UDP",
};

/// `use_dog_statsd_mogrifiers`.
pub(crate) const use_dog_statsd_mogrifiers: Var = Var {
    name: "USE_DOG_STATSD_MOGRIFIERS",
    flag: "use-dog-statsd-mogrifiers",
    default: "(none)",
    doc: "DogStatsD mogrifier names, each set by `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`, `_NAME`, `_TAGS`",
};

/// `disable_stats`.
pub(crate) const disable_stats: Var = Var {
    name: "DISABLE_STATS",
    flag: "disable-stats",
    default: "false",
    doc: "No stats sink at all (no statsd, no Prometheus listener)",
};

/// `config_type`.
pub(crate) const config_type: Var = Var {
    name: "CONFIG_TYPE",
    flag: "config-type",
    default: "`file`",
    doc: "Where rules come from: file or grpc-xds-sotw",
};

/// `force_start_without_initial_config`.
pub(crate) const force_start_without_initial_config: Var = Var {
    name: "FORCE_START_WITHOUT_INITIAL_CONFIG",
    flag: "force-start-without-initial-config",
    default: "false (with xDS, wait for the first rules)",
    doc: "With xDS, serve before the first rules arrive (every domain unknown until then)",
};

/// `config_grpc_xds_server_url`.
pub(crate) const config_grpc_xds_server_url: Var = Var {
    name: "CONFIG_GRPC_XDS_SERVER_URL",
    flag: "config-grpc-xds-server-url",
    default: "`localhost:18000`",
    doc: "host:port of the xDS (ADS) server",
};

/// `config_grpc_xds_node_id`.
pub(crate) const config_grpc_xds_node_id: Var = Var {
    name: "CONFIG_GRPC_XDS_NODE_ID",
    flag: "config-grpc-xds-node-id",
    default: "`default`",
    doc: "xDS node id",
};

/// `config_grpc_xds_node_metadata`.
pub(crate) const config_grpc_xds_node_metadata: Var = Var {
    name: "CONFIG_GRPC_XDS_NODE_METADATA",
    flag: "config-grpc-xds-node-metadata",
    default: "(none)",
    doc: "xDS node metadata, `k1=v1,k2=v2`",
};

/// `config_grpc_xds_client_additional_headers`.
pub(crate) const config_grpc_xds_client_additional_headers: Var = Var {
    name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    flag: "config-grpc-xds-client-additional-headers",
    default: "(none)",
    doc: "gRPC metadata sent to the xDS server, `k1:v1,k2:v2`",
};

/// `config_grpc_xds_server_use_tls`.
pub(crate) const config_grpc_xds_server_use_tls: Var = Var {
    name: "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    flag: "config-grpc-xds-server-use-tls",
    default: "false",
    doc: "Connect to the xDS server over TLS",
};

/// `config_grpc_xds_server_tls_cacert`.
pub(crate) const config_grpc_xds_server_tls_cacert: Var = Var {
    name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    flag: "config-grpc-xds-server-tls-cacert",
    default: "(the system's roots)",
    doc: "PEM CA bundle the xDS server's certificate must chain to",
};

/// `config_grpc_xds_client_tls_cert`.
pub(crate) const config_grpc_xds_client_tls_cert: Var = Var {
    name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    flag: "config-grpc-xds-client-tls-cert",
    default: "(none)",
    doc: "PEM client certificate for mTLS to the xDS server",
};

/// `config_grpc_xds_client_tls_key`.
pub(crate) const config_grpc_xds_client_tls_key: Var = Var {
    name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    flag: "config-grpc-xds-client-tls-key",
    default: "(none)",
    doc: "PEM key of the xDS client certificate",
};

/// `config_grpc_xds_server_tls_san`.
pub(crate) const config_grpc_xds_server_tls_san: Var = Var {
    name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    flag: "config-grpc-xds-server-tls-san",
    default: "(the server's host)",
    doc: "Name the xDS server's certificate must be valid for",
};

/// `config_grpc_xds_server_connect_retry_interval`.
pub(crate) const config_grpc_xds_server_connect_retry_interval: Var = Var {
    name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    flag: "config-grpc-xds-server-connect-retry-interval",
    default: "`3s`",
    doc: "Wait between failed connection attempts, ± 50 %",
};

/// `xds_client_backoff_initial_interval`.
pub(crate) const xds_client_backoff_initial_interval: Var = Var {
    name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    flag: "xds-client-backoff-initial-interval",
    default: "`10s`",
    doc: "First wait before reopening a broken xDS stream",
};

/// `xds_client_backoff_max_interval`.
pub(crate) const xds_client_backoff_max_interval: Var = Var {
    name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    flag: "xds-client-backoff-max-interval",
    default: "`60s`",
    doc: "Longest wait before reopening a broken xDS stream",
};

/// `xds_client_backoff_random_factor`.
pub(crate) const xds_client_backoff_random_factor: Var = Var {
    name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    flag: "xds-client-backoff-random-factor",
    default: "0.5",
    doc: "Spread of a reopen wait, ± this share of it",
};

/// `xds_client_backoff_jitter`.
pub(crate) const xds_client_backoff_jitter: Var = Var {
    name: "XDS_CLIENT_BACKOFF_JITTER",
    flag: "xds-client-backoff-jitter",
    default: "true",
    doc: "Spread reopen waits at random",
};

/// `xds_client_max_msg_size_in_bytes`.
pub(crate) const xds_client_max_msg_size_in_bytes: Var = Var {
    name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    flag: "xds-client-max-msg-size-in-bytes",
    default: "4194304",
    doc: "Largest xDS response accepted",
};

/// `rlqs_unmatched_behavior`.
pub(crate) const rlqs_unmatched_behavior: Var = Var {
    name: "RLQS_UNMATCHED_BEHAVIOR",
    flag: "rlqs-unmatched-behavior",
    default: "`allow`",
    doc: "What an RLQS bucket that matches no rule (or an unknown domain) gets",
};

/// `rlqs_assignment_ttl`.
pub(crate) const rlqs_assignment_ttl: Var = Var {
    name: "RLQS_ASSIGNMENT_TTL",
    flag: "rlqs-assignment-ttl",
    default: "`15s`",
    doc: "How long an Envoy keeps an RLQS assignment without news (at least 1s)",
};

/// `rlqs_idle_timeout`.
pub(crate) const rlqs_idle_timeout: Var = Var {
    name: "RLQS_IDLE_TIMEOUT",
    flag: "rlqs-idle-timeout",
    default: "`60s`",
    doc: "An RLQS bucket reporting no request for this long is abandoned",
};

/// `rlqs_max_buckets_per_stream`.
pub(crate) const rlqs_max_buckets_per_stream: Var = Var {
    name: "RLQS_MAX_BUCKETS_PER_STREAM",
    flag: "rlqs-max-buckets-per-stream",
    default: "10000",
    doc: "Most distinct buckets one RLQS stream may track; more are denied",
};

/// `redis_persecond_type`.
pub(crate) const redis_persecond_type: Var = Var {
    name: "REDIS_PERSECOND_TYPE",
    flag: "",
    default: "`single`",
    doc: "Deployment of the per-second Redis: single, sentinel or cluster",
};

/// `redis_persecond_auth`.
pub(crate) const redis_persecond_auth: Var = Var {
    name: "REDIS_PERSECOND_AUTH",
    flag: "",
    default: "(none)",
    doc: "Password (or `user:password`) of the per-second Redis",
};

/// `redis_persecond_auth_file`.
pub(crate) const redis_persecond_auth_file: Var = Var {
    name: "REDIS_PERSECOND_AUTH_FILE",
    flag: "",
    default: "(none)",
    doc: "As {redis_auth_file}, for the per-second Redis",
};

/// `redis_persecond_sentinel_auth`.
pub(crate) const redis_persecond_sentinel_auth: Var = Var {
    name: "REDIS_PERSECOND_SENTINEL_AUTH",
    flag: "",
    default: "(none)",
    doc: "Password of the per-second Redis's sentinels",
};

/// `redis_persecond_pool_size`.
pub(crate) const redis_persecond_pool_size: Var = Var {
    name: "REDIS_PERSECOND_POOL_SIZE",
    flag: "",
    default: "2 multiplexed connections",
    doc: "Connections to the per-second Redis",
};

/// `redis_persecond_timeout`.
pub(crate) const redis_persecond_timeout: Var = Var {
    name: "REDIS_PERSECOND_TIMEOUT",
    flag: "",
    default: "`100ms`",
    doc: "Longest wait for one call to the per-second Redis",
};

/// `redis_persecond_op_timeout`.
pub(crate) const redis_persecond_op_timeout: Var = Var {
    name: "REDIS_PERSECOND_OP_TIMEOUT",
    flag: "",
    default: "`0`",
    doc: "As {redis_op_timeout}, for the per-second Redis",
};

/// `redis_persecond_connect_timeout`.
pub(crate) const redis_persecond_connect_timeout: Var = Var {
    name: "REDIS_PERSECOND_CONNECT_TIMEOUT",
    flag: "",
    default: "`1s`",
    doc: "Longest wait to connect to the per-second Redis",
};

/// `otel_exporter_otlp_traces_insecure`.
pub(crate) const otel_exporter_otlp_traces_insecure: Var = Var {
    name: "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    flag: "",
    default: "false",
    doc: "As {otel_exporter_otlp_insecure}, and wins over it",
};

/// `redis_socket_type`.
pub(crate) const redis_socket_type: Var = Var {
    name: "REDIS_SOCKET_TYPE",
    flag: "",
    default: "`tcp`",
    doc: "Accepted and checked (`tcp` or `unix`), not needed: the URL says it (a path or `unix://` is a unix socket)",
};

/// `redis_persecond_socket_type`.
pub(crate) const redis_persecond_socket_type: Var = Var {
    name: "REDIS_PERSECOND_SOCKET_TYPE",
    flag: "",
    default: "`tcp`",
    doc: "As {redis_socket_type}, for the per-second Redis",
};

/// `grpc_server_tls_ca_cert`.
pub(crate) const grpc_server_tls_ca_cert: Var = Var {
    name: "GRPC_SERVER_TLS_CA_CERT",
    flag: "",
    default: "(none)",
    doc: "Accepted and ignored: never read by the reference either (client certificates use {grpc_client_tls_cacert})",
};

/// `runtime_watch_root`.
pub(crate) const runtime_watch_root: Var = Var {
    name: "RUNTIME_WATCH_ROOT",
    flag: "",
    default: "true",
    doc: "Accepted (a boolean) and ignored: the rule directory is polled, which sees both a swap of the root and changes inside it",
};

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
    shutdown_grace,
    grpc_max_concurrent_streams,
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
