//! Declarations of statsd, the Prometheus listener, the debug listener and the metric bounds.

use super::Var;

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
