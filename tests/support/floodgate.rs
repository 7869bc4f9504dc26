//! A `floodgate serve` process on free ports with the `edge` rules, for
//! tests that need the binary as users run it.

use super::free_port;
use super::poll_until_async;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The rules every [`Floodgate`] serves (domain `edge`).
pub const RULES: &str = r"
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 10000, algorithm: sliding_log}
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: cold
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: leased
    rate_limit: {unit: minute, requests_per_unit: 1000, lease: true}
";

/// Sends a raw HTTP/1.1 request with `body`; the status, or `None` when the
/// connection closed without one.
pub async fn raw_http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&raw);
    text.split(' ').nth(1)?.parse().ok()
}

/// Sends a raw HTTP/1.1 request with `body`; the status and the body.
pub async fn http_text(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// Resident memory of `pid`, in KiB, from /proc.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A `floodgate serve` process on free ports, stopped (SIGTERM, then
/// checked) by [`Floodgate::stop`] or killed when dropped.
pub struct Floodgate {
    child: std::process::Child,
    grpc_port: u16,
    /// The HTTP listener (`/json`, floodgate's own `/metrics`).
    pub http: SocketAddr,
    /// The Prometheus listener (the reference's series).
    pub metrics: SocketAddr,
    rules: tempfile::TempDir,
}

impl Floodgate {
    pub async fn start(env: &[(&str, String)]) -> Self {
        Self::start_with(&[("edge.yaml", RULES)], env, None).await
    }

    /// A process serving `rules` (one rule file, `edge.yaml`) instead of
    /// [`RULES`].
    pub async fn start_with_rules(rules_yaml: &str, env: &[(&str, String)]) -> Self {
        Self::start_with(&[("edge.yaml", rules_yaml)], env, None).await
    }

    /// [`Floodgate::start`], its log (stderr) written to `log`.
    pub async fn start_logged(env: &[(&str, String)], log: std::fs::File) -> Self {
        Self::start_with(&[("edge.yaml", RULES)], env, Some(log)).await
    }

    /// Serves the rule `files` (name, YAML), with `env`, its log (stderr)
    /// written to `log` if given.
    pub async fn start_with(
        files: &[(&str, &str)],
        env: &[(&str, String)],
        log: Option<std::fs::File>,
    ) -> Self {
        let rules = tempfile::tempdir().unwrap();
        for (name, yaml) in files {
            std::fs::write(rules.path().join(name), yaml).unwrap();
        }
        // A port picked free may be taken before the child binds it (by
        // another test's process, several binaries running at once): the
        // child then exits, and another server may even answer on it. So
        // the child must still run once healthy; if not, new ports. Every
        // attempt writes to the log, a retry after the one that failed.
        let mut attempts = 0;
        let (child, grpc_port, http, metrics_port) = loop {
            attempts += 1;
            let (grpc_port, http_port, metrics_port) = (free_port(), free_port(), free_port());
            let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
            command
                .arg("serve")
                .arg("--config-dir")
                .arg(rules.path())
                .env_clear()
                .env("GRPC_HOST", "127.0.0.1")
                .env("GRPC_PORT", grpc_port.to_string())
                .env("HOST", "127.0.0.1")
                .env("PORT", http_port.to_string())
                .env("USE_PROMETHEUS", "true")
                .env("PROMETHEUS_ADDR", format!("127.0.0.1:{metrics_port}"))
                .env("LOG_LEVEL", "warn")
                .stdout(Stdio::null())
                .stderr(
                    log.as_ref()
                        .map_or_else(Stdio::null, |log| log.try_clone().unwrap().into()),
                );
            for (key, value) in env {
                command.env(key, value);
            }
            let mut child = command.spawn().unwrap();
            let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
            let healthy =
                poll_until_async(Duration::from_secs(20), Duration::from_millis(50), || {
                    let exited = child.try_wait().unwrap().is_some();
                    async move {
                        if exited {
                            return Some(false);
                        }
                        (raw_http(http, "GET", "/healthcheck", b"").await == Some(200))
                            .then_some(true)
                    }
                })
                .await;
            let running = child.try_wait().unwrap().is_none();
            if healthy && running {
                break (child, grpc_port, http, metrics_port);
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(
                attempts < 3,
                "not healthy (healthy: {healthy}, running: {running})"
            );
        };
        Self {
            child,
            grpc_port,
            http,
            metrics: format!("127.0.0.1:{metrics_port}").parse().unwrap(),
            rules,
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", self.grpc_port))
            .await
            .unwrap()
    }

    /// The answer for one descriptor of one entry `(key, value)` in
    /// `domain` (one hit counted): its limit, the limit's unit and the
    /// hits remaining.
    pub async fn limit_of(&self, domain: &str, entry: (&str, &str)) -> (u32, i32, u32) {
        let mut client = self.client().await;
        let answer = client
            .should_rate_limit(super::grpc::request(domain, &[&[entry]]))
            .await
            .unwrap()
            .into_inner();
        let status = &answer.statuses[0];
        let limit = status.current_limit.as_ref().unwrap();
        (limit.requests_per_unit, limit.unit, status.limit_remaining)
    }

    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.grpc_port))
    }

    /// The rule directory it serves.
    pub fn rules_dir(&self) -> &std::path::Path {
        self.rules.path()
    }

    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// SIGTERM, and the process must exit within 20 s.
    pub async fn stop(mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        // Waits on the runtime, not the thread: the test's own connections
        // must keep being served and closed meanwhile, or the server sits
        // out its whole shutdown grace period.
        let child = &mut self.child;
        let stopped = poll_until_async(Duration::from_secs(20), Duration::from_millis(50), || {
            let exited = child.try_wait().unwrap().is_some();
            async move { exited.then_some(true) }
        })
        .await;
        assert!(stopped, "did not stop on SIGTERM");
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
