//! Unit tests of `settings`.

use super::*;
use clap::Parser;

mod declarations;
mod durations;
mod gateway;
mod otlp;
mod parity;

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
    assert_eq!(s.store, BackendType::Memory);
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
            (vars::healthy_with_at_least_one_config_loaded.name, "true"),
            (vars::config_poll_interval.name, "1s"),
            (vars::runtime_ignoredotfiles.name, "true"),
            (vars::runtime_root.name, "/srv/rt"),
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
        &[(vars::healthy_with_at_least_one_config_loaded.name, "true")],
    )
    .unwrap();
    assert!(!s.serve.healthy_only_with_rules);
    assert_eq!(s.config_poll_interval, Duration::from_millis(100));
    let err = resolve(&[], &[(vars::config_poll_interval.name, "soon")]).unwrap_err();
    assert!(
        err.to_string().contains(vars::config_poll_interval.name),
        "{err}"
    );
}

#[test]
fn reference_environment_is_honoured() {
    let s = resolve(
        &[],
        &[
            (vars::runtime_root.name, "/srv/rt"),
            (vars::runtime_subdirectory.name, "ratelimit"),
            (vars::grpc_host.name, "0.0.0.0"),
            (vars::grpc_port.name, "9081"),
            (vars::port.name, "9080"),
            (vars::redis_url.name, "127.0.0.1:6379"),
            (vars::log_level.name, "DEBUG"),
            (vars::log_format.name, "json"),
            (vars::shadow_mode.name, "true"),
            (vars::limit_response_headers_enabled.name, "1"),
            (vars::limit_reset_header.name, "X-Reset"),
            (vars::max_descriptors.name, "8"),
            (vars::shutdown_grace.name, "250ms"),
        ],
    )
    .unwrap();
    assert_eq!(s.config_dir, PathBuf::from("/srv/rt/ratelimit/config"));
    assert_eq!(s.grpc_addr, "0.0.0.0:9081".parse().unwrap());
    assert_eq!(s.http_addr, "127.0.0.1:9080".parse().unwrap());
    assert_eq!(s.store, BackendType::Redis);
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
fn response_dynamic_metadata_is_off_unless_asked() {
    assert!(!resolve(&[], &[]).unwrap().limiter.dynamic_metadata);
    let on = resolve(&[], &[(vars::response_dynamic_metadata.name, "true")]).unwrap();
    assert!(on.limiter.dynamic_metadata);
    let flag = resolve(&["--response-dynamic-metadata"], &[]).unwrap();
    assert!(flag.limiter.dynamic_metadata);
    let off = resolve(
        &["--response-dynamic-metadata=false"],
        &[(vars::response_dynamic_metadata.name, "true")],
    )
    .unwrap();
    assert!(!off.limiter.dynamic_metadata);
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
            (vars::runtime_root.name, "/x"),
            (vars::grpc_port.name, "2"),
            (vars::backend_type.name, "redis"),
            (vars::shadow_mode.name, "true"),
        ],
    )
    .unwrap();
    assert_eq!(s.config_dir, PathBuf::from("rules"));
    assert_eq!(s.grpc_addr.port(), 1);
    assert_eq!(s.store, BackendType::Memory);
    assert!(!s.limiter.global_shadow_mode);
}

#[test]
fn redis_settings_follow_the_reference_variables() {
    let s = resolve(
        &["--redis-pool-size", "3"],
        &[
            (vars::backend_type.name, "redis"),
            (
                vars::redis_url.name,
                "mymaster,127.0.0.1:26379,127.0.0.1:26380",
            ),
            (vars::redis_type.name, "SENTINEL"),
            (vars::redis_auth.name, "user:pw"),
            (vars::redis_timeout.name, "50ms"),
            (vars::cache_key_prefix.name, "rl:"),
            (vars::expiration_jitter_max_seconds.name, "0"),
            (vars::local_cache_size_in_bytes.name, "1048576"),
            (vars::stop_cache_key_increment_when_overlimit.name, "true"),
            (vars::failure_mode.name, "allow"),
            (vars::redis_persecond.name, "true"),
            (vars::redis_persecond_url.name, "127.0.0.1:6380"),
            (vars::redis_persecond_type.name, "cluster"),
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
            (vars::redis_tls_skip_hostname_verification.name, "true"),
            (vars::redis_tls_client_cert.name, "/c.pem"),
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
    // READONLY redials by default; the reference's variable turns it off.
    let off = resolve(
        &["--store", "redis"],
        &[(vars::redis_close_connection_on_readonly_error.name, "false")],
    )
    .unwrap();
    assert!(!off.redis.unwrap().main.redial_on_readonly);
    let bad = resolve(
        &["--store", "redis"],
        &[(vars::redis_close_connection_on_readonly_error.name, "maybe")],
    )
    .unwrap_err();
    assert!(
        bad.to_string()
            .contains(vars::redis_close_connection_on_readonly_error.name),
        "{bad}"
    );
    let err = resolve(&["--store", "redis"], &[(vars::redis_type.name, "ring")]).unwrap_err();
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
            (vars::use_prometheus.name, "true"),
            (vars::prometheus_addr.name, ":9191"),
            (vars::prometheus_path.name, "/prom"),
            (vars::near_limit_ratio.name, "0.5"),
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
    let err = resolve(&[], &[(vars::near_limit_ratio.name, "2")]).unwrap_err();
    assert!(err.to_string().contains("between 0 and 1"), "{err}");
}

#[test]
fn bare_boolean_flag_means_true() {
    let s = resolve(&["--quota-mode"], &[]).unwrap();
    assert!(s.limiter.global_quota_mode);
}

#[test]
fn malformed_environment_is_named() {
    let err = resolve(&[], &[(vars::shadow_mode.name, "yes")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "environment variable {}='yes' is not a boolean (true/false/1/0)",
            vars::shadow_mode.name
        )
    );
    let err = resolve(&[], &[(vars::grpc_port.name, "http")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "environment variable {}='http' is not a port number",
            vars::grpc_port.name
        )
    );
    let err = resolve(&[], &[(vars::backend_type.name, "memcached")]).unwrap_err();
    assert!(err.to_string().contains("memory, redis or memcache"));
}

#[test]
fn tls_settings() {
    let s = resolve(&[], &[(vars::grpc_server_tls_cert.name, "/c.pem")]).unwrap();
    assert_eq!(
        s.serve.tls,
        None,
        "ignored without {}",
        vars::grpc_server_use_tls.name
    );

    let s = resolve(
        &["--grpc-client-tls-san", "client.example"],
        &[
            (vars::grpc_server_use_tls.name, "true"),
            (vars::grpc_server_tls_cert.name, "/tls/cert.pem"),
            (vars::grpc_server_tls_key.name, "/tls/key.pem"),
            (vars::grpc_client_tls_cacert.name, "/tls/ca.pem"),
            (vars::grpc_client_tls_san.name, "other.example"),
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
        &[(vars::grpc_server_tls_cert.name, "/c")],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} needs {} and {}",
            vars::grpc_server_use_tls.name,
            vars::grpc_server_tls_cert.name,
            vars::grpc_server_tls_key.name
        )
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
        format!(
            "{} needs {}",
            vars::grpc_client_tls_san.name,
            vars::grpc_client_tls_cacert.name
        )
    );
}
