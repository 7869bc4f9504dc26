//! Settings tests: Envoy Gateway's environment, statsd and DogStatsD, the remaining reference variables, RLQS.

use super::*;

#[test]
fn envoy_gateway_environment_resolves() {
    let s = resolve(
        &[],
        &[
            (vars::runtime_root.name, "/data"),
            (vars::runtime_subdirectory.name, "ratelimit"),
            (vars::runtime_ignoredotfiles.name, "true"),
            (vars::runtime_watch_root.name, "false"),
            (vars::log_level.name, "info"),
            (vars::use_statsd.name, "false"),
            (vars::grpc_server_use_tls.name, "true"),
            (vars::grpc_server_tls_cert.name, "/certs/tls.crt"),
            (vars::grpc_server_tls_key.name, "/certs/tls.key"),
            (vars::grpc_server_tls_ca_cert.name, "/certs/ca.crt"),
            (vars::redis_socket_type.name, "tcp"),
            (vars::redis_url.name, "redis.redis.svc:6379"),
            (vars::use_prometheus.name, "true"),
            (vars::prometheus_addr.name, ":19001"),
            (
                vars::prometheus_mapper_yaml.name,
                "/etc/statsd-exporter/conf.yaml",
            ),
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
        tls.client_ca,
        None,
        "{} asks for no mTLS",
        vars::grpc_server_tls_ca_cert.name
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
            vars::grpc_server_tls_ca_cert.name,
            vars::runtime_watch_root.name,
            vars::redis_socket_type.name
        ]
    );
    let err = resolve(&[], &[(vars::redis_socket_type.name, "udp")]).unwrap_err();
    assert!(
        err.to_string().contains(vars::redis_socket_type.name),
        "{err}"
    );
    let err = resolve(&[], &[(vars::runtime_watch_root.name, "maybe")]).unwrap_err();
    assert!(
        err.to_string().contains(vars::runtime_watch_root.name),
        "{err}"
    );
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
            resolve(&[], &[(vars::log_level.name, given)])
                .unwrap()
                .log_level,
            want
        );
    }
}
#[test]
fn debug_listener_only_when_asked() {
    assert!(resolve(&[], &[]).unwrap().stats.debug_addr.is_none());
    let s = resolve(&[], &[(vars::debug_port.name, "6070")]).unwrap();
    assert_eq!(s.stats.debug_addr, Some("127.0.0.1:6070".parse().unwrap()));
    let s = resolve(&[], &[(vars::debug_host.name, "0.0.0.0")]).unwrap();
    assert_eq!(s.stats.debug_addr, Some("0.0.0.0:6070".parse().unwrap()));
    let s = resolve(
        &["--debug-addr", "127.0.0.1:7"],
        &[(vars::debug_port.name, "1")],
    )
    .unwrap();
    assert_eq!(s.stats.debug_addr, Some("127.0.0.1:7".parse().unwrap()));
    assert!(resolve(&[], &[(vars::debug_port.name, "x")]).is_err());
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
            (vars::statsd_host.name, "127.0.0.1"),
            (vars::statsd_port.name, "9125"),
            (vars::statsd_protocol.name, "UDP"),
            (vars::stats_flush_interval.name, "250ms"),
            (vars::extra_tags.name, "env:prod,zone:eu.1"),
        ],
    )
    .unwrap();
    let statsd = s.stats.statsd.unwrap();
    assert_eq!((statsd.host.as_str(), statsd.port), ("127.0.0.1", 9125));
    assert_eq!(statsd.protocol, Protocol::Udp);
    assert_eq!(statsd.flush_interval, Duration::from_millis(250));
    assert_eq!(statsd.tags.apply("x"), "x.__env=prod.__zone=eu_1");

    // Prometheus alone wins over the statsd default; both on is refused.
    let s = resolve(&[], &[(vars::use_prometheus.name, "true")]).unwrap();
    assert!(s.stats.statsd.is_none() && s.metrics_addr.is_some());
    for other in [vars::use_statsd.name, vars::use_dog_statsd.name] {
        let err =
            resolve(&[], &[(vars::use_prometheus.name, "true"), (other, "true")]).unwrap_err();
        assert!(matches!(err, SettingsError::Conflict { .. }), "{err}");
    }
    let s = resolve(&[], &[(vars::use_statsd.name, "false")]).unwrap();
    assert!(s.stats.statsd.is_none());
    assert!(!s.stats.response_time_as_ms);
    let s = resolve(
        &[],
        &[
            (vars::prometheus_response_time_as_milliseconds.name, "true"),
            (vars::redis_persecond_socket_type.name, "unix"),
        ],
    )
    .unwrap();
    assert!(s.stats.response_time_as_ms);
    assert_eq!(
        s.stats.ignored,
        [(vars::redis_persecond_socket_type.name, s.stats.ignored[0].1)]
    );
    let s = resolve(
        &[],
        &[
            (vars::disable_stats.name, "true"),
            (vars::use_prometheus.name, "true"),
        ],
    )
    .unwrap();
    assert!(s.stats.statsd.is_none() && s.metrics_addr.is_none());

    for (var, value) in [
        (vars::statsd_protocol.name, "sctp"),
        (vars::statsd_port.name, "99999"),
        (vars::stats_flush_interval.name, "0s"),
        (vars::extra_tags.name, "novalue"),
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
            (vars::use_statsd.name, "false"),
            (vars::use_dog_statsd.name, "true"),
            (vars::use_dog_statsd_mogrifiers.name, "TAG"),
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
        (vars::use_dog_statsd.name, "true"),
        (vars::use_dog_statsd_mogrifiers.name, "M"),
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
            (vars::runtime_root.name, "/srv/rt"),
            (vars::runtime_appdirectory.name, "rules"),
            (vars::merge_domain_config.name, "true"),
            (vars::quota_mode.name, "true"),
            (vars::limit_response_headers_enabled.name, "true"),
            (vars::limit_limit_header.name, "X-Limit"),
            (vars::limit_remaining_header.name, "X-Remaining"),
            (
                vars::redis_url.name,
                "mymaster,127.0.0.1:26379,127.0.0.1:26380",
            ),
            (vars::redis_type.name, "SENTINEL"),
            (vars::redis_pool_size.name, "4"),
            (vars::redis_sentinel_auth.name, "sentinel-secret"),
            (vars::redis_persecond.name, "true"),
            (vars::redis_persecond_url.name, "127.0.0.1:6380"),
            (vars::redis_persecond_pool_size.name, "3"),
            (vars::redis_persecond_auth.name, "per-second-secret"),
            (vars::redis_persecond_sentinel_auth.name, "ps-sentinel"),
            (vars::redis_persecond_timeout.name, "40ms"),
            (vars::redis_persecond_tls.name, "true"),
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
            (vars::rlqs_assignment_ttl.name, "100ms"),
            (vars::rlqs_max_buckets_per_stream.name, "7"),
            (vars::rlqs_unmatched_behavior.name, "allow"),
            (vars::max_descriptor_entries.name, "4"),
            (vars::shadow_mode.name, "true"),
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
    let err = resolve(&[], &[(vars::rlqs_unmatched_behavior.name, "maybe")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "environment variable {}='maybe' is not allow or deny",
            vars::rlqs_unmatched_behavior.name
        )
    );
}
