//! Unit tests of `settings`.

use super::*;
use clap::Parser;

mod gateway;
mod otlp;

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
    let on = resolve(&[], &[("RESPONSE_DYNAMIC_METADATA", "true")]).unwrap();
    assert!(on.limiter.dynamic_metadata);
    let flag = resolve(&["--response-dynamic-metadata"], &[]).unwrap();
    assert!(flag.limiter.dynamic_metadata);
    let off = resolve(
        &["--response-dynamic-metadata=false"],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
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
            ("RUNTIME_ROOT", "/x"),
            ("GRPC_PORT", "2"),
            ("BACKEND_TYPE", "redis"),
            ("SHADOW_MODE", "true"),
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
    // READONLY redials by default; the reference's variable turns it off.
    let off = resolve(
        &["--store", "redis"],
        &[("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", "false")],
    )
    .unwrap();
    assert!(!off.redis.unwrap().main.redial_on_readonly);
    let bad = resolve(
        &["--store", "redis"],
        &[("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", "maybe")],
    )
    .unwrap_err();
    assert!(
        bad.to_string()
            .contains("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"),
        "{bad}"
    );
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
