//! Test harness shared by the integration tests: real servers on free
//! loopback ports, started and stopped by each test.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod backends;
pub mod envoy;
pub mod floodgate;
pub mod grpc;
pub mod h2raw;
pub mod http;
pub mod memcached;
pub mod otlp;
pub mod proxy;
pub mod redis;
pub mod rlqs;
pub mod tls;
pub mod wan;
pub mod xds;

use std::future::Future;
use std::net::TcpListener;
use std::sync::Once;
use std::time::{Duration, Instant};

/// A port free on 127.0.0.1 now (the OS picks it; a test binds it soon
/// after, and launchers retry on the rare collision).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `sig` (`-STOP`, `-TERM`, …) to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Freezes process `pid` (SIGSTOP): its connections stay open, nothing is
/// answered. Returns once the kernel shows it stopped: the signal lands a
/// moment after `kill` returns, and a request sent in between may still be
/// served.
pub fn freeze(pid: u32) {
    signal(pid, "-STOP");
    let stat = format!("/proc/{pid}/stat");
    for _ in 0..500 {
        let text = std::fs::read_to_string(&stat).unwrap_or_default();
        // `pid (comm) state …`: the state follows the last `)`.
        let state = text.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        if state.is_some_and(|rest| rest.starts_with('T')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("process {pid} did not stop");
}

/// Installs a test-writer tracing subscriber once per test binary.
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

/// The one wait loop of the harness: asks `check` every `every` until it
/// answers `Some(done)` (returned) or `within` passes (`false`). Bounded in
/// time, and in count by `within / every`.
pub fn poll_until(
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<bool>,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if let Some(done) = check() {
            return done;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// [`poll_until`] for async checks, sleeping on the runtime.
pub async fn poll_until_async<F, Fut>(within: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<bool>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(done) = check().await {
            return done;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll_until_async`] for a yes/no check, every 50 ms for at most
/// `within`; panics naming `what` when it never says yes.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let done = poll_until_async(within, Duration::from_millis(50), || {
        let check = check();
        async move { check.await.then_some(true) }
    })
    .await;
    assert!(done, "timed out waiting for {what}");
}
