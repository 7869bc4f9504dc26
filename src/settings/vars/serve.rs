//! Declarations of serving: listeners, gRPC connections and TLS, logs, request bounds, headers and the decision switches.

use super::Var;

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
    doc: "Serve gRPC on this unix domain socket instead of {grpc_host}:{grpc_port} (a stale socket file there is replaced; clients of every gRPC stack are served, whatever `:authority` they send); not with TLS",
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

/// `grpc_max_header_list_bytes`.
pub(crate) const grpc_max_header_list_bytes: Var = Var {
    name: "GRPC_MAX_HEADER_LIST_BYTES",
    flag: "grpc-max-header-list-bytes",
    default: "16384",
    doc: "Largest header block of a gRPC request (HTTP/2's `SETTINGS_MAX_HEADER_LIST_SIZE`: names, values and 32 bytes an entry); a larger one is refused before it reaches floodgate",
};

/// `grpc_stream_window_bytes`.
pub(crate) const grpc_stream_window_bytes: Var = Var {
    name: "GRPC_STREAM_WINDOW_BYTES",
    flag: "grpc-stream-window-bytes",
    default: "1048576",
    doc: "HTTP/2 flow-control window of a gRPC stream: request bytes a caller may send on one stream before floodgate reads them (1 to 2147483647)",
};

/// `grpc_connection_window_bytes`.
pub(crate) const grpc_connection_window_bytes: Var = Var {
    name: "GRPC_CONNECTION_WINDOW_BYTES",
    flag: "grpc-connection-window-bytes",
    default: "1048576",
    doc: "HTTP/2 flow-control window of a gRPC connection, shared by its streams: the most request bytes a connection holds unread (1 to 2147483647)",
};

/// `grpc_max_connection_age`.
pub(crate) const grpc_max_connection_age: Var = Var {
    name: "GRPC_MAX_CONNECTION_AGE",
    flag: "grpc-max-connection-age",
    default: "`24h`",
    doc: "A gRPC connection older than this is sent GOAWAY (calls in flight finish), so clients spread over new instances; `0`: never, as in grpc-go",
};

/// `grpc_max_connection_age_grace`.
pub(crate) const grpc_max_connection_age_grace: Var = Var {
    name: "GRPC_MAX_CONNECTION_AGE_GRACE",
    flag: "grpc-max-connection-age-grace",
    default: "`1h`",
    doc: "After GOAWAY, how long calls in flight may take before the connection is closed; `0`: as long as they take, as in grpc-go",
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

/// `grpc_server_tls_ca_cert`.
pub(crate) const grpc_server_tls_ca_cert: Var = Var {
    name: "GRPC_SERVER_TLS_CA_CERT",
    flag: "",
    default: "(none)",
    doc: "Accepted and ignored: never read by the reference either (client certificates use {grpc_client_tls_cacert})",
};
