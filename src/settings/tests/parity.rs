//! The reference's settings added for parity (its newest pull requests
//! among them).

use super::*;

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
