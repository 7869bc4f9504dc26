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
    let err = resolve(&[], &[(vars::backend_type.name, "memcache")]).unwrap_err();
    assert!(err.to_string().contains("memory or redis"));
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

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("s").is_err());
}

/// docs/settings.md's table is the one the declarations generate.
#[test]
fn the_settings_reference_is_generated_from_the_declarations() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/settings.md");
    let document = std::fs::read_to_string(&path).unwrap();
    let current = super::reference::current(&document).expect("docs/settings.md has the markers");
    assert!(
        current == super::reference::markdown(),
        "docs/settings.md is out of date: run `cargo run -- settings-doc --write docs/settings.md`"
    );
}

/// Each environment variable's name is written once under src/settings/:
/// in its declaration. Everything else refers to the declaration.
#[test]
fn every_variable_name_is_written_once() {
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/settings"),
        &mut paths,
    );
    let texts: Vec<String> = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut repeated = Vec::new();
    for var in vars::ALL {
        let lines = texts
            .iter()
            .flat_map(|text| text.lines())
            .filter(|line| {
                line.match_indices(var.name).any(|(at, _)| {
                    !is_word(line[..at].chars().next_back())
                        && !is_word(line[at + var.name.len()..].chars().next())
                })
            })
            .count();
        if lines != 1 {
            repeated.push(format!("{} ({lines} lines)", var.name));
        }
    }
    assert!(repeated.is_empty(), "written more than once: {repeated:?}");
}

/// Every flag of `serve` has its declaration (so --help and the reference
/// name its variable), and every declared flag exists.
#[test]
fn flags_and_declarations_match() {
    use clap::Args as _;
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    let longs: Vec<&str> = command
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .collect();
    let undeclared: Vec<&&str> = longs
        .iter()
        .filter(|long| !vars::ALL.iter().any(|v| v.flag == **long))
        .collect();
    assert!(
        undeclared.is_empty(),
        "flags without a declaration: {undeclared:?}"
    );
    let unknown: Vec<&str> = vars::ALL
        .iter()
        .filter(|v| !v.flag.is_empty() && !longs.contains(&v.flag))
        .map(|v| v.name)
        .collect();
    assert!(
        unknown.is_empty(),
        "declared flags serve lacks: {unknown:?}"
    );
}

/// `redis_auth_file` / `redis_persecond_auth_file` (the reference's pull
/// request #1240): the password read from a file, trailing CR/LF stripped;
/// both ways at once, an empty file or a missing one is refused, naming it.
#[test]
fn redis_passwords_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main");
    let second = dir.path().join("second");
    let empty = dir.path().join("empty");
    std::fs::write(&main, "user:s3cret\r\n").unwrap();
    std::fs::write(&second, "other\n\n").unwrap();
    std::fs::write(&empty, "\r\n").unwrap();
    let text = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let redis = |extra: &[(&str, String)]| {
        let mut vars: Vec<(&str, String)> = vec![
            (vars::backend_type.name, "redis".to_owned()),
            (vars::redis_persecond.name, "true".to_owned()),
        ];
        vars.extend(extra.iter().cloned());
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        resolve(&[], &pairs)
    };
    let s = redis(&[
        (vars::redis_auth_file.name, text(&main)),
        (vars::redis_persecond_auth_file.name, text(&second)),
    ])
    .unwrap();
    let settings = s.redis.unwrap();
    assert_eq!(settings.main.auth.as_deref(), Some("user:s3cret"));
    assert_eq!(settings.per_second.unwrap().auth.as_deref(), Some("other"));
    let err = redis(&[
        (vars::redis_auth_file.name, text(&main)),
        (vars::redis_auth.name, "inline".to_owned()),
    ])
    .unwrap_err();
    assert!(
        err.to_string().contains(vars::redis_auth.name)
            && err.to_string().contains(vars::redis_auth_file.name),
        "{err}"
    );
    let err = redis(&[(vars::redis_persecond_auth_file.name, text(&empty))]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(vars::redis_persecond_auth_file.name)
            && err.to_string().ends_with("is empty"),
        "{err}"
    );
    let err = redis(&[(
        vars::redis_auth_file.name,
        text(&dir.path().join("missing")),
    )])
    .unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
}

/// `redis_op_timeout` (the reference's pull request #1188) bounds each
/// call when not 0, winning over `redis_timeout`; 0 leaves `redis_timeout`.
#[test]
fn redis_op_timeout_wins_over_the_call_timeout() {
    let base = [
        (vars::backend_type.name, "redis"),
        (vars::redis_timeout.name, "300ms"),
        (vars::redis_persecond.name, "true"),
        (vars::redis_persecond_timeout.name, "400ms"),
    ];
    let with = |extra: &[(&str, &str)]| {
        let mut all = base.to_vec();
        all.extend_from_slice(extra);
        resolve(&[], &all).unwrap().redis.unwrap()
    };
    let plain = with(&[]);
    assert_eq!(plain.main.timeout, Duration::from_millis(300));
    let zero = with(&[(vars::redis_op_timeout.name, "0s")]);
    assert_eq!(zero.main.timeout, Duration::from_millis(300));
    let op = with(&[
        (vars::redis_op_timeout.name, "50ms"),
        (vars::redis_persecond_op_timeout.name, "60ms"),
    ]);
    assert_eq!(op.main.timeout, Duration::from_millis(50));
    assert_eq!(op.per_second.unwrap().timeout, Duration::from_millis(60));
}

/// `grpc_max_concurrent_streams` (pull request #1189),
/// `grpc_max_connection_age` and `_GRACE`, with the reference's defaults;
/// the reference's 0 streams (unlimited) keeps floodgate's bound.
#[test]
fn grpc_connection_settings() {
    let s = resolve(&[], &[]).unwrap();
    assert_eq!(s.serve.max_concurrent_per_connection, 1_024);
    assert_eq!(
        s.serve.max_connection_age,
        Some(Duration::from_secs(24 * 3_600))
    );
    assert_eq!(
        s.serve.max_connection_age_grace,
        Some(Duration::from_secs(3_600))
    );
    let s = resolve(
        &["--grpc-max-connection-age", "5m"],
        &[
            (vars::grpc_max_concurrent_streams.name, "100"),
            (vars::grpc_max_connection_age.name, "1h"),
            (vars::grpc_max_connection_age_grace.name, "30s"),
        ],
    )
    .unwrap();
    assert_eq!(s.serve.max_concurrent_per_connection, 100);
    assert_eq!(s.serve.max_connection_age, Some(Duration::from_secs(300)));
    assert_eq!(
        s.serve.max_connection_age_grace,
        Some(Duration::from_secs(30))
    );
    let s = resolve(&[], &[(vars::grpc_max_concurrent_streams.name, "0")]).unwrap();
    assert_eq!(s.serve.max_concurrent_per_connection, 1_024);
}

/// The header settings of the reference's pull requests #1190 and #1168.
#[test]
fn all_descriptors_and_request_header_settings() {
    let s = resolve(&[], &[]).unwrap();
    assert!(!s.limiter.all_descriptors_headers);
    assert_eq!(s.limiter.request_headers, None);
    let s = resolve(
        &["--limit-request-reset-header", "X-Reset"],
        &[
            (vars::limit_all_descriptors_headers_enabled.name, "true"),
            (vars::limit_request_headers_enabled.name, "1"),
            (vars::limit_request_limit_header.name, "X-Limit"),
        ],
    )
    .unwrap();
    assert!(s.limiter.all_descriptors_headers);
    let names = s.limiter.request_headers.unwrap();
    assert_eq!(&*names.limit, "X-Limit");
    assert_eq!(&*names.remaining, "RateLimit-Remaining");
    assert_eq!(&*names.reset, "X-Reset");
}

/// `grpc_uds`: gRPC on a unix socket; refused with TLS, which a peer on the
/// same host does not need.
#[test]
fn grpc_on_a_unix_socket() {
    let s = resolve(&[], &[(vars::grpc_uds.name, "/run/rls.sock")]).unwrap();
    assert_eq!(s.grpc_uds, Some(PathBuf::from("/run/rls.sock")));
    assert_eq!(resolve(&[], &[]).unwrap().grpc_uds, None);
    let err = resolve(
        &[
            "--grpc-server-use-tls",
            "--grpc-server-tls-cert",
            "/c",
            "--grpc-server-tls-key",
            "/k",
        ],
        &[(vars::grpc_uds.name, "/run/rls.sock")],
    )
    .unwrap_err();
    assert!(err.to_string().contains(vars::grpc_uds.name), "{err}");
}

/// The first Redis connection's retries (`redis_startup_*`): floodgate's
/// own defaults, the reference's variables, and 0 as "try forever".
#[test]
fn redis_startup_settings() {
    let redis = |extra: &[(&str, &str)]| {
        let mut all = vec![(vars::backend_type.name, "redis")];
        all.extend_from_slice(extra);
        resolve(&[], &all).unwrap().redis.unwrap()
    };
    let defaults = redis(&[]);
    assert_eq!(
        defaults.main.startup_backoff,
        (Duration::from_millis(100), Duration::from_secs(5))
    );
    assert_eq!(defaults.startup_max_elapsed, None);
    let set = redis(&[
        (vars::redis_startup_initial_interval.name, "1s"),
        (vars::redis_startup_max_interval.name, "30s"),
        (vars::redis_startup_max_elapsed_time.name, "2m"),
    ]);
    assert_eq!(
        set.main.startup_backoff,
        (Duration::from_secs(1), Duration::from_secs(30))
    );
    assert_eq!(set.startup_max_elapsed, Some(Duration::from_secs(120)));
    let forever = redis(&[(vars::redis_startup_max_elapsed_time.name, "0s")]);
    assert_eq!(forever.startup_max_elapsed, None);
}

/// `redis_health_check_active_connection`: only meaningful on Redis.
#[test]
fn health_follows_redis_only_when_asked() {
    let on = [(vars::redis_health_check_active_connection.name, "true")];
    assert!(!resolve(&[], &on).unwrap().serve.health_follows_store);
    let mut redis = on.to_vec();
    redis.push((vars::backend_type.name, "redis"));
    assert!(resolve(&[], &redis).unwrap().serve.health_follows_store);
    let off = resolve(&[], &[(vars::backend_type.name, "redis")]).unwrap();
    assert!(!off.serve.health_follows_store);
}
