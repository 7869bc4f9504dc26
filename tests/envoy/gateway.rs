//! Drop-in under Envoy Gateway: the floodgate binary, invoked as
//! `ratelimit` with Envoy Gateway's environment (rules over xDS from a test
//! ADS server over mTLS, paths and ports pointing at the test's files and
//! free ports), and the statsd sink against real UDP and TCP listeners.

use crate::support::grpc::request;
use crate::support::http::get;
use crate::support::redis::RedisServer;
use crate::support::xds::{AdsServer, ServerTls, config, limit};
use crate::support::{free_port, poll_until, poll_until_async};
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::ratelimit::config::ratelimit::v3 as rls_conf;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// One rule per level the dashboards label: `key1` alone and `key1.key2`.
const RULES: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: route
    value: r1
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 1}
";

/// [`RULES`] as an xDS resource.
fn xds_rules() -> Vec<rls_conf::RateLimitConfig> {
    let mut route = limit("route", rls_conf::RateLimitUnit::Day, 0);
    route.value = "r1".to_owned();
    route.rate_limit = None;
    route.descriptors = vec![limit("user", rls_conf::RateLimitUnit::Day, 1)];
    vec![config(
        "edge-rules",
        "edge",
        vec![limit("user", rls_conf::RateLimitUnit::Day, 2), route],
    )]
}

/// A floodgate process, killed and reaped when dropped.
struct Process {
    child: Child,
    http: SocketAddr,
    _dir: tempfile::TempDir,
    /// Its stderr (a file, so a chatty process never blocks on a full pipe).
    _log: tempfile::NamedTempFile,
}

impl Process {
    /// Starts `binary` (no arguments) in `dir` (kept until dropped) with
    /// exactly `env`, and waits until the HTTP port answers `/healthcheck`
    /// 200.
    async fn start(
        binary: &Path,
        env: &[(&str, String)],
        http_port: u16,
        dir: tempfile::TempDir,
    ) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut command = Command::new(binary);
        command
            .current_dir(dir.path())
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap());
        let mut child = command.spawn().unwrap();
        let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
        let log_path = log.path().to_owned();
        let healthy = poll_until_async(Duration::from_secs(30), Duration::from_millis(50), || {
            let exited = child.try_wait().unwrap();
            let log_path = log_path.clone();
            async move {
                assert!(
                    exited.is_none(),
                    "floodgate exited early ({exited:?}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
                let Ok(Ok(stream)) = tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::net::TcpStream::connect(http),
                )
                .await
                else {
                    return None;
                };
                drop(stream);
                (get(http, "/healthcheck").await.status == 200).then_some(true)
            }
        })
        .await;
        if !healthy {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "not healthy: {}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
        }
        Self {
            child,
            http,
            _dir: dir,
            _log: log,
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary under the reference's name, as Envoy Gateway runs it
/// (`command: [/bin/ratelimit]`, no arguments).
fn as_ratelimit(dir: &Path) -> PathBuf {
    let link = dir.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &link).unwrap();
    link
}

/// `openssl` with `args`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is needed to make PKCS#1 RSA keys (rcgen cannot make RSA keys)");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA (`ca.crt`) and a server certificate for `localhost` (`tls.crt`)
/// whose RSA key (`tls.key`) is PKCS#1 PEM (`BEGIN RSA PRIVATE KEY`), as
/// Envoy Gateway's certgen writes them.
fn pkcs1_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    certificate(
        dir,
        &["genrsa", "-traditional", "-out", "tls.key", "2048"],
        "-----BEGIN RSA PRIVATE KEY-----",
    )
}

/// A CA (`ca.crt`) and a certificate for `localhost` (`tls.crt`) for the
/// key `make_key` writes to `tls.key`, whose PEM must start with `header`.
fn certificate(dir: &Path, make_key: &[&str], header: &str) -> (PathBuf, PathBuf) {
    openssl(dir, &["genrsa", "-traditional", "-out", "ca.key", "2048"]);
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            "/CN=test ca",
            "-days",
            "2",
            "-out",
            "ca.crt",
        ],
    );
    openssl(dir, make_key);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "tls.key",
            "-subj",
            "/CN=localhost",
            "-out",
            "tls.csr",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "tls.crt",
        ],
    );
    let pem = std::fs::read_to_string(dir.join("tls.key")).unwrap();
    assert!(pem.starts_with(header), "{pem}");
    (dir.join("tls.crt"), dir.join("tls.key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_keys_load_as_pkcs1_pkcs8_and_sec1() {
    use floodgate::TlsOptions;
    let kinds: [(&[&str], &str); 3] = [
        (
            &["genrsa", "-traditional", "-out", "tls.key", "2048"],
            "-----BEGIN RSA PRIVATE KEY-----",
        ),
        (
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "tls.key",
            ],
            "-----BEGIN PRIVATE KEY-----",
        ),
        (
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                "tls.key",
            ],
            "-----BEGIN EC PRIVATE KEY-----",
        ),
    ];
    for (make_key, header) in kinds {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = certificate(dir.path(), make_key, header);
        let server = crate::support::tls::start(TlsOptions {
            cert,
            key,
            client_ca: None,
            client_san: None,
        })
        .await;
        let ca = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
        let answer = crate::support::tls::try_ask(server.grpc_addr, &ca, None).await;
        assert_eq!(answer.map(|r| r.overall_code), Ok(OK), "{header}");
        server.shutdown().await;
    }
}

/// The value of the sample `series` (name and labels, exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_deployment_runs_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    // One certificate for everything, as Envoy Gateway's certgen secret:
    // floodgate's gRPC server certificate and its xDS client certificate,
    // and the xDS server's certificate; ca.crt trusts them all.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let (cert, key) = pkcs1_certificate(&certs);
    let pem = |p: &Path| std::fs::read_to_string(p).unwrap();
    let ads = AdsServer::start(Some(ServerTls {
        cert: pem(&cert),
        key: pem(&key),
        client_ca: Some(pem(&certs.join("ca.crt"))),
    }))
    .await;
    ads.set("v1", xds_rules());
    let pki = crate::support::tls::redis_pki();
    let redis = RedisServer::start_tls(pki.path(), true);
    let mapping = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/statsd_exporter/envoy_gateway.yaml");
    let binary = as_ratelimit(dir.path());
    let (http_port, grpc_port, debug_port, prom_port) =
        (free_port(), free_port(), free_port(), free_port());
    let path = |p: &Path| p.to_string_lossy().into_owned();
    // Rules come over xDS; the RUNTIME_* directory does not even exist.
    let env = [
        ("RUNTIME_ROOT", path(&dir.path().join("data"))),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("LOG_LEVEL", "info".to_owned()),
        ("USE_STATSD", "false".to_owned()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        (
            "CONFIG_GRPC_XDS_SERVER_URL",
            format!("localhost:{}", ads.addr.port()),
        ),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".to_owned()),
        ("GRPC_SERVER_USE_TLS", "true".to_owned()),
        ("GRPC_SERVER_TLS_CERT", path(&cert)),
        ("GRPC_SERVER_TLS_KEY", path(&key)),
        ("GRPC_SERVER_TLS_CA_CERT", path(&certs.join("ca.crt"))),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", path(&cert)),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", path(&key)),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            path(&certs.join("ca.crt")),
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("localhost:{}", redis.port)),
        ("REDIS_TLS", "true".to_owned()),
        (
            "REDIS_TLS_CLIENT_CERT",
            path(&pki.path().join("client.pem")),
        ),
        ("REDIS_TLS_CLIENT_KEY", path(&pki.path().join("client.key"))),
        // Not set by Envoy Gateway (its Redis has a public CA): the test's
        // Redis has a private one.
        ("REDIS_TLS_CACERT", path(&pki.path().join("ca.pem"))),
        ("USE_PROMETHEUS", "true".to_owned()),
        ("PROMETHEUS_ADDR", format!(":{prom_port}")),
        ("PROMETHEUS_MAPPER_YAML", path(&mapping)),
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("DEBUG_PORT", debug_port.to_string()),
    ];
    // A read-only, empty working directory and no HOME or TMPDIR: the
    // process must need no writable place (the image runs on a read-only
    // root filesystem).
    let work = tempfile::tempdir().unwrap();
    let mode = |m| std::os::unix::fs::PermissionsExt::from_mode(m);
    std::fs::set_permissions(work.path(), mode(0o555)).unwrap();
    let work_path = work.path().to_owned();
    let process = Process::start(&binary, &env, http_port, work).await;
    // FORCE_START_WITHOUT_INITIAL_CONFIG: serving may begin before the
    // rules; /rlconfig on the debug port shows them once they are in.
    let debug: SocketAddr = format!("127.0.0.1:{debug_port}").parse().unwrap();
    let rules_in = poll_until_async(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async move {
            get(debug, "/rlconfig")
                .await
                .body
                .contains("edge.user")
                .then_some(true)
        },
    )
    .await;
    assert!(rules_in, "no rules from the xds server");

    // gRPC over TLS with the PKCS#1 key.
    let tls = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(
            std::fs::read(certs.join("ca.crt")).unwrap(),
        ));
    let channel = Channel::from_shared(format!("https://127.0.0.1:{grpc_port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let mut codes = Vec::new();
    for descriptor in [
        &[("user", "alice")][..],
        &[("user", "alice")],
        &[("user", "alice")],
        &[("route", "r1"), ("user", "bob")],
        &[("route", "r1"), ("user", "bob")],
    ] {
        let answer = client
            .should_rate_limit(request("edge", &[descriptor]))
            .await
            .unwrap()
            .into_inner();
        codes.push(answer.overall_code);
    }
    assert_eq!(codes, [OK, OK, OVER, OK, OVER]);

    // /rlconfig (and /healthcheck) on the debug port.
    let rlconfig = get(debug, "/rlconfig").await;
    assert_eq!(rlconfig.status, 200);
    assert!(
        rlconfig.body.contains(
            "edge.user: unit=DAY requests_per_unit=2, shadow_mode: false, quota_mode: false"
        ),
        "{}",
        rlconfig.body
    );
    assert!(
        rlconfig
            .body
            .contains("edge.route_r1.user: unit=DAY requests_per_unit=1"),
        "{}",
        rlconfig.body
    );
    assert_eq!(get(debug, "/healthcheck").await.status, 200);

    // The Prometheus port (`:port` = every interface) with Envoy Gateway's
    // mapping: the names and labels its dashboards query.
    let prom: SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();
    let metrics = get(prom, "/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.body;
    let user = "{domain=\"edge\",key1=\"user\"}";
    let route = "{domain=\"edge\",key1=\"route_r1\",key2=\"user\"}";
    let method = "{grpc_method=\"ShouldRateLimit\"}";
    let expected = [
        (
            format!("ratelimit_service_rate_limit_total_hits{user}"),
            3.0,
        ),
        (
            format!("ratelimit_service_rate_limit_within_limit{user}"),
            2.0,
        ),
        (
            format!("ratelimit_service_rate_limit_over_limit{user}"),
            1.0,
        ),
        (
            format!("ratelimit_service_rate_limit_near_limit{user}"),
            1.0,
        ),
        (
            format!("ratelimit_service_rate_limit_total_hits{route}"),
            2.0,
        ),
        (
            format!("ratelimit_service_rate_limit_within_limit{route}"),
            1.0,
        ),
        (
            format!("ratelimit_service_rate_limit_over_limit{route}"),
            1.0,
        ),
        (
            format!("ratelimit_service_rate_limit_near_limit{route}"),
            1.0,
        ),
        (format!("ratelimit_service_total_requests{method}"), 5.0),
        (
            format!("ratelimit_service_response_time_seconds_count{method}"),
            5.0,
        ),
        ("ratelimit_service_config_load_success".to_owned(), 1.0),
    ];
    for (series, value) in &expected {
        assert_eq!(sample(&text, series), Some(*value), "{series} in\n{text}");
    }
    assert!(
        text.contains("# TYPE ratelimit_service_response_time_seconds histogram"),
        "{text}"
    );
    assert!(
        !text.contains("shadow_mode{"),
        "a stat that never moved: {text}"
    );
    assert!(
        sample(&text, "process_resident_memory_bytes").is_some_and(|rss| rss > 0.0),
        "{text}"
    );
    assert!(
        sample(&text, "process_cpu_seconds_total").is_some(),
        "{text}"
    );
    assert!(
        sample(&text, "process_virtual_memory_bytes").is_some_and(|v| v > 0.0),
        "{text}"
    );
    assert!(
        sample(&text, "process_start_time_seconds").is_some_and(|t| t > 1e9),
        "{text}"
    );
    assert!(
        sample(&text, "process_open_fds").is_some_and(|n| n > 0.0),
        "{text}"
    );
    assert!(text.contains("# TYPE process_max_fds gauge"), "{text}");

    // The HTTP port keeps floodgate's own /metrics, process metrics too.
    let own = get(process.http, "/metrics").await.body;
    assert_eq!(
        sample(
            &own,
            "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key=\"user\"}"
        ),
        Some(3.0),
        "{own}"
    );
    assert!(
        sample(&own, "process_resident_memory_bytes").is_some(),
        "{own}"
    );
    let written = std::fs::read_dir(&work_path).unwrap().count();
    std::fs::set_permissions(&work_path, mode(0o755)).unwrap();
    assert_eq!(written, 0, "a file was written in the working directory");
    drop(process);
}

/// Counters summed over every line received, and the timer lines.
#[derive(Debug, Default)]
struct Received {
    counters: HashMap<String, u64>,
    timers: Vec<String>,
}

impl Received {
    fn add(&mut self, line: &str) {
        let Some((name, rest)) = line.split_once(':') else {
            return;
        };
        let mut parts = rest.split('|');
        let (value, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        match kind {
            "c" => {
                *self.counters.entry(name.to_owned()).or_default() += value.parse::<u64>().unwrap()
            }
            "ms" => self.timers.push(line.to_owned()),
            other => panic!("unexpected stat type {other} in {line}"),
        }
    }

    fn count(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

/// The statsd lines of the known sequence: exact names and totals.
const EXPECTED_STATSD: [(&str, u64); 9] = [
    ("ratelimit.service.rate_limit.edge.user.total_hits", 3),
    ("ratelimit.service.rate_limit.edge.user.within_limit", 2),
    ("ratelimit.service.rate_limit.edge.user.near_limit", 1),
    ("ratelimit.service.rate_limit.edge.user.over_limit", 1),
    (
        "ratelimit.service.rate_limit.edge.route_r1.user.total_hits",
        2,
    ),
    (
        "ratelimit.service.rate_limit.edge.route_r1.user.over_limit",
        1,
    ),
    ("ratelimit.service.rate_limit.ghost.domain_not_found", 1),
    ("ratelimit_server.ShouldRateLimit.total_requests", 6),
    ("ratelimit.service.config_load_success", 1),
];

/// Starts floodgate (memory store, plaintext gRPC) with `statsd_env`, and
/// runs the known sequence; returns the process (kept alive by the caller).
async fn start_and_run_sequence(statsd_env: &[(&str, String)]) -> Process {
    let dir = tempfile::tempdir().unwrap();
    // RUNTIME_APPDIRECTORY defaults to `config`.
    let rules = dir.path().join("config");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("edge.yaml"), RULES).unwrap();
    let binary = as_ratelimit(dir.path());
    let (http_port, grpc_port) = (free_port(), free_port());
    let mut env = vec![
        ("RUNTIME_ROOT", dir.path().to_string_lossy().into_owned()),
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("LOG_LEVEL", "warn".to_owned()),
    ];
    env.extend(statsd_env.iter().cloned());
    let process = Process::start(&binary, &env, http_port, dir).await;
    let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{grpc_port}"))
        .await
        .unwrap();
    let mut codes = Vec::new();
    for (domain, descriptor) in [
        ("edge", &[("user", "alice")][..]),
        ("edge", &[("user", "alice")]),
        ("edge", &[("user", "alice")]),
        ("edge", &[("route", "r1"), ("user", "bob")]),
        ("edge", &[("route", "r1"), ("user", "bob")]),
        ("ghost", &[("user", "x")]),
    ] {
        let answer = client
            .should_rate_limit(request(domain, &[descriptor]))
            .await
            .unwrap()
            .into_inner();
        codes.push(answer.overall_code);
    }
    assert_eq!(codes, [OK, OK, OVER, OK, OVER, OK]);
    process
}

/// Waits until every expected counter has arrived, then checks each total
/// is exact (a counter sent twice would overshoot) and one timer line per
/// request arrived.
fn check_received(received: &Received) -> Option<bool> {
    let arrived = EXPECTED_STATSD
        .iter()
        .all(|(name, total)| received.count(name) >= *total)
        && received.timers.len() >= 6;
    arrived.then_some(true)
}

fn assert_exact(received: &Received) {
    for (name, total) in EXPECTED_STATSD {
        assert_eq!(received.count(name), total, "{name}: {received:?}");
    }
    assert_eq!(received.timers.len(), 6, "{received:?}");
    assert!(
        received.timers.iter().all(|t| t
            .starts_with("ratelimit_server.ShouldRateLimit.response_time:")
            && t.ends_with("|ms")),
        "{received:?}"
    );
    // Stats that never moved are not sent.
    assert_eq!(
        received.count("ratelimit.service.rate_limit.edge.user.shadow_mode"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_over_udp_receives_the_reference_names() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let _process = start_and_run_sequence(&[
        ("USE_STATSD", "true".to_owned()),
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", port.to_string()),
        ("STATSD_PROTOCOL", "udp".to_owned()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_owned()),
    ])
    .await;
    let mut received = Received::default();
    let mut buf = vec![0_u8; 65_536];
    // Reads until everything arrived, for 20 s at most.
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while check_received(&received).is_none() {
            if let Ok(n) = socket.recv(&mut buf).await {
                assert!(n <= 1432, "a datagram of {n} bytes");
                let text = std::str::from_utf8(&buf[..n]).unwrap();
                text.lines().for_each(|l| received.add(l));
            }
        }
    })
    .await;
    let done = check_received(&received).is_some();
    assert!(done, "not everything arrived: {received:?}");
    assert_exact(&received);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_over_tcp_is_the_default_transport() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _process = start_and_run_sequence(&[
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", port.to_string()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_owned()),
    ])
    .await;
    let (stream, _) = tokio::time::timeout(Duration::from_secs(20), listener.accept())
        .await
        .expect("floodgate connected")
        .unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let mut received = Received::default();
    // Reads until everything arrived (or the stream ends), for 20 s at most.
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while check_received(&received).is_none() {
            match lines.next_line().await {
                Ok(Some(line)) => received.add(&line),
                _ => break,
            }
        }
    })
    .await;
    let done = check_received(&received).is_some();
    assert!(done, "not everything arrived: {received:?}");
    assert_exact(&received);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_statsd_never_hurts_answers() {
    // Nothing listens on this port (TCP, the default); flushes fail every
    // 10 ms while requests are answered.
    let dead = free_port();
    let process = start_and_run_sequence(&[
        ("USE_STATSD", "true".to_owned()),
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", dead.to_string()),
        ("STATS_FLUSH_INTERVAL", "10ms".to_owned()),
    ])
    .await;
    let http = process.http;
    let dropped = poll_until_async(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async move {
            let text = get(http, "/metrics").await.body;
            sample(&text, "ratelimit_statsd_dropped_lines_total")
                .is_some_and(|n| n > 0.0)
                .then_some(true)
        },
    )
    .await;
    assert!(dropped, "no dropped lines counted");
    // Still answering, with the right answers, after failed flushes.
    let answer = crate::support::http::post_json(
        http,
        "/json",
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("\"limitRemaining\":1"),
        "{}",
        answer.body
    );

    // statsd comes back on the same port: the next flush reconnects and
    // delivers what happened since (what was dropped stays dropped). A
    // stat that first moves now can only arrive over the new connection.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", dead))
        .await
        .unwrap();
    let answer = crate::support::http::post_json(
        http,
        "/json",
        r#"{"domain":"ghost2","descriptors":[{"entries":[{"key":"user","value":"dave"}]}]}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (stream, _) = tokio::time::timeout(Duration::from_secs(20), listener.accept())
        .await
        .expect("floodgate reconnected")
        .unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let mut received = Received::default();
    let fresh = "ratelimit.service.rate_limit.ghost2.domain_not_found";
    // Reads until the fresh stat arrived (or the stream ends), for 20 s at most.
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while received.count(fresh) < 1 {
            match lines.next_line().await {
                Ok(Some(line)) => received.add(&line),
                _ => break,
            }
        }
    })
    .await;
    assert_eq!(received.count(fresh), 1, "{received:?}");
}

/// Runs `floodgate serve` (the bundled example rules, any free ports) with
/// exactly `env` and expects it to refuse to start: exit 1 within 20 s
/// (killed otherwise); returns its stderr.
fn refused(env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("serve")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .envs([("PORT", "0"), ("GRPC_PORT", "0")])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
        child.try_wait().unwrap().map(|_| true)
    });
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn startup_refuses_two_sinks_and_a_broken_mapping() {
    let err = refused(&[
        ("USE_PROMETHEUS", "true"),
        ("USE_STATSD", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
    ]);
    assert!(err.contains("one stats sink at a time"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("conf.yaml");
    std::fs::write(&broken, "mappings:\n  - match: a.b\n    nmae: x\n").unwrap();
    let broken = broken.to_string_lossy().into_owned();
    let err = refused(&[
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("PROMETHEUS_MAPPER_YAML", &broken),
    ]);
    assert!(err.contains("PROMETHEUS_MAPPER_YAML"), "{err}");
    assert!(err.contains("unknown field `nmae`"), "{err}");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn the_reference_binary_name_serves_without_a_subcommand() {
    // Run as `ratelimit` with no subcommand and a bad setting: it takes the
    // serve path (a settings error, exit 1), not clap's usage error (2).
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(as_ratelimit(dir.path()))
        .env_clear()
        .env("STATSD_PROTOCOL", "sctp")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("STATSD_PROTOCOL"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dogstatsd_sends_tags_and_applies_mogrifiers() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let _process = start_and_run_sequence(&[
        ("USE_STATSD", "false".to_owned()),
        ("USE_DOG_STATSD", "true".to_owned()),
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", port.to_string()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_owned()),
        ("EXTRA_TAGS", "env:test".to_owned()),
        ("USE_DOG_STATSD_MOGRIFIERS", "RULE".to_owned()),
        (
            "DOG_STATSD_MOGRIFIER_RULE_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.(total_hits)$".to_owned(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_RULE_NAME",
            "ratelimit.rule.$3".to_owned(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_RULE_TAGS",
            "domain:$1,descriptor:$2".to_owned(),
        ),
    ])
    .await;
    // Over UDP (DogStatsD's transport), summed per name and tag set.
    let want = [
        (
            "ratelimit.rule.total_hits|c|#env:test,descriptor:user,domain:edge",
            3,
        ),
        (
            "ratelimit.rule.total_hits|c|#env:test,descriptor:route_r1.user,domain:edge",
            2,
        ),
        (
            "ratelimit.service.rate_limit.edge.user.over_limit|c|#env:test",
            1,
        ),
        (
            "ratelimit_server.ShouldRateLimit.total_requests|c|#env:test",
            6,
        ),
    ];
    let mut sums: HashMap<String, u64> = HashMap::new();
    let mut buf = vec![0_u8; 65_536];
    let arrived = |sums: &HashMap<String, u64>| {
        want.iter()
            .all(|(key, n)| sums.get(*key).copied().unwrap_or(0) >= *n)
    };
    // Reads until every sum arrived, for 20 s at most.
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while !arrived(&sums) {
            if let Ok(n) = socket.recv(&mut buf).await {
                for line in std::str::from_utf8(&buf[..n]).unwrap().lines() {
                    // name:value|type|#tags -> key "name|type|#tags"
                    let (name, rest) = line.split_once(':').unwrap();
                    let (value, suffix) = rest.split_once('|').unwrap();
                    if suffix.starts_with("ms") {
                        continue;
                    }
                    *sums.entry(format!("{name}|{suffix}")).or_default() +=
                        value.parse::<u64>().unwrap();
                }
            }
        }
    })
    .await;
    for (key, n) in want {
        assert_eq!(sums.get(key).copied(), Some(n), "{key} in {sums:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_with_the_built_in_mapping_at_its_path() {
    let prom_port = free_port();
    let _process = start_and_run_sequence(&[
        ("USE_PROMETHEUS", "true".to_owned()),
        ("PROMETHEUS_ADDR", format!("127.0.0.1:{prom_port}")),
        ("PROMETHEUS_PATH", "/stats/prometheus".to_owned()),
    ])
    .await;
    let prom: SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();
    assert_eq!(get(prom, "/metrics").await.status, 404);
    let answer = get(prom, "/stats/prometheus").await;
    assert_eq!(answer.status, 200);
    let text = answer.body;
    let method = "grpc_method=\"ShouldRateLimit\"";
    for (series, value) in [
        (
            "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"user\"}".to_owned(),
            3.0,
        ),
        (
            "ratelimit_service_rate_limit_over_limit{domain=\"edge\",key1=\"route_r1\",key2=\"user\"}"
                .to_owned(),
            1.0,
        ),
        (format!("ratelimit_service_total_requests{{{method}}}"), 6.0),
        // Seconds (scale 0.001): every call well under 10 s.
        (
            format!("ratelimit_service_response_time_seconds_bucket{{{method},le=\"10\"}}"),
            6.0,
        ),
        (
            format!("ratelimit_service_response_time_seconds_count{{{method}}}"),
            6.0,
        ),
        // Unmapped by the built-in mapping: its escaped statsd name.
        (
            "ratelimit_service_rate_limit_ghost_domain_not_found".to_owned(),
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), Some(value), "{series} in\n{text}");
    }
}
