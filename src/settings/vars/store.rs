//! Declarations of the counter store: the embedded store, Redis (both of them) and what a store failure answers.

use super::Var;

/// `backend_type`.
pub(crate) const backend_type: Var = Var {
    name: "BACKEND_TYPE",
    flag: "store",
    default: "`memory` (`redis` when {redis_url} is set)",
    doc: "Counter store: `memory`, `redis` or `memcache`",
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

/// `tables_path`.
pub(crate) const tables_path: Var = Var {
    name: "TABLES_PATH",
    flag: "tables-path",
    default: "{memory_store_snapshot_path} + `.tables` when that is set (else changes to limit tables are refused)",
    doc: "File (an append-only log) the embedded store keeps limit tables and their audit trail in; each change is written and synced before the API answers",
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
    doc: "Deadline of one request's Redis round trip; `0`: none, as in the reference",
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
    doc: "Deadline of one Redis connection attempt; `0`: none",
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
    doc: "Prefix of every Redis or memcached key",
};

/// `expiration_jitter_max_seconds`.
pub(crate) const expiration_jitter_max_seconds: Var = Var {
    name: "EXPIRATION_JITTER_MAX_SECONDS",
    flag: "expiration-jitter-max-seconds",
    default: "300",
    doc: "Random extra key expiry in [0, N) seconds, below one window",
};

/// `local_cache_size_in_bytes`.
pub(crate) const local_cache_size_in_bytes: Var = Var {
    name: "LOCAL_CACHE_SIZE_IN_BYTES",
    flag: "local-cache-size-in-bytes",
    default: "0 (off)",
    doc: "Budget of the in-process over-limit cache; 0 disables it",
};

/// `failure_mode`.
pub(crate) const failure_mode: Var = Var {
    name: "FAILURE_MODE",
    flag: "on-store-error",
    default: "`error` (gRPC UNAVAILABLE)",
    doc: "What to answer when the store fails, and a call shed past capacity (`error`: RESOURCE_EXHAUSTED; [shedding](deployment.md#past-capacity-shedding-by-deadline))",
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
    doc: "Longest wait for one call to the per-second Redis; `0`: none",
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
    doc: "Longest wait to connect to the per-second Redis; `0`: none",
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

/// `stores_file`.
pub(crate) const stores_file: Var = Var {
    name: "STORES_FILE",
    flag: "stores-file",
    default: "(none: every rule counts on the process-wide store, `default`, or on `local`)",
    doc: "YAML map from a store's name to its settings (`type`: `redis`, `redis-sentinel`, `redis-cluster`, `memcache` or `memory`; `failure_mode`; the process-wide settings' names without `REDIS_` or `MEMCACHE_`, in lower case): rules name one with `store: NAME` (docs/regions.md)",
};
