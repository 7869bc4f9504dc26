//! Declarations of where rules come from (the directory, xDS), traces and RLQS.

use super::Var;

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

/// `config_poll_interval`.
pub(crate) const config_poll_interval: Var = Var {
    name: "CONFIG_POLL_INTERVAL",
    flag: "config-poll-interval",
    default: "`250ms`",
    doc: "How often the rule directory is checked for changes, e.g. `250ms`; more than `0`",
};

/// `healthy_with_at_least_one_config_loaded`.
pub(crate) const healthy_with_at_least_one_config_loaded: Var = Var {
    name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    flag: "healthy-with-at-least-one-config-loaded",
    default: "false",
    doc: "Report NOT_SERVING while no rule file declares a domain",
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

/// `otel_exporter_otlp_traces_insecure`.
pub(crate) const otel_exporter_otlp_traces_insecure: Var = Var {
    name: "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    flag: "",
    default: "false",
    doc: "As {otel_exporter_otlp_insecure}, and wins over it",
};

/// `runtime_watch_root`.
pub(crate) const runtime_watch_root: Var = Var {
    name: "RUNTIME_WATCH_ROOT",
    flag: "",
    default: "true",
    doc: "Accepted (a boolean) and ignored: the rule directory is polled, which sees both a swap of the root and changes inside it",
};
