//! Process settings: command-line flags, each falling back to the reference
//! service's environment variable, then to a default. Changing them needs a
//! restart (rule files, by contrast, are reloadable).
//!
//! The environment is passed in as a map, so tests never touch the process
//! environment.

use crate::limiter::{FailureMode, HeaderNames, LimiterOptions, RequestBounds};
use crate::server::{ServeOptions, TlsOptions};
use crate::store::{RedisConfig, RedisMode, RedisTls};
use clap::{Args, ValueEnum};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A snapshot of the environment variables settings may read.
pub type Env = HashMap<String, String>;

/// Rule directory used when neither the flag nor any `RUNTIME_*` variable is set.
pub const DEFAULT_CONFIG_DIR: &str = "examples/config";
const DEFAULT_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const DEFAULT_GRPC_PORT: u16 = 8081;
const DEFAULT_HTTP_PORT: u16 = 8080;

/// Which store counts hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreType {
    /// Embedded in-process store (one instance, exact, lost on restart).
    Memory,
    /// Redis (shared by every instance).
    Redis,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
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
    pub store: Option<StoreType>,
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
    /// Redis and counting settings.
    #[command(flatten)]
    pub store_args: StoreArgs,
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
    /// What to answer when the store fails [env: FAILURE_MODE] [default: error]
    #[arg(long, value_enum)]
    pub on_store_error: Option<OnStoreError>,
}

/// Resolved Redis settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// The main Redis.
    pub main: RedisConfig,
    /// The per-second Redis, with `REDIS_PERSECOND`.
    pub per_second: Option<RedisConfig>,
}

/// Fully resolved settings of one `serve` process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Rule directory.
    pub config_dir: PathBuf,
    /// Skip dot files in the rule directory.
    pub ignore_dotfiles: bool,
    /// Merge same-domain rule files.
    pub merge_domain_config: bool,
    /// gRPC listen address.
    pub grpc_addr: SocketAddr,
    /// HTTP listen address.
    pub http_addr: SocketAddr,
    /// Counter store.
    pub store: StoreType,
    /// Log filter directive.
    pub log_level: String,
    /// Log format.
    pub log_format: LogFormat,
    /// Time between two checks of the rule directory for changes.
    pub config_poll_interval: Duration,
    /// Decision settings.
    pub limiter: LimiterOptions,
    /// Serving settings.
    pub serve: ServeOptions,
    /// Redis settings, when the store is Redis.
    pub redis: Option<RedisSettings>,
    /// Separate metrics listener (`USE_PROMETHEUS`).
    pub metrics_addr: Option<SocketAddr>,
    /// Byte budget of the embedded store (`MEMORY_STORE_MAX_BYTES`).
    pub memory_store_max_bytes: usize,
    /// `NEAR_LIMIT_RATIO`.
    pub near_limit_ratio: f64,
    /// Cap on distinct per-rule metric series.
    pub metrics_max_series: usize,
}

/// A setting that could not be understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// An environment variable holds a value of the wrong form.
    #[error("environment variable {var}='{value}' is not {expected}")]
    InvalidEnv {
        /// Variable name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A setting is on but another one it depends on is missing.
    #[error("{setting} needs {needs}")]
    Missing {
        /// The setting that is on.
        setting: &'static str,
        /// What it needs.
        needs: &'static str,
    },
}

impl Settings {
    /// Resolves `args` over `env` over the defaults.
    ///
    /// # Errors
    ///
    /// [`SettingsError`] naming the variable whose value is malformed.
    pub fn resolve(args: &ServeArgs, env: &Env) -> Result<Self, SettingsError> {
        let get = |var: &str| env.get(var).filter(|v| !v.is_empty()).map(String::as_str);
        let flag = |value: Option<bool>, var: &'static str| boolean(value, get(var), var);

        let config_dir = match &args.config_dir {
            Some(dir) => dir.clone(),
            None => runtime_dir(&get),
        };
        let grpc_addr = match args.grpc_addr {
            Some(addr) => addr,
            None => addr_from_env(&get, "GRPC_HOST", "GRPC_PORT", DEFAULT_GRPC_PORT)?,
        };
        let http_addr = match args.http_addr {
            Some(addr) => addr,
            None => addr_from_env(&get, "HOST", "PORT", DEFAULT_HTTP_PORT)?,
        };
        let default_store = if get("REDIS_URL").is_some() {
            StoreType::Redis
        } else {
            StoreType::Memory
        };
        let store = choice(
            args.store,
            get("BACKEND_TYPE"),
            "BACKEND_TYPE",
            "memory or redis",
            default_store,
        )?;
        let log_format = choice(
            args.log_format,
            get("LOG_FORMAT"),
            "LOG_FORMAT",
            "text or json",
            LogFormat::Text,
        )?;
        let response_headers = if flag(
            args.limit_response_headers,
            "LIMIT_RESPONSE_HEADERS_ENABLED",
        )? {
            let defaults = HeaderNames::default();
            let name = |arg: &Option<String>, var: &str, default: Arc<str>| {
                arg.as_deref()
                    .or_else(|| get(var))
                    .map_or(default, Arc::from)
            };
            Some(HeaderNames {
                limit: name(
                    &args.limit_limit_header,
                    "LIMIT_LIMIT_HEADER",
                    defaults.limit,
                ),
                remaining: name(
                    &args.limit_remaining_header,
                    "LIMIT_REMAINING_HEADER",
                    defaults.remaining,
                ),
                reset: name(
                    &args.limit_reset_header,
                    "LIMIT_RESET_HEADER",
                    defaults.reset,
                ),
            })
        } else {
            None
        };
        let defaults = RequestBounds::default();
        let bounds = RequestBounds {
            max_descriptors: number(
                args.max_descriptors,
                get("MAX_DESCRIPTORS"),
                "MAX_DESCRIPTORS",
                defaults.max_descriptors,
            )?,
            max_entries: number(
                args.max_entries,
                get("MAX_DESCRIPTOR_ENTRIES"),
                "MAX_DESCRIPTOR_ENTRIES",
                defaults.max_entries,
            )?,
            max_entry_bytes: number(
                args.max_entry_bytes,
                get("MAX_ENTRY_BYTES"),
                "MAX_ENTRY_BYTES",
                defaults.max_entry_bytes,
            )?,
            max_domain_bytes: number(
                args.max_domain_bytes,
                get("MAX_DOMAIN_BYTES"),
                "MAX_DOMAIN_BYTES",
                defaults.max_domain_bytes,
            )?,
            max_hits_addend: number(
                args.max_hits_addend,
                get("MAX_HITS_ADDEND"),
                "MAX_HITS_ADDEND",
                defaults.max_hits_addend,
            )?,
        };
        let max_request_bytes = number(
            args.max_request_bytes,
            get("MAX_REQUEST_BYTES"),
            "MAX_REQUEST_BYTES",
            ServeOptions::default().max_request_bytes,
        )?;
        let tls = if flag(args.grpc_server_use_tls, "GRPC_SERVER_USE_TLS")? {
            let path = |arg: &Option<PathBuf>, var: &str| {
                arg.clone().or_else(|| get(var).map(PathBuf::from))
            };
            let (Some(cert), Some(key)) = (
                path(&args.grpc_server_tls_cert, "GRPC_SERVER_TLS_CERT"),
                path(&args.grpc_server_tls_key, "GRPC_SERVER_TLS_KEY"),
            ) else {
                return Err(SettingsError::Missing {
                    setting: "GRPC_SERVER_USE_TLS",
                    needs: "GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
                });
            };
            let client_ca = path(&args.grpc_client_tls_cacert, "GRPC_CLIENT_TLS_CACERT");
            let client_san = args
                .grpc_client_tls_san
                .clone()
                .or_else(|| get("GRPC_CLIENT_TLS_SAN").map(str::to_owned));
            if client_san.is_some() && client_ca.is_none() {
                return Err(SettingsError::Missing {
                    setting: "GRPC_CLIENT_TLS_SAN",
                    needs: "GRPC_CLIENT_TLS_CACERT",
                });
            }
            Some(TlsOptions {
                cert,
                key,
                client_ca,
                client_san,
            })
        } else {
            // As the reference: without GRPC_SERVER_USE_TLS the other TLS
            // settings are ignored.
            None
        };
        let serve_defaults = ServeOptions::default();
        let shutdown_grace = duration(
            args.shutdown_grace,
            get("SHUTDOWN_GRACE"),
            "SHUTDOWN_GRACE",
            serve_defaults.shutdown_grace,
        )?;
        let poll_interval = duration(
            args.config_poll_interval,
            get("CONFIG_POLL_INTERVAL"),
            "CONFIG_POLL_INTERVAL",
            crate::config::DEFAULT_POLL_INTERVAL,
        )?;

        let store_args = &args.store_args;
        let failure_mode = choice(
            store_args.on_store_error,
            get("FAILURE_MODE"),
            "FAILURE_MODE",
            "error, allow or deny",
            OnStoreError::Error,
        )?;
        let redis = if store == StoreType::Redis {
            let main = redis_config(store_args, &get, "REDIS_")?;
            let per_second = if flag(store_args.redis_persecond, "REDIS_PERSECOND")? {
                Some(redis_config(store_args, &get, "REDIS_PERSECOND_")?)
            } else {
                None
            };
            Some(RedisSettings { main, per_second })
        } else {
            None
        };

        let metrics_addr = if flag(args.use_prometheus, "USE_PROMETHEUS")? {
            let text = args
                .prometheus_addr
                .clone()
                .or_else(|| get("PROMETHEUS_ADDR").map(str::to_owned))
                .unwrap_or_else(|| ":9090".to_owned());
            Some(parse_listen_addr(&text).ok_or(SettingsError::InvalidEnv {
                var: "PROMETHEUS_ADDR",
                value: text,
                expected: "an address such as :9090 or 127.0.0.1:9090",
            })?)
        } else {
            None
        };
        let near_limit_ratio = pick(
            args.near_limit_ratio,
            get("NEAR_LIMIT_RATIO"),
            "NEAR_LIMIT_RATIO",
            "a ratio between 0 and 1",
            |t| t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)),
            0.8,
        )?;

        Ok(Self {
            metrics_addr,
            near_limit_ratio,
            metrics_max_series: number(
                args.metrics_max_series,
                get("METRICS_MAX_SERIES"),
                "METRICS_MAX_SERIES",
                crate::metrics::DEFAULT_MAX_SERIES,
            )?,
            redis,
            config_dir,
            ignore_dotfiles: flag(args.ignore_dotfiles, "RUNTIME_IGNOREDOTFILES")?,
            merge_domain_config: flag(args.merge_domain_config, "MERGE_DOMAIN_CONFIG")?,
            grpc_addr,
            http_addr,
            store,
            log_level: args
                .log_level
                .clone()
                .or_else(|| get("LOG_LEVEL").map(str::to_ascii_lowercase))
                .unwrap_or_else(|| "info".to_owned()),
            log_format,
            config_poll_interval: poll_interval,
            limiter: LimiterOptions {
                global_shadow_mode: flag(args.shadow_mode, "SHADOW_MODE")?,
                global_quota_mode: flag(args.quota_mode, "QUOTA_MODE")?,
                response_headers,
                stop_when_over: flag(
                    args.stop_cache_key_increment_when_overlimit,
                    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
                )?,
                bounds,
                failure_mode: match failure_mode {
                    OnStoreError::Error => FailureMode::Error,
                    OnStoreError::Allow => FailureMode::Allow,
                    OnStoreError::Deny => FailureMode::Deny,
                },
                local_cache_bytes: number(
                    store_args.local_cache_size_in_bytes,
                    get("LOCAL_CACHE_SIZE_IN_BYTES"),
                    "LOCAL_CACHE_SIZE_IN_BYTES",
                    0,
                )?,
            },
            memory_store_max_bytes: number(
                store_args.memory_store_max_bytes,
                get("MEMORY_STORE_MAX_BYTES"),
                "MEMORY_STORE_MAX_BYTES",
                crate::store::memory::DEFAULT_MAX_BYTES,
            )?,
            serve: ServeOptions {
                shutdown_grace,
                max_request_bytes,
                healthy_only_with_rules: flag(
                    args.healthy_with_at_least_one_config_loaded,
                    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
                )?,
                tls,
                metrics_path: args
                    .prometheus_path
                    .clone()
                    .or_else(|| get("PROMETHEUS_PATH").map(str::to_owned))
                    .unwrap_or_else(|| "/metrics".to_owned()),
                ..serve_defaults
            },
        })
    }
}

/// Resolves one Redis: `prefix` is `REDIS_` or `REDIS_PERSECOND_`; flags
/// apply to the main Redis only (and `--redis-persecond-url`).
fn redis_config<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    prefix: &'static str,
) -> Result<RedisConfig, SettingsError> {
    let main = prefix == "REDIS_";
    let var = |name: &str| get(&format!("{prefix}{name}"));
    let url = if main {
        args.redis_url.clone()
    } else {
        args.redis_persecond_url.clone()
    }
    .or_else(|| var("URL").map(str::to_owned))
    .unwrap_or_else(|| "127.0.0.1:6379".to_owned());
    // Variable names must be 'static for error messages: pick the pair.
    let name = |main_name: &'static str, second_name: &'static str| {
        if main { main_name } else { second_name }
    };
    let flag_of = |flag: Option<Duration>| flag.filter(|_| main);
    let mode = choice(
        if main { args.redis_type } else { None },
        var("TYPE"),
        name("REDIS_TYPE", "REDIS_PERSECOND_TYPE"),
        "single, sentinel or cluster",
        RedisType::Single,
    )?;
    let tls_on = boolean(
        args.redis_tls.filter(|_| main),
        var("TLS"),
        name("REDIS_TLS", "REDIS_PERSECOND_TLS"),
    )?;
    let path =
        |flag: &Option<PathBuf>, var: &str| flag.clone().or_else(|| get(var).map(PathBuf::from));
    let tls = if tls_on {
        let skip = boolean(
            args.redis_tls_skip_hostname_verification,
            get("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        )?;
        Some(RedisTls {
            ca_cert: path(&args.redis_tls_cacert, "REDIS_TLS_CACERT"),
            client_cert: path(&args.redis_tls_client_cert, "REDIS_TLS_CLIENT_CERT"),
            client_key: path(&args.redis_tls_client_key, "REDIS_TLS_CLIENT_KEY"),
            skip_hostname_verification: skip,
        })
    } else {
        None
    };
    Ok(RedisConfig {
        tls,
        mode: match mode {
            RedisType::Single => RedisMode::Single,
            RedisType::Sentinel => RedisMode::Sentinel,
            RedisType::Cluster => RedisMode::Cluster,
        },
        url,
        auth: if main { args.redis_auth.clone() } else { None }
            .or_else(|| var("AUTH").map(str::to_owned)),
        sentinel_auth: if main {
            args.redis_sentinel_auth.clone()
        } else {
            None
        }
        .or_else(|| var("SENTINEL_AUTH").map(str::to_owned)),
        pool_size: number(
            if main { args.redis_pool_size } else { None },
            var("POOL_SIZE"),
            name("REDIS_POOL_SIZE", "REDIS_PERSECOND_POOL_SIZE"),
            2,
        )?
        .max(1),
        timeout: duration(
            flag_of(args.redis_timeout),
            var("TIMEOUT"),
            name("REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT"),
            Duration::from_millis(100),
        )?,
        connect_timeout: duration(
            flag_of(args.redis_connect_timeout),
            var("CONNECT_TIMEOUT"),
            name("REDIS_CONNECT_TIMEOUT", "REDIS_PERSECOND_CONNECT_TIMEOUT"),
            Duration::from_secs(1),
        )?,
        key_prefix: args
            .cache_key_prefix
            .clone()
            .or_else(|| get("CACHE_KEY_PREFIX").map(str::to_owned))
            .unwrap_or_default(),
        expiration_jitter_max_secs: number(
            args.expiration_jitter_max_seconds,
            get("EXPIRATION_JITTER_MAX_SECONDS"),
            "EXPIRATION_JITTER_MAX_SECONDS",
            300,
        )?,
    })
}

/// The reference's rule directory, `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`,
/// when any of them is set; otherwise the bundled examples.
fn runtime_dir<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> PathBuf {
    let (root, sub, app) = (
        get("RUNTIME_ROOT"),
        get("RUNTIME_SUBDIRECTORY"),
        get("RUNTIME_APPDIRECTORY"),
    );
    if root.is_none() && sub.is_none() && app.is_none() {
        return PathBuf::from(DEFAULT_CONFIG_DIR);
    }
    let mut dir = PathBuf::from(root.unwrap_or("/srv/runtime_data/current"));
    if let Some(sub) = sub {
        dir.push(sub);
    }
    dir.push(app.unwrap_or("config"));
    dir
}

fn addr_from_env<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    host_var: &'static str,
    port_var: &'static str,
    default_port: u16,
) -> Result<SocketAddr, SettingsError> {
    let host = match get(host_var) {
        None => DEFAULT_HOST,
        Some(value) => value.parse().map_err(|_| SettingsError::InvalidEnv {
            var: host_var,
            value: value.to_owned(),
            expected: "an IP address",
        })?,
    };
    let port = match get(port_var) {
        None => default_port,
        Some(value) => value.parse().map_err(|_| SettingsError::InvalidEnv {
            var: port_var,
            value: value.to_owned(),
            expected: "a port number",
        })?,
    };
    Ok(SocketAddr::new(host, port))
}

/// A setting from its flag, else its environment variable read by `parse`,
/// else `default`; a malformed variable is an error naming it.
fn pick<T>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
    default: T,
) -> Result<T, SettingsError> {
    match (flag, env) {
        (Some(value), _) => Ok(value),
        (None, Some(text)) => parse(text).ok_or_else(|| SettingsError::InvalidEnv {
            var,
            value: text.to_owned(),
            expected,
        }),
        (None, None) => Ok(default),
    }
}

/// A whole-number setting.
fn number<T: std::str::FromStr>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    default: T,
) -> Result<T, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a whole number",
        |t| t.parse().ok(),
        default,
    )
}

/// A duration setting (`500ms`, `10s`, `5m`, `1h`).
fn duration(
    flag: Option<Duration>,
    env: Option<&str>,
    var: &'static str,
    default: Duration,
) -> Result<Duration, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a duration such as 500ms, 10s, 5m or 1h",
        |t| parse_duration(t).ok(),
        default,
    )
}

/// A setting naming one of a fixed set of values (case-insensitive).
fn choice<T: ValueEnum>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    expected: &'static str,
    default: T,
) -> Result<T, SettingsError> {
    pick(
        flag,
        env,
        var,
        expected,
        |t| T::from_str(t, true).ok(),
        default,
    )
}

/// Parses a listen address; `:port` (Go's form) means every interface.
fn parse_listen_addr(text: &str) -> Option<SocketAddr> {
    match text.strip_prefix(':') {
        Some(port) => port
            .parse()
            .ok()
            .map(|port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)),
        None => text.parse().ok(),
    }
}

/// A boolean setting, read the way the reference's Go settings read one
/// (`strconv.ParseBool`); absent means false.
fn boolean(
    flag: Option<bool>,
    env: Option<&str>,
    var: &'static str,
) -> Result<bool, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a boolean (true/false/1/0)",
        |text| match text {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => None,
        },
        false,
    )
}

/// Parses a duration such as `250ms`, `10s`, `5m` or `1h`.
///
/// # Errors
///
/// A message naming the accepted forms.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration such as 500ms, 10s, 5m or 1h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(value.saturating_mul(3_600))),
        _ => Err(format!(
            "'{text}' is not a duration such as 500ms, 10s, 5m or 1h"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn resolve(args: &[&str], vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let cli =
            Cli::try_parse_from(std::iter::once("floodgate").chain(args.iter().copied())).unwrap();
        Settings::resolve(&cli.serve, &env(vars))
    }

    #[test]
    fn defaults_serve_the_examples_on_loopback_with_memory() {
        let s = resolve(&[], &[]).unwrap();
        assert_eq!(s.config_dir, PathBuf::from("examples/config"));
        assert_eq!(s.grpc_addr, "127.0.0.1:8081".parse().unwrap());
        assert_eq!(s.http_addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(s.store, StoreType::Memory);
        assert_eq!(s.log_level, "info");
        assert_eq!(s.limiter, LimiterOptions::default());
        assert!(!s.serve.healthy_only_with_rules);
        assert_eq!(s.config_poll_interval, Duration::from_millis(250));
    }

    #[test]
    fn reload_and_health_settings() {
        let s = resolve(
            &[],
            &[
                ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
                ("CONFIG_POLL_INTERVAL", "1s"),
                ("RUNTIME_IGNOREDOTFILES", "true"),
                ("RUNTIME_ROOT", "/srv/rt"),
            ],
        )
        .unwrap();
        assert!(s.serve.healthy_only_with_rules);
        assert_eq!(s.config_dir, PathBuf::from("/srv/rt/config"));
        assert_eq!(s.config_poll_interval, Duration::from_secs(1));
        assert!(s.ignore_dotfiles);

        let s = resolve(
            &[
                "--healthy-with-at-least-one-config-loaded=false",
                "--config-poll-interval",
                "100ms",
            ],
            &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
        )
        .unwrap();
        assert!(!s.serve.healthy_only_with_rules);
        assert_eq!(s.config_poll_interval, Duration::from_millis(100));
        let err = resolve(&[], &[("CONFIG_POLL_INTERVAL", "soon")]).unwrap_err();
        assert!(err.to_string().contains("CONFIG_POLL_INTERVAL"), "{err}");
    }

    #[test]
    fn reference_environment_is_honoured() {
        let s = resolve(
            &[],
            &[
                ("RUNTIME_ROOT", "/srv/rt"),
                ("RUNTIME_SUBDIRECTORY", "ratelimit"),
                ("GRPC_HOST", "0.0.0.0"),
                ("GRPC_PORT", "9081"),
                ("PORT", "9080"),
                ("REDIS_URL", "127.0.0.1:6379"),
                ("LOG_LEVEL", "DEBUG"),
                ("LOG_FORMAT", "json"),
                ("SHADOW_MODE", "true"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "1"),
                ("LIMIT_RESET_HEADER", "X-Reset"),
                ("MAX_DESCRIPTORS", "8"),
                ("SHUTDOWN_GRACE", "250ms"),
            ],
        )
        .unwrap();
        assert_eq!(s.config_dir, PathBuf::from("/srv/rt/ratelimit/config"));
        assert_eq!(s.grpc_addr, "0.0.0.0:9081".parse().unwrap());
        assert_eq!(s.http_addr, "127.0.0.1:9080".parse().unwrap());
        assert_eq!(s.store, StoreType::Redis);
        assert_eq!(s.log_level, "debug");
        assert_eq!(s.log_format, LogFormat::Json);
        assert!(s.limiter.global_shadow_mode);
        let headers = s.limiter.response_headers.unwrap();
        assert_eq!(&*headers.limit, "RateLimit-Limit");
        assert_eq!(&*headers.reset, "X-Reset");
        assert_eq!(s.limiter.bounds.max_descriptors, 8);
        assert_eq!(s.serve.shutdown_grace, Duration::from_millis(250));
    }

    #[test]
    fn flags_win_over_environment() {
        let s = resolve(
            &[
                "--config-dir",
                "rules",
                "--grpc-addr",
                "127.0.0.1:1",
                "--store",
                "memory",
                "--shadow-mode=false",
            ],
            &[
                ("RUNTIME_ROOT", "/x"),
                ("GRPC_PORT", "2"),
                ("BACKEND_TYPE", "redis"),
                ("SHADOW_MODE", "true"),
            ],
        )
        .unwrap();
        assert_eq!(s.config_dir, PathBuf::from("rules"));
        assert_eq!(s.grpc_addr.port(), 1);
        assert_eq!(s.store, StoreType::Memory);
        assert!(!s.limiter.global_shadow_mode);
    }

    #[test]
    fn redis_settings_follow_the_reference_variables() {
        let s = resolve(
            &["--redis-pool-size", "3"],
            &[
                ("BACKEND_TYPE", "redis"),
                ("REDIS_URL", "mymaster,127.0.0.1:26379,127.0.0.1:26380"),
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_AUTH", "user:pw"),
                ("REDIS_TIMEOUT", "50ms"),
                ("CACHE_KEY_PREFIX", "rl:"),
                ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
                ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
                ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
                ("FAILURE_MODE", "allow"),
                ("REDIS_PERSECOND", "true"),
                ("REDIS_PERSECOND_URL", "127.0.0.1:6380"),
                ("REDIS_PERSECOND_TYPE", "cluster"),
            ],
        )
        .unwrap();
        let redis = s.redis.unwrap();
        assert_eq!(redis.main.mode, RedisMode::Sentinel);
        assert_eq!(redis.main.url, "mymaster,127.0.0.1:26379,127.0.0.1:26380");
        assert_eq!(redis.main.auth.as_deref(), Some("user:pw"));
        assert_eq!(redis.main.pool_size, 3);
        assert_eq!(redis.main.timeout, Duration::from_millis(50));
        assert_eq!(redis.main.key_prefix, "rl:");
        assert_eq!(redis.main.expiration_jitter_max_secs, 0);
        let second = redis.per_second.unwrap();
        assert_eq!(
            (second.mode, second.url.as_str()),
            (RedisMode::Cluster, "127.0.0.1:6380")
        );
        assert_eq!(second.timeout, Duration::from_millis(100));
        assert_eq!(second.key_prefix, "rl:");
        assert_eq!(s.limiter.local_cache_bytes, 1_048_576);
        assert!(redis.main.tls.is_none());
        let with_tls = resolve(
            &[
                "--store",
                "redis",
                "--redis-tls",
                "--redis-tls-cacert",
                "/ca.pem",
            ],
            &[
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
                ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
            ],
        )
        .unwrap();
        let tls = with_tls.redis.unwrap().main.tls.unwrap();
        assert_eq!(tls.ca_cert, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.client_cert, Some(PathBuf::from("/c.pem")));
        assert!(tls.skip_hostname_verification);
        assert!(s.limiter.stop_when_over);
        assert_eq!(s.limiter.failure_mode, FailureMode::Allow);
    }

    #[test]
    fn redis_defaults() {
        let s = resolve(&["--store", "redis"], &[]).unwrap();
        let redis = s.redis.unwrap();
        assert_eq!(
            redis.main,
            RedisConfig {
                expiration_jitter_max_secs: 300,
                ..RedisConfig::single("127.0.0.1:6379")
            }
        );
        assert!(redis.per_second.is_none());
        assert!(resolve(&[], &[]).unwrap().redis.is_none());
        let err = resolve(&["--store", "redis"], &[("REDIS_TYPE", "ring")]).unwrap_err();
        assert!(
            err.to_string().contains("single, sentinel or cluster"),
            "{err}"
        );
    }

    #[test]
    fn prometheus_and_metrics_settings() {
        let s = resolve(
            &[],
            &[
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", ":9191"),
                ("PROMETHEUS_PATH", "/prom"),
                ("NEAR_LIMIT_RATIO", "0.5"),
            ],
        )
        .unwrap();
        assert_eq!(s.metrics_addr, Some("0.0.0.0:9191".parse().unwrap()));
        assert_eq!(s.serve.metrics_path, "/prom");
        assert!((s.near_limit_ratio - 0.5).abs() < f64::EPSILON);
        let s = resolve(
            &["--use-prometheus", "--prometheus-addr", "127.0.0.1:9"],
            &[],
        )
        .unwrap();
        assert_eq!(s.metrics_addr, Some("127.0.0.1:9".parse().unwrap()));
        assert!(resolve(&[], &[]).unwrap().metrics_addr.is_none());
        let err = resolve(&[], &[("NEAR_LIMIT_RATIO", "2")]).unwrap_err();
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
    }

    #[test]
    fn bare_boolean_flag_means_true() {
        let s = resolve(&["--quota-mode"], &[]).unwrap();
        assert!(s.limiter.global_quota_mode);
    }

    #[test]
    fn malformed_environment_is_named() {
        let err = resolve(&[], &[("SHADOW_MODE", "yes")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable SHADOW_MODE='yes' is not a boolean (true/false/1/0)"
        );
        let err = resolve(&[], &[("GRPC_PORT", "http")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable GRPC_PORT='http' is not a port number"
        );
        let err = resolve(&[], &[("BACKEND_TYPE", "memcache")]).unwrap_err();
        assert!(err.to_string().contains("memory or redis"));
    }

    #[test]
    fn tls_settings() {
        let s = resolve(&[], &[("GRPC_SERVER_TLS_CERT", "/c.pem")]).unwrap();
        assert_eq!(s.serve.tls, None, "ignored without GRPC_SERVER_USE_TLS");

        let s = resolve(
            &["--grpc-client-tls-san", "client.example"],
            &[
                ("GRPC_SERVER_USE_TLS", "true"),
                ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
                ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
                ("GRPC_CLIENT_TLS_SAN", "other.example"),
            ],
        )
        .unwrap();
        assert_eq!(
            s.serve.tls,
            Some(TlsOptions {
                cert: PathBuf::from("/tls/cert.pem"),
                key: PathBuf::from("/tls/key.pem"),
                client_ca: Some(PathBuf::from("/tls/ca.pem")),
                client_san: Some("client.example".to_owned()),
            })
        );

        let err = resolve(
            &["--grpc-server-use-tls"],
            &[("GRPC_SERVER_TLS_CERT", "/c")],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
        );
        let err = resolve(
            &[
                "--grpc-server-use-tls",
                "--grpc-server-tls-cert",
                "/c",
                "--grpc-server-tls-key",
                "/k",
                "--grpc-client-tls-san",
                "x",
            ],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT"
        );
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
    }
}
