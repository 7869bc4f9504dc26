//! The binary as a user runs it: `check-config`, and `serve` from start to a
//! graceful SIGTERM exit.

use crate::support::{free_port, poll_until};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn floodgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// `floodgate serve` on ports the OS picks, with the rules in `dir`.
pub(crate) fn serve_on_any_port(dir: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = floodgate();
    command
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--config-dir",
        ])
        .arg(dir);
    command
}

pub(crate) fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn check_config_summarises_the_examples() {
    let out = floodgate()
        .arg("check-config")
        .arg(repo("examples/config"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("domain 'edge'"), "{stdout}");
    assert!(stdout.contains("domain 'rl'"), "{stdout}");
}

#[test]
fn check_config_reports_every_error_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n  - key: ''\n",
    )
    .unwrap();
    let out = floodgate()
        .arg("check-config")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    assert!(
        stderr.contains("invalid rate limit unit 'minutes'"),
        "{stderr}"
    );
    assert!(stderr.contains("descriptor has empty key"), "{stderr}");
}

#[test]
fn serve_refuses_a_bad_rule_file_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("typo.yaml"),
        "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {}\n",
    )
    .unwrap();
    let out = serve_on_any_port(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("unknown key 'ratelimit'"), "{stderr}");
}

#[test]
fn usage_errors_exit_2() {
    let out = floodgate()
        .args(["serve", "--store", "postgres"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_answers_health_then_exits_cleanly_on_sigterm() {
    let http_port = free_port();
    let grpc_port = free_port();
    let mut child = floodgate()
        .arg("serve")
        .current_dir(repo(""))
        .env_clear()
        .env("GRPC_PORT", grpc_port.to_string())
        .env("PORT", http_port.to_string())
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut healthy = String::new();
    let answered = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "floodgate exited early"
        );
        healthy = http_get(http_port, "/healthcheck").ok()?;
        Some(true)
    });
    assert!(answered, "floodgate did not become healthy");
    assert!(healthy.starts_with("HTTP/1.1 200"), "{healthy}");
    // The initial load counts as a successful load, as in the reference;
    // the embedded store reports its budget.
    let metrics = http_get(http_port, "/metrics").unwrap();
    assert!(
        metrics.contains("\nratelimit_service_config_load_success 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nratelimit_memory_store_max_bytes 134217728\n"),
        "{metrics}"
    );

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        exit = child.try_wait().unwrap();
        exit.map(|_| true)
    });
    let Some(exit) = exit else {
        child.kill().unwrap();
        panic!("floodgate did not exit after SIGTERM");
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(exit.success(), "{stderr}");
    assert!(stderr.contains("shutdown complete"), "{stderr}");
}

fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    crate::support::http::get_blocking(port, path)
}

#[test]
fn serve_with_an_unreadable_tls_certificate_exits_1() {
    let out = &mut floodgate();
    out.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-server-use-tls",
        "--grpc-server-tls-cert",
        "/nonexistent/tls.crt",
        "--grpc-server-tls-key",
        "/nonexistent/tls.key",
        "--config-dir",
    ])
    .arg(repo("examples/config"));
    exits_1_saying(
        out,
        "cannot set up grpc tls: cannot read tls certificate file /nonexistent/tls.crt",
    );
}

/// Runs `command`: it must exit 1 with `says` in its error output, which
/// is returned.
fn exits_1_saying(command: &mut Command, says: &str) -> String {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
    stderr
}

#[test]
fn kubernetes_configmap_rules_are_valid() {
    // The rule files the Kustomize base turns into the ConfigMap.
    let rules = repo("deploy/kubernetes/base/rules");
    assert!(
        std::fs::read_dir(&rules).unwrap().count() > 0,
        "no rule file in {}",
        rules.display()
    );
    let out = floodgate()
        .arg("check-config")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first command of the README on a machine with no statsd (the
/// reference's default `USE_STATSD=true`): one info line saying what to
/// set, no warning.
#[test]
fn a_first_start_without_statsd_says_what_to_set_and_warns_nothing() {
    let http_port = free_port();
    let child = floodgate()
        .arg("serve")
        .current_dir(repo(""))
        .env_clear()
        .env("GRPC_PORT", free_port().to_string())
        .env("PORT", http_port.to_string())
        .env("STATSD_PORT", free_port().to_string())
        .env("STATS_FLUSH_INTERVAL", "50ms")
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        http_get(http_port, "/healthcheck").ok().map(|_| true)
    });
    assert!(up, "floodgate did not become healthy");
    // Several flushes fail meanwhile (every 50 ms).
    let flushed = poll_until(Duration::from_secs(10), Duration::from_millis(50), || {
        http_get(http_port, "/metrics")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("ratelimit_statsd_dropped_lines_total "))
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .filter(|&n| n > 0)
            .map(|_| true)
    });
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(flushed, "no statsd flush was dropped: {stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert_eq!(
        stderr.matches("USE_STATSD=false").count(),
        1,
        "one line says what to set: {stderr}"
    );
}

/// Run as `ratelimit` (Envoy Gateway's `/bin/ratelimit`), the binary serves
/// without a subcommand, and every subcommand still runs as itself: the
/// rewrite used to know only `serve`, `check-config` and `help`, so
/// `ratelimit explain ...` served.
#[test]
fn run_as_ratelimit_every_subcommand_runs_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &link).unwrap();
    let out = Command::new(&link)
        .args(["explain", "--config-dir"])
        .arg(repo("examples/config"))
        .arg(
            r#"{"domain":"rl","descriptors":[{"entries":[{"key":"category","value":"account"}]}]}"#,
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"overallCode\""), "{stdout}");
    let out = Command::new(&link)
        .arg("check-config")
        .arg(repo("examples/config"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("domain 'rl'"), "{stdout}");
    let out = Command::new(&link).arg("--version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("floodgate "),
        "{out:?}"
    );
}

/// `REDIS_STARTUP_MAX_ELAPSED_TIME`: a Redis that never answers stops the
/// process once the time is up (exit 1, the error says why), as the
/// reference gives up; nothing listens on the port, so no redis-server is
/// needed.
#[test]
fn a_redis_never_reached_stops_the_process_after_the_startup_time() {
    let nothing_there = free_port();
    let mut child = serve_on_any_port(repo("examples/config"))
        .env_clear()
        .env("BACKEND_TYPE", "redis")
        .env("REDIS_URL", format!("127.0.0.1:{nothing_there}"))
        .env("REDIS_STARTUP_INITIAL_INTERVAL", "50ms")
        .env("REDIS_STARTUP_MAX_INTERVAL", "200ms")
        .env("REDIS_STARTUP_MAX_ELAPSED_TIME", "1s")
        .env("LOG_LEVEL", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        child.try_wait().unwrap().map(|_| true)
    });
    if !exited {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        exited,
        "still running 20 s after a 1 s startup limit: {stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("REDIS_STARTUP_MAX_ELAPSED_TIME"),
        "{stderr}"
    );
}

/// A duration Go's `time.ParseDuration` refuses stops `serve` before it
/// binds, the error naming the variable and why.
#[test]
fn a_duration_go_refuses_stops_serve_naming_the_variable() {
    exits_1_saying(
        serve_on_any_port(repo("examples/config"))
            .env_clear()
            .env("BACKEND_TYPE", "redis")
            .env("REDIS_TIMEOUT", "1d"),
        "environment variable REDIS_TIMEOUT='1d' is not a duration floodgate takes: unknown unit 'd'",
    );
}

/// `floodgate serve` with `flag` naming a file holding `content`: it
/// exits 1, and its error names the file (`says` of its path); the log.
fn refused_at_start(
    flag: &str,
    content: &str,
    says: impl Fn(&std::path::Path) -> String,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, content).unwrap();
    exits_1_saying(
        serve_on_any_port(repo("examples/config"))
            .arg(flag)
            .arg(&file)
            .env_clear(),
        &says(&file),
    )
}

#[test]
fn a_bad_tokens_file_is_a_start_error_naming_file_and_line() {
    let stderr = refused_at_start(
        "--admin-tokens-file",
        "alice:alice-token-0123456789\nalice:bob-token-abcdefghijklm\n",
        |file| {
            format!(
                "admin tokens file {}, line 2: the name is given twice",
                file.display()
            )
        },
    );
    assert!(!stderr.contains("-token-"), "{stderr}");
}

#[test]
fn a_short_redaction_key_is_a_start_error() {
    refused_at_start("--redact-key-file", "too short\n", |file| {
        format!(
            "redaction key file {} holds 9 bytes, fewer than 32",
            file.display()
        )
    });
}
