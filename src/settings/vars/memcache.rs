//! Declarations of the memcached store (`backend_type` = `memcache`).

use super::Var;

/// `memcache_host_port`.
pub(crate) const memcache_host_port: Var = Var {
    name: "MEMCACHE_HOST_PORT",
    flag: "",
    default: "(none)",
    doc: "memcached servers, `host:port` (or a socket path) separated by commas; keys are spread over them in this order",
};

/// `memcache_max_idle_conns`.
pub(crate) const memcache_max_idle_conns: Var = Var {
    name: "MEMCACHE_MAX_IDLE_CONNS",
    flag: "",
    default: "2",
    doc: "Idle connections kept per memcached server",
};

/// `memcache_srv`.
pub(crate) const memcache_srv: Var = Var {
    name: "MEMCACHE_SRV",
    flag: "",
    default: "(none)",
    doc: "DNS SRV record (`_service._proto.name`) naming the memcached servers, instead of {memcache_host_port}",
};

/// `memcache_srv_refresh`.
pub(crate) const memcache_srv_refresh: Var = Var {
    name: "MEMCACHE_SRV_REFRESH",
    flag: "",
    default: "0 (asked once, at start)",
    doc: "How often the {memcache_srv} record is asked again",
};

/// `memcache_srv_dns`.
pub(crate) const memcache_srv_dns: Var = Var {
    name: "MEMCACHE_SRV_DNS",
    flag: "",
    default: "(the system's resolver)",
    doc: "DNS server (`ip:port`, e.g. a Consul agent's `127.0.0.1:8600`) asked for {memcache_srv}; a floodgate extension",
};

/// `memcache_timeout`.
pub(crate) const memcache_timeout: Var = Var {
    name: "MEMCACHE_TIMEOUT",
    flag: "",
    default: "`500ms` (the reference client's)",
    doc: "Deadline of one request's memcached calls; `0`: none; a floodgate extension",
};

/// `memcache_tls`.
pub(crate) const memcache_tls: Var = Var {
    name: "MEMCACHE_TLS",
    flag: "",
    default: "false",
    doc: "Reach memcached over TLS",
};

/// `memcache_tls_cacert`.
pub(crate) const memcache_tls_cacert: Var = Var {
    name: "MEMCACHE_TLS_CACERT",
    flag: "",
    default: "(the system's roots)",
    doc: "PEM CA bundle memcached's certificate is checked against",
};

/// `memcache_tls_client_cert`.
pub(crate) const memcache_tls_client_cert: Var = Var {
    name: "MEMCACHE_TLS_CLIENT_CERT",
    flag: "",
    default: "(none)",
    doc: "PEM client certificate presented to memcached",
};

/// `memcache_tls_client_key`.
pub(crate) const memcache_tls_client_key: Var = Var {
    name: "MEMCACHE_TLS_CLIENT_KEY",
    flag: "",
    default: "(none)",
    doc: "PEM key of the memcached client certificate",
};

/// `memcache_tls_skip_hostname_verification`.
pub(crate) const memcache_tls_skip_hostname_verification: Var = Var {
    name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    flag: "",
    default: "false (the chain is always verified)",
    doc: "Accept a memcached certificate issued for another host name",
};
