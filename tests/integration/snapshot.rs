//! The embedded store's snapshot, through the floodgate binary: counters of
//! every algorithm continue across SIGTERM; SIGKILL loses the hits of the
//! last interval only; a file that is not a snapshot stops the start with
//! an error naming it; a snapshot taken under other rules is read back
//! harmlessly; a call answered during the drain is in the last snapshot;
//! under a smaller byte budget the most recently used counters come back.

use crate::support::grpc::request;
use crate::support::{free_port, poll_until, poll_until_async};
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

/// Day-long windows: a test never crosses one (the binary reads the real
/// clock).
const RULES: &str = r"
domain: snap
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: sliding
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: sliding_window}
  - key: log
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: sliding_log}
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: gcra}
  - key: lru
    rate_limit: {unit: day, requests_per_unit: 10}
";

const KEYS: [&str; 4] = ["fixed", "sliding", "log", "gcra"];

/// One floodgate process on the embedded store with a snapshot file.
struct Floodgate {
    child: Child,
    grpc_port: u16,
    http_port: u16,
}

impl Floodgate {
    fn spawn(rules: &Path, snapshot: &Path, interval: &str) -> Child {
        Self::command(rules, snapshot, interval, free_port(), free_port())
            .spawn()
            .unwrap()
    }

    fn command(
        rules: &Path,
        snapshot: &Path,
        interval: &str,
        grpc_port: u16,
        http_port: u16,
    ) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        command
            .args(["serve", "--config-dir"])
            .arg(rules)
            .env_clear()
            .env("GRPC_PORT", grpc_port.to_string())
            .env("PORT", http_port.to_string())
            .env("USE_STATSD", "false")
            .env("LOG_LEVEL", "info")
            .env("MEMORY_STORE_SNAPSHOT_PATH", snapshot)
            .env("MEMORY_STORE_SNAPSHOT_INTERVAL", interval)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    /// Starts floodgate and waits until it answers.
    async fn start(rules: &Path, snapshot: &Path, interval: &str) -> Self {
        Self::start_with(rules, snapshot, interval, &[]).await
    }

    /// [`Floodgate::start`] with more environment variables.
    async fn start_with(
        rules: &Path,
        snapshot: &Path,
        interval: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let (grpc_port, http_port) = (free_port(), free_port());
        let child = Self::command(rules, snapshot, interval, grpc_port, http_port)
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let mut floodgate = Self {
            child,
            grpc_port,
            http_port,
        };
        let answered = poll_until_async(Duration::from_secs(20), Duration::from_millis(50), || {
            let exited = floodgate.child.try_wait().unwrap().is_some();
            assert!(!exited, "floodgate exited at start");
            let port = floodgate.grpc_port;
            async move {
                let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
                    .unwrap()
                    .connect()
                    .await
                    .ok()?;
                RateLimitServiceClient::new(channel)
                    .should_rate_limit(request("snap", &[&[("none", "x")]]))
                    .await
                    .ok()
                    .map(|_| true)
            }
        })
        .await;
        assert!(answered, "floodgate never answered");
        floodgate
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{}", self.grpc_port))
            .unwrap()
            .connect()
            .await
            .unwrap();
        RateLimitServiceClient::new(channel)
    }

    /// `hits` hits on `key=v` (a check when 0).
    async fn hit(&self, key: &str, hits: u64) -> RateLimitResponse {
        hit_on(&mut self.client().await, key, "v", hits).await
    }

    /// What remains of each rule's limit, checked without counting.
    async fn remaining(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for key in KEYS {
            let r = self.hit(key, 0).await;
            out.push(r.statuses[0].limit_remaining);
        }
        out
    }

    /// Snapshots written so far (`/metrics`).
    fn snapshots_written(&self) -> u64 {
        let text = http_get(self.http_port, "/metrics").unwrap_or_default();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("ratelimit_memory_store_snapshot_writes_total{result=\"ok\"} ")
            })
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// A gauge of `/metrics` (0 when absent).
    fn gauge(&self, name: &str) -> u64 {
        let text = http_get(self.http_port, "/metrics").unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGTERM, then waits for the exit; returns stderr.
    fn terminate(self) -> String {
        self.signal("-TERM")
    }

    /// SIGKILL: no chance to write anything.
    fn kill(self) -> String {
        self.signal("-KILL")
    }

    fn signal(self, sig: &str) -> String {
        self.send(sig);
        self.wait_exit(sig)
    }

    /// Sends `sig` and returns at once.
    fn send(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit after `sig`; returns stderr (what was not taken).
    fn wait_exit(mut self, sig: &str) -> String {
        let exited = poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
            self.child.try_wait().unwrap().map(|_| true)
        });
        if !exited {
            let _ = self.child.kill();
        }
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        let stderr = {
            use std::io::Read as _;
            let mut text = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut text);
            }
            text
        };
        let _ = child.wait();
        assert!(exited, "floodgate did not exit on {sig}: {stderr}");
        stderr
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hits` hits on `key=value` through `client` (a check when 0).
async fn hit_on(
    client: &mut RateLimitServiceClient<Channel>,
    key: &str,
    value: &str,
    hits: u64,
) -> RateLimitResponse {
    let mut req = request("snap", &[&[(key, value)]]);
    req.descriptors[0].hits_addend = Some(hits);
    client.should_rate_limit(req).await.unwrap().into_inner()
}

fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    crate::support::http::get_blocking(port, path)
}

fn rules_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("snap.yaml"), text).unwrap();
    dir
}

fn snapshot_file(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("counters.snap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_of_every_algorithm_continue_across_sigterm() {
    let rules = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    // An interval longer than the test: only the shutdown write counts.
    let first = Floodgate::start(rules.path(), &file, "1h").await;
    assert_eq!(first.remaining().await, [10, 10, 10, 10]);
    for key in KEYS {
        for _ in 0..4 {
            assert_eq!(first.hit(key, 1).await.overall_code, Code::Ok as i32);
        }
    }
    assert_eq!(first.remaining().await, [6, 6, 6, 6]);
    let stderr = first.terminate();
    assert!(
        stderr.contains("memory store snapshot written at shutdown"),
        "{stderr}"
    );

    let second = Floodgate::start(rules.path(), &file, "1h").await;
    assert_eq!(second.remaining().await, [6, 6, 6, 6], "counters continue");
    for key in KEYS {
        let r = second.hit(key, 1).await;
        assert_eq!(r.statuses[0].limit_remaining, 5, "{key}");
    }
    // Used up across the restart: the eleventh hit is refused.
    for key in KEYS {
        for _ in 0..5 {
            second.hit(key, 1).await;
        }
        assert_eq!(
            second.hit(key, 1).await.overall_code,
            Code::OverLimit as i32,
            "{key}"
        );
    }
    second.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_only_the_hits_since_the_last_write() {
    let rules = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    // Written every 100 ms: hits followed by a write survive a SIGKILL.
    let first = Floodgate::start(rules.path(), &file, "100ms").await;
    for key in KEYS {
        for _ in 0..3 {
            first.hit(key, 1).await;
        }
    }
    let seen = first.snapshots_written();
    let written = poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
        (first.snapshots_written() >= seen + 2).then_some(true)
    });
    assert!(written, "no snapshot written after the hits");
    first.kill();
    // Written only at shutdown (an hour's interval): a SIGKILL loses every
    // hit since the start, the last interval, and nothing before it.
    let second = Floodgate::start(rules.path(), &file, "1h").await;
    assert_eq!(second.remaining().await, [7, 7, 7, 7]);
    for key in KEYS {
        second.hit(key, 1).await;
        second.hit(key, 1).await;
    }
    assert_eq!(second.remaining().await, [5, 5, 5, 5]);
    second.kill();
    let third = Floodgate::start(rules.path(), &file, "1h").await;
    assert_eq!(third.remaining().await, [7, 7, 7, 7]);
    third.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_snapshot_stops_the_start_naming_it() {
    let rules = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    std::fs::write(&file, b"{\"not\": \"a snapshot\"}").unwrap();
    let child = Floodgate::spawn(rules.path(), &file, "1s");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("is not a floodgate snapshot"), "{stderr}");
    // The file is left as it was, for the operator to look at.
    assert_eq!(std::fs::read(&file).unwrap(), b"{\"not\": \"a snapshot\"}");
    // A snapshot cut short (a disk that filled up under another tool).
    let good = Floodgate::start(rules.path(), &file.with_extension("good"), "1h").await;
    good.hit("fixed", 1).await;
    good.terminate();
    let bytes = std::fs::read(file.with_extension("good")).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let out = Floodgate::spawn(rules.path(), &file, "1s")
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("checksum does not match"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_under_other_rules_is_read_back_harmlessly() {
    let before = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    let first = Floodgate::start(before.path(), &file, "1h").await;
    for key in KEYS {
        for _ in 0..4 {
            first.hit(key, 1).await;
        }
    }
    first.terminate();
    // The new rules: `fixed` now allows 3 a day (its 4 hits are over it),
    // `log` is gone, `fresh` is new.
    let after = rules_dir(
        r"
domain: snap
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: sliding
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: sliding_window}
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: gcra}
  - key: fresh
    rate_limit: {unit: day, requests_per_unit: 2}
",
    );
    let second = Floodgate::start(after.path(), &file, "1h").await;
    let fixed = second.hit("fixed", 1).await;
    assert_eq!(fixed.overall_code, Code::OverLimit as i32);
    assert_eq!(
        second.hit("sliding", 0).await.statuses[0].limit_remaining,
        6
    );
    assert_eq!(second.hit("gcra", 0).await.statuses[0].limit_remaining, 6);
    let log = second.hit("log", 1).await;
    assert_eq!(log.overall_code, Code::Ok as i32);
    assert!(log.statuses[0].current_limit.is_none(), "no rule, no limit");
    let fresh = second.hit("fresh", 1).await;
    assert_eq!(fresh.statuses[0].limit_remaining, 1);
    second.terminate();
}

/// The lines floodgate writes to stderr, read as they come.
fn stderr_lines(floodgate: &mut Floodgate) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let stderr = floodgate.child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Ends when floodgate exits (end of the pipe).
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most 20 s) for a line containing `text`.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, text: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                if line.contains(text) {
                    return;
                }
                seen.push(line);
            }
            Err(_) => break,
        }
    }
    panic!("no line with {text:?} in {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_during_the_drain_is_in_the_last_snapshot() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rules = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    let mut first = Floodgate::start(rules.path(), &file, "1h").await;
    for _ in 0..3 {
        first.hit("fixed", 1).await;
    }
    let lines = stderr_lines(&mut first);
    // A `POST /json` whose handler is reading its body: hyper answers
    // `100 Continue` when the body is first read, so the call is in flight
    // before the signal.
    let body = r#"{"domain":"snap","descriptors":[{"entries":[{"key":"fixed","value":"v"}]}]}"#;
    let mut call = tokio::net::TcpStream::connect(("127.0.0.1", first.http_port))
        .await
        .unwrap();
    let head = format!(
        "POST /json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    call.write_all(head.as_bytes()).await.unwrap();
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        call.read_exact(&mut byte).await.unwrap();
        interim.push(byte[0]);
    }
    assert!(
        interim.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&interim)
    );
    let (sent, rest) = body.split_at(body.len() / 2);
    call.write_all(sent.as_bytes()).await.unwrap();
    first.send("-TERM");
    // The rest of the body only once the drain has begun.
    wait_for_line(&lines, "shutdown started");
    call.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = String::new();
    call.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""limitRemaining":6"#), "{answer}");
    wait_for_line(&lines, "memory store snapshot written at shutdown");
    first.wait_exit("-TERM");

    // The drained call was counted: after the restart 4 of 10 are used.
    let second = Floodgate::start(rules.path(), &file, "1h").await;
    assert_eq!(second.hit("fixed", 0).await.statuses[0].limit_remaining, 6);
    assert_eq!(second.hit("fixed", 1).await.statuses[0].limit_remaining, 5);
    second.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_smaller_budget_the_most_recently_used_counters_come_back() {
    const COLD: usize = 1_000;
    const HOT: usize = 20;
    let rules = rules_dir(RULES);
    let data = tempfile::tempdir().unwrap();
    let file = snapshot_file(&data);
    let first = Floodgate::start(rules.path(), &file, "1h").await;
    let mut client = first.client().await;
    for i in 0..COLD {
        hit_on(&mut client, "lru", &format!("cold-{i}"), 1).await;
    }
    for i in 0..HOT {
        hit_on(&mut client, "lru", &format!("hot-{i}"), 2).await;
    }
    let bytes_per_counter = first.gauge("ratelimit_memory_store_bytes") / (COLD + HOT) as u64;
    drop(client);
    first.terminate();

    // A budget of about 6 counters a shard (64 shards): about 400 of the
    // 1020 fit. The 20 hot ones are the most recently used: every one
    // comes back, whichever shards they land in (7 of 20 in one shard of
    // 64 has odds of about one in a million).
    let budget = (64 * 13 * bytes_per_counter / 2).to_string();
    let second = Floodgate::start_with(
        rules.path(),
        &file,
        "1h",
        &[("MEMORY_STORE_MAX_BYTES", budget.as_str())],
    )
    .await;
    let kept = second.gauge("ratelimit_memory_store_counters");
    assert!(kept > 0 && kept < 600, "{kept} counters kept");
    let mut client = second.client().await;
    for i in 0..HOT {
        let r = hit_on(&mut client, "lru", &format!("hot-{i}"), 0).await;
        assert_eq!(r.statuses[0].limit_remaining, 8, "hot-{i} was dropped");
    }
    drop(client);
    let stderr = second.terminate();
    let read = stderr
        .lines()
        .find(|l| l.contains("memory store snapshot read"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(read.contains(&format!("counters={kept}")), "{read}");
    let dropped = COLD + HOT - usize::try_from(kept).unwrap();
    assert!(read.contains(&format!("dropped={dropped}")), "{read}");
}
