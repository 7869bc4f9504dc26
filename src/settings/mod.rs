//! Process settings: command-line flags, each falling back to the reference
//! service's environment variable, then to a default. Changing them needs a
//! restart (rule files, by contrast, are reloadable).
//!
//! The environment is passed in as a map, so tests never touch the process
//! environment.

mod access;
mod flags;
mod memcache;
mod named;
mod otlp;
mod parse;
mod redis;
pub mod reference;
mod stats;
mod stores;
#[cfg(test)]
mod tests;
pub(crate) mod vars;
use vars::Var;
mod xds;

pub(crate) use crate::telemetry::LogFormat;
pub(crate) use flags::TracingExporterProtocol;
pub(crate) use flags::{AccessArgs, RlqsArgs, StoreArgs};
pub use flags::{BackendType, ServeArgs};
pub(crate) use flags::{OnStoreError, RedisType, RlqsUnmatched};
pub use named::{LOCAL_STORE, open_stores, store_catalog};
pub use parse::DurationError;
pub(crate) use parse::parse_duration;
use parse::{
    addr_from_env, boolean, choice, duration, number, parse_listen_addr, pick, runtime_dir, timeout,
};
pub(crate) use redis::RedisSettings;
use redis::redis_config;
pub(crate) use stats::{StatsArgs, StatsSettings};
pub use stores::{NamedKind, NamedStore, parse_stores, read_stores_file};
pub(crate) use xds::XdsArgs;

use crate::limiter::{FailureMode, HeaderNames, LimiterOptions, RequestBounds};
use crate::server::{Http2Bounds, MAX_WINDOW_BYTES, ServeOptions, TlsOptions};
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
pub(crate) const DEFAULT_CONFIG_DIR: &str = "examples/config";
const DEFAULT_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const DEFAULT_GRPC_PORT: u16 = 8081;
const DEFAULT_HTTP_PORT: u16 = 8080;

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
    /// `grpc_uds`: gRPC on this unix socket instead of `grpc_addr`.
    pub grpc_uds: Option<PathBuf>,
    /// HTTP listen address.
    pub http_addr: SocketAddr,
    /// Counter store.
    pub store: BackendType,
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
    /// memcached settings, when the store is memcached.
    pub memcache: Option<crate::store::MemcacheConfig>,
    /// `stores_file`: the file naming the stores rules may name, and
    /// what it defined at start.
    pub stores_file: Option<PathBuf>,
    /// The stores `stores_file` defines, in name order.
    pub stores: Vec<NamedStore>,
    /// Separate metrics listener (`use_prometheus`).
    pub metrics_addr: Option<SocketAddr>,
    /// Byte budget of the embedded store (`memory_store_max_bytes`).
    pub memory_store_max_bytes: usize,
    /// The embedded store's snapshot (`memory_store_snapshot_path`,
    /// `memory_store_snapshot_interval`); `None`: counters start empty.
    pub memory_store_snapshot: Option<crate::store::memory::SnapshotConfig>,
    /// Where the embedded store keeps limit tables (`tables_path`, else
    /// beside the snapshot); `None`: changes to tables are refused.
    pub tables_path: Option<PathBuf>,
    /// `near_limit_ratio`.
    pub near_limit_ratio: f64,
    /// Cap on distinct per-rule metric series.
    pub metrics_max_series: usize,
    /// Stats sinks (statsd, the Prometheus mapping) and the debug listener.
    pub stats: StatsSettings,
    /// Rules from an xDS server (`config_type=GRPC_XDS_SOTW`) instead of the
    /// rule directory; `None` for rule files.
    pub xds: Option<crate::config::xds::XdsOptions>,
    /// `force_start_without_initial_config`: with xDS, serve before the
    /// first rules arrive instead of waiting for them.
    pub force_start_without_initial_config: bool,
    /// `tracing_enabled`: where and how spans are exported; `None` when off.
    pub tracing: Option<crate::otel::TracingSettings>,
    /// How secret descriptor values are shown, and stored.
    pub redactor: Arc<crate::config::Redactor>,
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
    /// A duration variable holds what Go's `time.ParseDuration` refuses, or
    /// a negative duration.
    #[error("environment variable {var}='{value}' is not a duration floodgate takes")]
    InvalidDuration {
        /// Variable name.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why.
        #[source]
        source: DurationError,
    },
    /// Two settings that exclude each other are both on.
    #[error("{reason}")]
    Conflict {
        /// Which, and what to do.
        reason: String,
    },
    /// A setting's value is refused.
    #[error("{setting}: {reason}")]
    Invalid {
        /// The setting.
        setting: String,
        /// Why.
        reason: String,
    },
    /// A setting is on but another one it depends on is missing.
    #[error("{setting} needs {needs}")]
    Missing {
        /// The setting that is on.
        setting: &'static str,
        /// What it needs.
        needs: String,
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
            None => addr_from_env(
                &get,
                vars::grpc_host.name,
                vars::grpc_port.name,
                DEFAULT_GRPC_PORT,
            )?,
        };
        let http_addr = match args.http_addr {
            Some(addr) => addr,
            None => addr_from_env(&get, vars::host.name, vars::port.name, DEFAULT_HTTP_PORT)?,
        };
        let default_store = if get(vars::redis_url.name).is_some() {
            BackendType::Redis
        } else {
            BackendType::Memory
        };
        let store = choice(
            args.store,
            get(vars::backend_type.name),
            vars::backend_type.name,
            "memory, redis or memcache",
            default_store,
        )?;
        let log_format = choice(
            args.log_format,
            get(vars::log_format.name),
            vars::log_format.name,
            "text or json",
            LogFormat::Text,
        )?;
        let header_name = |arg: &Option<String>, var: &Var, default: Arc<str>| {
            arg.as_deref()
                .or_else(|| get(var.name))
                .map_or(default, Arc::from)
        };
        let response_headers = if flag(
            args.limit_response_headers,
            vars::limit_response_headers_enabled.name,
        )? {
            let defaults = HeaderNames::default();
            Some(HeaderNames {
                limit: header_name(
                    &args.limit_limit_header,
                    &vars::limit_limit_header,
                    defaults.limit,
                ),
                remaining: header_name(
                    &args.limit_remaining_header,
                    &vars::limit_remaining_header,
                    defaults.remaining,
                ),
                reset: header_name(
                    &args.limit_reset_header,
                    &vars::limit_reset_header,
                    defaults.reset,
                ),
            })
        } else {
            None
        };
        let request_headers = if flag(
            args.limit_request_headers,
            vars::limit_request_headers_enabled.name,
        )? {
            let defaults = HeaderNames::default();
            Some(HeaderNames {
                limit: header_name(
                    &args.limit_request_limit_header,
                    &vars::limit_request_limit_header,
                    defaults.limit,
                ),
                remaining: header_name(
                    &args.limit_request_remaining_header,
                    &vars::limit_request_remaining_header,
                    defaults.remaining,
                ),
                reset: header_name(
                    &args.limit_request_reset_header,
                    &vars::limit_request_reset_header,
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
                get(vars::max_descriptors.name),
                vars::max_descriptors.name,
                defaults.max_descriptors,
            )?,
            max_entries: number(
                args.max_entries,
                get(vars::max_descriptor_entries.name),
                vars::max_descriptor_entries.name,
                defaults.max_entries,
            )?,
            max_entry_bytes: number(
                args.max_entry_bytes,
                get(vars::max_entry_bytes.name),
                vars::max_entry_bytes.name,
                defaults.max_entry_bytes,
            )?,
            max_domain_bytes: number(
                args.max_domain_bytes,
                get(vars::max_domain_bytes.name),
                vars::max_domain_bytes.name,
                defaults.max_domain_bytes,
            )?,
            max_hits_addend: number(
                args.max_hits_addend,
                get(vars::max_hits_addend.name),
                vars::max_hits_addend.name,
                defaults.max_hits_addend,
            )?,
        };
        let max_request_bytes = number(
            args.max_request_bytes,
            get(vars::max_request_bytes.name),
            vars::max_request_bytes.name,
            ServeOptions::default().max_request_bytes,
        )?;
        let http2 = {
            let defaults = ServeOptions::default().http2;
            // HTTP/2 windows are 31-bit; a zero window or header list would
            // refuse every request.
            let bytes = |flag, var: &Var, default, max: u32| {
                let n = number(flag, get(var.name), var.name, default)?;
                if (1..=max).contains(&n) {
                    Ok(n)
                } else {
                    Err(SettingsError::Invalid {
                        setting: var.name.to_owned(),
                        reason: format!("must be from 1 to {max}"),
                    })
                }
            };
            Http2Bounds {
                max_header_list_bytes: bytes(
                    args.grpc_max_header_list_bytes,
                    &vars::grpc_max_header_list_bytes,
                    defaults.max_header_list_bytes,
                    u32::MAX,
                )?,
                stream_window_bytes: bytes(
                    args.grpc_stream_window_bytes,
                    &vars::grpc_stream_window_bytes,
                    defaults.stream_window_bytes,
                    MAX_WINDOW_BYTES,
                )?,
                connection_window_bytes: bytes(
                    args.grpc_connection_window_bytes,
                    &vars::grpc_connection_window_bytes,
                    defaults.connection_window_bytes,
                    MAX_WINDOW_BYTES,
                )?,
            }
        };
        let tls = if flag(args.grpc_server_use_tls, vars::grpc_server_use_tls.name)? {
            let path = |arg: &Option<PathBuf>, var: &str| {
                arg.clone().or_else(|| get(var).map(PathBuf::from))
            };
            let (Some(cert), Some(key)) = (
                path(&args.grpc_server_tls_cert, vars::grpc_server_tls_cert.name),
                path(&args.grpc_server_tls_key, vars::grpc_server_tls_key.name),
            ) else {
                return Err(SettingsError::Missing {
                    setting: vars::grpc_server_use_tls.name,
                    needs: format!(
                        "{} and {}",
                        vars::grpc_server_tls_cert.name,
                        vars::grpc_server_tls_key.name
                    ),
                });
            };
            let client_ca = path(
                &args.grpc_client_tls_cacert,
                vars::grpc_client_tls_cacert.name,
            );
            let client_san = args
                .grpc_client_tls_san
                .clone()
                .or_else(|| get(vars::grpc_client_tls_san.name).map(str::to_owned));
            if client_san.is_some() && client_ca.is_none() {
                return Err(SettingsError::Missing {
                    setting: vars::grpc_client_tls_san.name,
                    needs: vars::grpc_client_tls_cacert.name.to_owned(),
                });
            }
            Some(TlsOptions {
                cert,
                key,
                client_ca,
                client_san,
            })
        } else {
            // As the reference: without grpc_server_use_tls the other TLS
            // settings are ignored.
            None
        };
        let grpc_uds = args
            .grpc_uds
            .clone()
            .or_else(|| get(vars::grpc_uds.name).map(PathBuf::from));
        if grpc_uds.is_some() && tls.is_some() {
            return Err(SettingsError::Conflict {
                reason: format!(
                    "{} and {} are both set: gRPC over a unix socket is served without TLS",
                    vars::grpc_uds.name,
                    vars::grpc_server_use_tls.name
                ),
            });
        }
        let serve_defaults = ServeOptions::default();
        let shutdown_grace = duration(
            args.shutdown_grace,
            get(vars::shutdown_grace.name),
            vars::shutdown_grace.name,
            serve_defaults.shutdown_grace,
        )?;
        let poll_interval = duration(
            args.config_poll_interval,
            get(vars::config_poll_interval.name),
            vars::config_poll_interval.name,
            crate::config::DEFAULT_POLL_INTERVAL,
        )?;
        if poll_interval.is_zero() {
            return Err(SettingsError::Invalid {
                setting: vars::config_poll_interval.name.to_owned(),
                reason: "must be more than 0".to_owned(),
            });
        }

        let store_args = &args.store_args;
        let failure_mode = choice(
            store_args.on_store_error,
            get(vars::failure_mode.name),
            vars::failure_mode.name,
            "error, allow or deny",
            OnStoreError::Error,
        )?;
        let redis = if store == BackendType::Redis {
            let main = redis_config(store_args, &get, &redis::MAIN)?;
            let per_second = if flag(store_args.redis_persecond, vars::redis_persecond.name)? {
                Some(redis_config(store_args, &get, &redis::PER_SECOND)?)
            } else {
                None
            };
            let startup_max_elapsed = Some(duration(
                store_args.redis_startup_max_elapsed_time,
                get(vars::redis_startup_max_elapsed_time.name),
                vars::redis_startup_max_elapsed_time.name,
                Duration::ZERO,
            )?)
            .filter(|limit| !limit.is_zero());
            Some(RedisSettings {
                main,
                per_second,
                startup_max_elapsed,
            })
        } else {
            None
        };

        let memcache = if store == BackendType::Memcache {
            Some(memcache::memcache_config(store_args, &get)?)
        } else {
            None
        };
        let stores_file = store_args
            .stores_file
            .clone()
            .or_else(|| get(vars::stores_file.name).map(PathBuf::from));
        let stores = match &stores_file {
            Some(path) => read_stores_file(path)?,
            None => Vec::new(),
        };

        let metrics_addr = if flag(args.use_prometheus, vars::use_prometheus.name)? {
            let text = args
                .prometheus_addr
                .clone()
                .or_else(|| get(vars::prometheus_addr.name).map(str::to_owned))
                .unwrap_or_else(|| ":9090".to_owned());
            Some(parse_listen_addr(&text).ok_or(SettingsError::InvalidEnv {
                var: vars::prometheus_addr.name,
                value: text,
                expected: "an address such as :9090 or 127.0.0.1:9090",
            })?)
        } else {
            None
        };
        let stats = stats::resolve(&args.stats_args, &get, metrics_addr.is_some())?;
        // disable_stats: no sink at all, as in the reference.
        let metrics_addr = metrics_addr.filter(|_| !stats.disabled);
        let near_limit_ratio = pick(
            args.near_limit_ratio,
            get(vars::near_limit_ratio.name),
            vars::near_limit_ratio.name,
            "a ratio between 0 and 1",
            |t| t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)),
            0.8,
        )?;

        let global_shadow_mode = flag(args.shadow_mode, vars::shadow_mode.name)?;
        let snapshot_path = store_args
            .memory_store_snapshot_path
            .clone()
            .or_else(|| get(vars::memory_store_snapshot_path.name).map(PathBuf::from))
            .filter(|path| !path.as_os_str().is_empty());
        Ok(Self {
            stats,
            xds: xds::xds_options(&args.xds_args, &get)?,
            redactor: Arc::new(access::redactor(&args.access_args, &get)?),
            force_start_without_initial_config: flag(
                args.xds_args.force_start_without_initial_config,
                vars::force_start_without_initial_config.name,
            )?,
            tracing: otlp::tracing_settings(args, &get)?,
            metrics_addr,
            near_limit_ratio,
            metrics_max_series: number(
                args.metrics_max_series,
                get(vars::metrics_max_series.name),
                vars::metrics_max_series.name,
                crate::metrics::DEFAULT_MAX_SERIES,
            )?,
            redis,
            memcache,
            stores_file: stores_file.clone(),
            stores,
            config_dir,
            ignore_dotfiles: flag(args.ignore_dotfiles, vars::runtime_ignoredotfiles.name)?,
            merge_domain_config: flag(args.merge_domain_config, vars::merge_domain_config.name)?,
            grpc_addr,
            grpc_uds,
            http_addr,
            store,
            // rust_log wins over the flag and log_level, as tracing users expect.
            log_level: get(vars::rust_log.name)
                .map(str::to_owned)
                .or_else(|| args.log_level.clone())
                .or_else(|| get(vars::log_level.name).map(stats::log_filter))
                .unwrap_or_else(|| "info".to_owned()),
            log_format,
            config_poll_interval: poll_interval,
            limiter: LimiterOptions {
                global_shadow_mode,
                global_quota_mode: flag(args.quota_mode, vars::quota_mode.name)?,
                response_headers,
                all_descriptors_headers: flag(
                    args.limit_all_descriptors_headers,
                    vars::limit_all_descriptors_headers_enabled.name,
                )?,
                request_headers,
                stop_when_over: flag(
                    args.stop_cache_key_increment_when_overlimit,
                    vars::stop_cache_key_increment_when_overlimit.name,
                )?,
                bounds,
                failure_mode: match failure_mode {
                    OnStoreError::Error => FailureMode::Error,
                    OnStoreError::Allow => FailureMode::Allow,
                    OnStoreError::Deny => FailureMode::Deny,
                },
                local_cache_bytes: number(
                    store_args.local_cache_size_in_bytes,
                    get(vars::local_cache_size_in_bytes.name),
                    vars::local_cache_size_in_bytes.name,
                    0,
                )?,
                dynamic_metadata: flag(
                    args.response_dynamic_metadata,
                    vars::response_dynamic_metadata.name,
                )?,
            },
            memory_store_max_bytes: number(
                store_args.memory_store_max_bytes,
                get(vars::memory_store_max_bytes.name),
                vars::memory_store_max_bytes.name,
                crate::store::memory::DEFAULT_MAX_BYTES,
            )?,
            memory_store_snapshot: match snapshot_path.clone() {
                None => None,
                Some(path) => Some(crate::store::memory::SnapshotConfig {
                    path,
                    interval: duration(
                        store_args.memory_store_snapshot_interval,
                        get(vars::memory_store_snapshot_interval.name),
                        vars::memory_store_snapshot_interval.name,
                        Duration::from_secs(1),
                    )?
                    .max(Duration::from_millis(10)),
                }),
            },
            tables_path: store_args
                .tables_path
                .clone()
                .or_else(|| get(vars::tables_path.name).map(PathBuf::from))
                .filter(|path| !path.as_os_str().is_empty())
                .or_else(|| {
                    snapshot_path.as_ref().map(|snapshot| {
                        let mut path = snapshot.clone().into_os_string();
                        path.push(".tables");
                        PathBuf::from(path)
                    })
                }),
            serve: ServeOptions {
                shutdown_grace,
                max_request_bytes,
                http2,
                max_concurrent_per_connection: match number(
                    args.grpc_max_concurrent_streams,
                    get(vars::grpc_max_concurrent_streams.name),
                    vars::grpc_max_concurrent_streams.name,
                    0,
                )? {
                    // The reference's 0 (unlimited) keeps floodgate's bound.
                    0 => serve_defaults.max_concurrent_per_connection,
                    n => usize::try_from(n).unwrap_or(usize::MAX),
                },
                health_follows_store: store == BackendType::Redis
                    && flag(
                        store_args.redis_health_check_active_connection,
                        vars::redis_health_check_active_connection.name,
                    )?,
                max_connection_age: Some(duration(
                    args.grpc_max_connection_age,
                    get(vars::grpc_max_connection_age.name),
                    vars::grpc_max_connection_age.name,
                    Duration::from_secs(24 * 3_600),
                )?)
                // 0 is no limit, as grpc-go reads it.
                .filter(|age| !age.is_zero()),
                max_connection_age_grace: Some(duration(
                    args.grpc_max_connection_age_grace,
                    get(vars::grpc_max_connection_age_grace.name),
                    vars::grpc_max_connection_age_grace.name,
                    Duration::from_secs(3_600),
                )?)
                // 0 is no limit, as grpc-go reads it.
                .filter(|age| !age.is_zero()),
                healthy_only_with_rules: flag(
                    args.healthy_with_at_least_one_config_loaded,
                    vars::healthy_with_at_least_one_config_loaded.name,
                )?,
                tls,
                metrics_path: args
                    .prometheus_path
                    .clone()
                    .or_else(|| get(vars::prometheus_path.name).map(str::to_owned))
                    .unwrap_or_else(|| "/metrics".to_owned()),
                rlqs: rlqs_options(&args.rlqs_args, &get, bounds, global_shadow_mode)?,
                access: access::access_options(&args.access_args, &get)?,
                stores_file: stores_file.as_ref().map(|path| crate::server::StoresWatch {
                    path: path.clone(),
                    text: std::fs::read_to_string(path).unwrap_or_default(),
                    check: |text| stores::parse_stores(text).map(|_| ()),
                }),
                ..serve_defaults
            },
        })
    }
}

/// The RLQS settings: flags over `RLQS_*` variables over the defaults; the
/// bucket id bounds are the descriptor bounds.
fn rlqs_options<'a>(
    args: &RlqsArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    bounds: RequestBounds,
    global_shadow_mode: bool,
) -> Result<crate::rlqs::RlqsOptions, SettingsError> {
    let defaults = crate::rlqs::RlqsOptions::default();
    let unmatched = match choice(
        args.rlqs_unmatched_behavior,
        get(vars::rlqs_unmatched_behavior.name),
        vars::rlqs_unmatched_behavior.name,
        "allow or deny",
        RlqsUnmatched::Allow,
    )? {
        RlqsUnmatched::Allow => crate::rlqs::Unmatched::AllowAll,
        RlqsUnmatched::Deny => crate::rlqs::Unmatched::DenyAll,
    };
    Ok(crate::rlqs::RlqsOptions {
        unmatched,
        assignment_ttl: duration(
            args.rlqs_assignment_ttl,
            get(vars::rlqs_assignment_ttl.name),
            vars::rlqs_assignment_ttl.name,
            defaults.assignment_ttl,
        )?
        .max(crate::rlqs::MIN_ASSIGNMENT_TTL),
        idle_timeout: duration(
            args.rlqs_idle_timeout,
            get(vars::rlqs_idle_timeout.name),
            vars::rlqs_idle_timeout.name,
            defaults.idle_timeout,
        )?,
        bounds: crate::rlqs::state::StreamBounds {
            max_entries: bounds.max_entries,
            max_entry_bytes: bounds.max_entry_bytes,
            max_domain_bytes: bounds.max_domain_bytes,
            max_buckets: number(
                args.rlqs_max_buckets_per_stream,
                get(vars::rlqs_max_buckets_per_stream.name),
                vars::rlqs_max_buckets_per_stream.name,
                defaults.bounds.max_buckets,
            )?,
        },
        global_shadow_mode,
    })
}
