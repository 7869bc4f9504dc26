//! Settings tests: Envoy Gateway's environment, statsd and DogStatsD, the remaining reference variables, RLQS.

use super::*;

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
