//! Unit tests of `settings`.

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

#[test]
fn tracing_is_off_unless_enabled_and_has_the_reference_defaults() {
    assert!(resolve(&[], &[]).unwrap().tracing.is_none());
    let t = resolve(&[], &[("TRACING_ENABLED", "true")])
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(t.protocol, crate::otel::ExportProtocol::Http);
    assert_eq!(t.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(t.service_name, "RateLimit");
    assert_eq!(t.service_namespace, "");
    assert_eq!(t.service_instance_id, None);
    assert!((t.sampling_rate - 1.0).abs() < f64::EPSILON);
    assert_eq!(t.export_interval, Duration::from_secs(5));
    assert!(t.headers.is_empty());
    let grpc = resolve(
        &["--tracing-enabled", "--tracing-exporter-protocol", "grpc"],
        &[],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(grpc.endpoint, "http://localhost:4317");
}

#[test]
fn tracing_reads_envoy_gateways_variables() {
    let t = resolve(
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "pod-7"),
            ("TRACING_SAMPLING_RATE", "0.25"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.monitoring:4318/",
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "250"),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(
        t.endpoint,
        "http://otel-collector.monitoring:4318/v1/traces"
    );
    assert_eq!(t.service_name, "ratelimit");
    assert_eq!(t.service_namespace, "envoy-gateway-system");
    assert_eq!(t.service_instance_id.as_deref(), Some("pod-7"));
    assert!((t.sampling_rate - 0.25).abs() < f64::EPSILON);
    assert_eq!(t.export_interval, Duration::from_millis(250));

    let grpc = resolve(
        &[],
        &[
            ("TRACING_ENABLED", "1"),
            ("TRACING_EXPORTER_PROTOCOL", "GRPC"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(grpc.protocol, crate::otel::ExportProtocol::Grpc);
    assert_eq!(grpc.endpoint, "http://collector:4317");
}

#[test]
fn tracing_endpoint_follows_the_otlp_precedence() {
    let endpoint = |args: &[&str], vars: &[(&str, &str)]| {
        let mut all = vec![("TRACING_ENABLED", "true")];
        all.extend_from_slice(vars);
        resolve(args, &all).map(|s| s.tracing.unwrap().endpoint)
    };
    // The signal-specific variable is used as it is, and wins.
    assert_eq!(
        endpoint(
            &["--otlp-endpoint", "http://flag:4318"],
            &[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://traces:9/custom"
                ),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            ]
        )
        .unwrap(),
        "http://traces:9/custom"
    );
    assert_eq!(
        endpoint(
            &["--otlp-endpoint", "http://flag:4318"],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318")]
        )
        .unwrap(),
        "http://flag:4318/v1/traces"
    );
    // No scheme: plaintext only when insecure is asked.
    assert_eq!(
        endpoint(
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
            ]
        )
        .unwrap(),
        "http://collector:4318/v1/traces"
    );
    for (var, bad) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://collector/v1/traces",
        ),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
    ] {
        let err = endpoint(&[], &[(var, bad)]).unwrap_err();
        assert!(err.to_string().contains(var), "{err}");
        assert!(err.to_string().contains("http://"), "{err}");
    }
}

#[test]
fn tracing_headers_merge_and_decode() {
    let t = resolve(
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Basic%20abc, x-a=1",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=2,x-b=%3D"),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(
        t.headers,
        vec![
            ("authorization".to_owned(), "Basic abc".to_owned()),
            ("x-a".to_owned(), "2".to_owned()),
            ("x-b".to_owned(), "=".to_owned()),
        ]
    );
    for bad in ["novalue", "=v", "x=%zz"] {
        let err = resolve(
            &[],
            &[
                ("TRACING_ENABLED", "true"),
                ("OTEL_EXPORTER_OTLP_HEADERS", bad),
            ],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("OTEL_EXPORTER_OTLP_HEADERS"),
            "{err}"
        );
    }
}

#[test]
fn tracing_rejects_bad_values_by_name() {
    for (var, bad) in [
        ("TRACING_EXPORTER_PROTOCOL", "udp"),
        ("TRACING_SAMPLING_RATE", "half"),
        ("TRACING_SAMPLING_RATE", "NaN"),
        ("OTEL_BSP_SCHEDULE_DELAY", "5s"),
    ] {
        let err = resolve(&[], &[("TRACING_ENABLED", "true"), (var, bad)]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("environment variable {var}='{bad}'")),
            "{err}"
        );
    }
    // Tracing off: its variables are not read.
    assert!(resolve(&[], &[("TRACING_SAMPLING_RATE", "half")]).is_ok());
}
#[test]
fn envoy_gateway_environment_resolves() {
    let s = resolve(
        &[],
        &[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("LOG_LEVEL", "info"),
            ("USE_STATSD", "false"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
            ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.redis.svc:6379"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
            ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
        ],
    )
    .unwrap();
    assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
    assert!(s.ignore_dotfiles);
    assert_eq!(s.log_level, "info");
    assert_eq!(s.store, BackendType::Redis);
    let tls = s.serve.tls.unwrap();
    assert_eq!(tls.cert, PathBuf::from("/certs/tls.crt"));
    assert_eq!(
        tls.client_ca, None,
        "GRPC_SERVER_TLS_CA_CERT asks for no mTLS"
    );
    assert_eq!(s.metrics_addr, Some("0.0.0.0:19001".parse().unwrap()));
    assert_eq!(
        s.stats.mapper_yaml,
        Some(PathBuf::from("/etc/statsd-exporter/conf.yaml"))
    );
    assert!(s.stats.statsd.is_none());
    assert!(s.stats.debug_addr.is_none());
    let ignored: Vec<&str> = s.stats.ignored.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        ignored,
        [
            "GRPC_SERVER_TLS_CA_CERT",
            "RUNTIME_WATCH_ROOT",
            "REDIS_SOCKET_TYPE"
        ]
    );
    let err = resolve(&[], &[("REDIS_SOCKET_TYPE", "udp")]).unwrap_err();
    assert!(err.to_string().contains("REDIS_SOCKET_TYPE"), "{err}");
    let err = resolve(&[], &[("RUNTIME_WATCH_ROOT", "maybe")]).unwrap_err();
    assert!(err.to_string().contains("RUNTIME_WATCH_ROOT"), "{err}");
}
#[test]
fn logrus_level_names_are_understood() {
    for (given, want) in [
        ("WARNING", "warn"),
        ("warn", "warn"),
        ("Fatal", "error"),
        ("panic", "error"),
        ("DEBUG", "debug"),
    ] {
        assert_eq!(
            resolve(&[], &[("LOG_LEVEL", given)]).unwrap().log_level,
            want
        );
    }
}
#[test]
fn debug_listener_only_when_asked() {
    assert!(resolve(&[], &[]).unwrap().stats.debug_addr.is_none());
    let s = resolve(&[], &[("DEBUG_PORT", "6070")]).unwrap();
    assert_eq!(s.stats.debug_addr, Some("127.0.0.1:6070".parse().unwrap()));
    let s = resolve(&[], &[("DEBUG_HOST", "0.0.0.0")]).unwrap();
    assert_eq!(s.stats.debug_addr, Some("0.0.0.0:6070".parse().unwrap()));
    let s = resolve(&["--debug-addr", "127.0.0.1:7"], &[("DEBUG_PORT", "1")]).unwrap();
    assert_eq!(s.stats.debug_addr, Some("127.0.0.1:7".parse().unwrap()));
    assert!(resolve(&[], &[("DEBUG_PORT", "x")]).is_err());
}
#[test]
fn statsd_follows_the_reference_defaults_and_exclusions() {
    use crate::metrics::statsd::{Format, Protocol};
    let statsd = resolve(&[], &[]).unwrap().stats.statsd.unwrap();
    assert_eq!((statsd.host.as_str(), statsd.port), ("localhost", 8125));
    assert_eq!(statsd.protocol, Protocol::Tcp);
    assert_eq!(statsd.flush_interval, Duration::from_secs(10));
    assert!(matches!(statsd.format, Format::Statsd));

    let s = resolve(
        &[],
        &[
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", "9125"),
            ("STATSD_PROTOCOL", "UDP"),
            ("STATS_FLUSH_INTERVAL", "250ms"),
            ("EXTRA_TAGS", "env:prod,zone:eu.1"),
        ],
    )
    .unwrap();
    let statsd = s.stats.statsd.unwrap();
    assert_eq!((statsd.host.as_str(), statsd.port), ("127.0.0.1", 9125));
    assert_eq!(statsd.protocol, Protocol::Udp);
    assert_eq!(statsd.flush_interval, Duration::from_millis(250));
    assert_eq!(statsd.tags.apply("x"), "x.__env=prod.__zone=eu_1");

    // Prometheus alone wins over the statsd default; both on is refused.
    let s = resolve(&[], &[("USE_PROMETHEUS", "true")]).unwrap();
    assert!(s.stats.statsd.is_none() && s.metrics_addr.is_some());
    for other in ["USE_STATSD", "USE_DOG_STATSD"] {
        let err = resolve(&[], &[("USE_PROMETHEUS", "true"), (other, "true")]).unwrap_err();
        assert!(matches!(err, SettingsError::Conflict { .. }), "{err}");
    }
    let s = resolve(&[], &[("USE_STATSD", "false")]).unwrap();
    assert!(s.stats.statsd.is_none());
    assert!(!s.stats.response_time_as_ms);
    let s = resolve(
        &[],
        &[
            ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "unix"),
        ],
    )
    .unwrap();
    assert!(s.stats.response_time_as_ms);
    assert_eq!(
        s.stats.ignored,
        [("REDIS_PERSECOND_SOCKET_TYPE", s.stats.ignored[0].1)]
    );
    let s = resolve(
        &[],
        &[("DISABLE_STATS", "true"), ("USE_PROMETHEUS", "true")],
    )
    .unwrap();
    assert!(s.stats.statsd.is_none() && s.metrics_addr.is_none());

    for (var, value) in [
        ("STATSD_PROTOCOL", "sctp"),
        ("STATSD_PORT", "99999"),
        ("STATS_FLUSH_INTERVAL", "0s"),
        ("EXTRA_TAGS", "novalue"),
    ] {
        let err = resolve(&[], &[(var, value)]).unwrap_err();
        assert!(err.to_string().contains(var), "{err}");
    }
}
#[test]
fn dogstatsd_mogrifiers_come_from_the_environment() {
    use crate::metrics::statsd::{Format, Protocol};
    let s = resolve(
        &[],
        &[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("USE_DOG_STATSD_MOGRIFIERS", "TAG"),
            ("DOG_STATSD_MOGRIFIER_TAG_PATTERN", r"^ratelimit\.(.*)$"),
            ("DOG_STATSD_MOGRIFIER_TAG_NAME", "rl.$1"),
            ("DOG_STATSD_MOGRIFIER_TAG_TAGS", "kind:$1,static:x"),
        ],
    )
    .unwrap();
    let statsd = s.stats.statsd.unwrap();
    assert_eq!(statsd.protocol, Protocol::Udp);
    let Format::DogStatsd(mogrifiers) = statsd.format else {
        panic!("not dogstatsd")
    };
    assert_eq!(mogrifiers.len(), 1);
    assert_eq!(mogrifiers[0].name, "rl.$1");
    assert_eq!(
        mogrifiers[0].tags,
        [
            ("kind".to_owned(), "$1".to_owned()),
            ("static".to_owned(), "x".to_owned())
        ]
    );
    let base = [
        ("USE_DOG_STATSD", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "M"),
    ];
    for (extra, want) in [
        (vec![], "no PATTERN specified for mogrifier M"),
        (
            vec![("DOG_STATSD_MOGRIFIER_M_PATTERN", "(")],
            "failed to compile pattern",
        ),
        (
            vec![("DOG_STATSD_MOGRIFIER_M_PATTERN", "a")],
            "no NAME specified for mogrifier M",
        ),
        (
            vec![
                ("DOG_STATSD_MOGRIFIER_M_PATTERN", "a"),
                ("DOG_STATSD_MOGRIFIER_M_NAME", "b"),
                ("DOG_STATSD_MOGRIFIER_M_TAGS", "k:"),
            ],
            "needs a key and a value",
        ),
    ] {
        let vars: Vec<(&str, &str)> = base.iter().copied().chain(extra).collect();
        let err = resolve(&[], &vars).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
}
#[test]
fn remaining_reference_variables_reach_their_options() {
    let s = resolve(
        &[],
        &[
            ("RUNTIME_ROOT", "/srv/rt"),
            ("RUNTIME_APPDIRECTORY", "rules"),
            ("MERGE_DOMAIN_CONFIG", "true"),
            ("QUOTA_MODE", "true"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "X-Limit"),
            ("LIMIT_REMAINING_HEADER", "X-Remaining"),
            ("REDIS_URL", "mymaster,127.0.0.1:26379,127.0.0.1:26380"),
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_POOL_SIZE", "4"),
            ("REDIS_SENTINEL_AUTH", "sentinel-secret"),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", "127.0.0.1:6380"),
            ("REDIS_PERSECOND_POOL_SIZE", "3"),
            ("REDIS_PERSECOND_AUTH", "per-second-secret"),
            ("REDIS_PERSECOND_SENTINEL_AUTH", "ps-sentinel"),
            ("REDIS_PERSECOND_TIMEOUT", "40ms"),
            ("REDIS_PERSECOND_TLS", "true"),
        ],
    )
    .unwrap();
    assert_eq!(s.config_dir, PathBuf::from("/srv/rt/rules"));
    assert!(s.merge_domain_config);
    assert!(s.limiter.global_quota_mode);
    let headers = s.limiter.response_headers.unwrap();
    assert_eq!(
        (&*headers.limit, &*headers.remaining),
        ("X-Limit", "X-Remaining")
    );
    let redis = s.redis.unwrap();
    assert_eq!(redis.main.mode, RedisMode::Sentinel);
    assert_eq!(redis.main.pool_size, 4);
    assert_eq!(redis.main.sentinel_auth.as_deref(), Some("sentinel-secret"));
    assert!(redis.main.tls.is_none());
    let second = redis.per_second.unwrap();
    assert_eq!(second.url, "127.0.0.1:6380");
    assert_eq!(second.pool_size, 3);
    assert_eq!(second.auth.as_deref(), Some("per-second-secret"));
    assert_eq!(second.sentinel_auth.as_deref(), Some("ps-sentinel"));
    assert_eq!(second.timeout, Duration::from_millis(40));
    assert!(second.tls.is_some());
}

#[test]
fn rlqs_settings_from_flags_and_env() {
    let s = resolve(&[], &[]).unwrap();
    assert_eq!(s.serve.rlqs, crate::rlqs::RlqsOptions::default());
    let s = resolve(
        &[
            "--rlqs-unmatched-behavior",
            "deny",
            "--rlqs-idle-timeout",
            "2m",
        ],
        &[
            ("RLQS_ASSIGNMENT_TTL", "100ms"),
            ("RLQS_MAX_BUCKETS_PER_STREAM", "7"),
            ("RLQS_UNMATCHED_BEHAVIOR", "allow"),
            ("MAX_DESCRIPTOR_ENTRIES", "4"),
            ("SHADOW_MODE", "true"),
        ],
    )
    .unwrap();
    let rlqs = &s.serve.rlqs;
    assert_eq!(rlqs.unmatched, crate::rlqs::Unmatched::DenyAll);
    assert_eq!(rlqs.idle_timeout, Duration::from_secs(120));
    // Never under a second: Envoy would expire it at once.
    assert_eq!(rlqs.assignment_ttl, Duration::from_secs(1));
    assert_eq!(rlqs.bounds.max_buckets, 7);
    assert_eq!(rlqs.bounds.max_entries, 4);
    assert!(rlqs.global_shadow_mode);
    let err = resolve(&[], &[("RLQS_UNMATCHED_BEHAVIOR", "maybe")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "environment variable RLQS_UNMATCHED_BEHAVIOR='maybe' is not allow or deny"
    );
}
