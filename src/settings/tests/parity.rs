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

/// The HTTP/2 bounds of a stream and a connection: hyper's defaults until
/// set; a zero or a window past 2^31 - 1 is refused, naming the setting.
#[test]
fn http2_bounds_default_to_hypers_and_refuse_zero_and_oversized_windows() {
    let s = resolve(&[], &[]).unwrap();
    assert_eq!(
        s.serve.http2,
        crate::server::Http2Bounds {
            max_header_list_bytes: 16_384,
            stream_window_bytes: 1_048_576,
            connection_window_bytes: 1_048_576,
        }
    );
    let s = resolve(
        &["--grpc-stream-window-bytes", "65535"],
        &[
            (vars::grpc_connection_window_bytes.name, "262144"),
            (vars::grpc_max_header_list_bytes.name, "8192"),
        ],
    )
    .unwrap();
    assert_eq!(
        (
            s.serve.http2.stream_window_bytes,
            s.serve.http2.connection_window_bytes,
            s.serve.http2.max_header_list_bytes
        ),
        (65_535, 262_144, 8_192)
    );
    for (var, value) in [
        (vars::grpc_stream_window_bytes.name, "0"),
        (vars::grpc_connection_window_bytes.name, "2147483648"),
        (vars::grpc_max_header_list_bytes.name, "0"),
    ] {
        let err = resolve(&[], &[(var, value)]).unwrap_err().to_string();
        assert!(
            err.starts_with(var) && err.contains("must be from 1 to"),
            "{err}"
        );
    }
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

/// `backend_type` = `memcache` and its settings: the servers from a list
/// (trimmed, in order) or an SRV record, never both, never neither; the
/// reference's defaults; TLS files; a prefix memcached keys cannot carry
/// is refused.
#[test]
fn memcache_settings() {
    use crate::store::{MemcacheServers, MemcacheTls};
    let memcache = |extra: &[(&str, &str)]| {
        let mut vars = vec![(vars::backend_type.name, "memcache")];
        vars.extend_from_slice(extra);
        resolve(&[], &vars)
    };
    let s = memcache(&[(vars::memcache_host_port.name, " a:11211, b:11212 ,")]).unwrap();
    assert_eq!(s.store, BackendType::Memcache);
    assert!(s.redis.is_none());
    let m = s.memcache.unwrap();
    assert_eq!(
        m.servers,
        MemcacheServers::List(vec!["a:11211".to_owned(), "b:11212".to_owned()])
    );
    assert_eq!(m.max_idle_conns, 2);
    assert_eq!(m.timeout, Duration::from_millis(500));
    assert_eq!(m.expiration_jitter_max_secs, 300);
    assert_eq!(m.tls, None);

    let s = memcache(&[
        (vars::memcache_srv.name, "_memcache._tcp.example.com"),
        (vars::memcache_srv_refresh.name, "30s"),
        (vars::memcache_srv_dns.name, "127.0.0.1:8600"),
        (vars::memcache_max_idle_conns.name, "8"),
        (vars::memcache_timeout.name, "250ms"),
        (vars::memcache_tls.name, "true"),
        (vars::memcache_tls_cacert.name, "/ca.pem"),
        (vars::memcache_tls_client_cert.name, "/c.pem"),
        (vars::memcache_tls_client_key.name, "/c.key"),
        (vars::memcache_tls_skip_hostname_verification.name, "true"),
        (vars::cache_key_prefix.name, "fleet:"),
    ])
    .unwrap();
    let m = s.memcache.unwrap();
    assert_eq!(
        m.servers,
        MemcacheServers::Srv {
            name: "_memcache._tcp.example.com".to_owned(),
            refresh: Some(Duration::from_secs(30)),
            dns: Some("127.0.0.1:8600".parse().unwrap()),
        }
    );
    assert_eq!(
        (m.max_idle_conns, m.timeout),
        (8, Duration::from_millis(250))
    );
    assert_eq!(m.key_prefix, "fleet:");
    assert_eq!(
        m.tls,
        Some(MemcacheTls {
            ca_cert: Some("/ca.pem".into()),
            client_cert: Some("/c.pem".into()),
            client_key: Some("/c.key".into()),
            skip_hostname_verification: true,
        })
    );
    // A refresh of 0 (the default) asks once.
    let s = memcache(&[(vars::memcache_srv.name, "_m._tcp.x")]).unwrap();
    assert!(matches!(
        s.memcache.unwrap().servers,
        MemcacheServers::Srv {
            refresh: None,
            dns: None,
            ..
        }
    ));

    let both = memcache(&[
        (vars::memcache_host_port.name, "a:1"),
        (vars::memcache_srv.name, "_m._tcp.x"),
    ])
    .unwrap_err();
    assert!(
        both.to_string().contains(vars::memcache_host_port.name)
            && both.to_string().contains(vars::memcache_srv.name),
        "{both}"
    );
    let neither = memcache(&[]).unwrap_err();
    assert!(
        neither.to_string().contains(vars::memcache_host_port.name),
        "{neither}"
    );
    let spaced = memcache(&[
        (vars::memcache_host_port.name, "a:1"),
        (vars::cache_key_prefix.name, "a b"),
    ])
    .unwrap_err();
    assert!(
        spaced.to_string().contains(vars::cache_key_prefix.name),
        "{spaced}"
    );
    let dns = memcache(&[
        (vars::memcache_srv.name, "_m._tcp.x"),
        (vars::memcache_srv_dns.name, "consul"),
    ])
    .unwrap_err();
    assert!(
        dns.to_string().contains(vars::memcache_srv_dns.name),
        "{dns}"
    );
    // Without the store selected, memcached settings are not read.
    let s = resolve(&[], &[(vars::memcache_host_port.name, "a:1")]).unwrap();
    assert!(s.memcache.is_none());
}
