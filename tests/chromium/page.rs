//! The live page (`GET /`) in a real headless browser, Debian's `chromium`
//! (`scripts/test.sh` installs it when missing): it loads with no console
//! message, the page requests nothing but 127.0.0.1, and within 3 s (of the
//! browser's virtual time) of traffic it shows the hot descriptor's value. A
//! screenshot is saved as `target/tmp/insight-page.png` (Cargo's
//! `CARGO_TARGET_TMPDIR`).

use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::http::get;
use crate::support::poll_until;
use crate::support::poll_until_async;
use floodgate::LimiterOptions;
use floodgate::SystemClock;
use floodgate::{MemoryStore, StoreKind};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const CHROMIUM: &str = "/usr/bin/chromium";
const HOT: &str = "hot-page-value";

const RULES: &str = r"
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";

/// A chromium process, killed and reaped when dropped (every path).
struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs chromium headless on `url` with `extra` flags, in its own profile
/// under `dir`, until it exits (at most 60 s); returns (stdout, stderr).
fn chromium(dir: &Path, url: &str, extra: &[String]) -> (String, String) {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium (scripts/test.sh does)"
    );
    let out = dir.join("stdout");
    let err = dir.join("stderr");
    let mut command = Command::new(CHROMIUM);
    command
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            // Nothing can leave the machine, whoever asks: every host but
            // 127.0.0.1 fails to resolve.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut browser = Browser(command.spawn().unwrap());
    let finished = poll_until(Duration::from_secs(60), Duration::from_millis(50), || {
        browser.0.try_wait().unwrap().map(|_| true)
    });
    assert!(finished, "chromium did not finish within 60 s");
    drop(browser);
    (
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    )
}

/// The page drew the hot descriptor and the browser logged no console
/// message.
fn shows_the_hot_descriptor_quietly(dom: &str, stderr: &str) {
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        dom.contains(&format!("user={HOT}")),
        "the hot descriptor is on the page:\n{dom}"
    );
}

/// Every URL the page itself asked for (requests with the page as
/// initiator, and the navigation), from chromium's net log.
fn page_requests(net_log: &Path, origin: &str) -> Vec<String> {
    let log: Value = serde_json::from_str(&std::fs::read_to_string(net_log).unwrap()).unwrap();
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].clone();
    let mut urls = Vec::new();
    for event in log["events"].as_array().unwrap() {
        if event["type"] != start_job {
            continue;
        }
        // The job's end event carries no parameters.
        let Some(url) = event["params"]["url"].as_str() else {
            continue;
        };
        let initiator = event["params"]["initiator"].as_str().unwrap_or_default();
        // Chromium's own background requests have no origin; the page's
        // navigation has none either, so it is kept by its URL.
        if initiator != "not an origin" || url.starts_with(origin) {
            urls.push(url.to_owned());
        }
        assert!(
            initiator == "not an origin" || initiator == origin,
            "a request from {initiator}: {url}"
        );
    }
    urls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_hot_descriptor_with_no_console_error_and_nothing_external() {
    let server = TestServer::start(
        index(&[("web.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions::default(),
    )
    .await;
    let origin = format!("http://{}", server.http_addr);
    // Traffic: the hot user, and a few cold ones, until the test ends (at
    // most 2,000 rounds).
    let stop = CancellationToken::new();
    let traffic = {
        let stop = stop.clone();
        let mut client = server.client().await;
        tokio::spawn(async move {
            for round in 0..2_000 {
                if stop.is_cancelled() {
                    break;
                }
                ask(&mut client, request("web", &[&[("user", HOT)]])).await;
                let cold = format!("cold-{}", round % 7);
                ask(&mut client, request("web", &[&[("user", cold.as_str())]])).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let addr = server.http_addr;
    assert!(
        poll_until_async(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || async {
                get(addr, "/top?domain=web")
                    .await
                    .body
                    .contains(HOT)
                    .then_some(true)
            }
        )
        .await,
        "traffic reached the top list"
    );

    let dir = tempfile::tempdir().unwrap();
    let net_log = dir.path().join("net.json");
    let page = format!("{origin}/");
    let (dom, stderr) = {
        let (dir, page, flags) = (
            dir.path().to_owned(),
            page.clone(),
            vec![
                format!("--log-net-log={}", net_log.display()),
                "--dump-dom".to_owned(),
            ],
        );
        tokio::task::spawn_blocking(move || chromium(&dir, &page, &flags))
            .await
            .unwrap()
    };
    shows_the_hot_descriptor_quietly(&dom, &stderr);
    assert!(
        dom.contains("most limited") && dom.contains("serving"),
        "{dom}"
    );
    // Every store rules count on, by name, and whether it is connected.
    assert!(
        dom.contains(r#"data-store="default""#) && dom.contains("store default: connected"),
        "{dom}"
    );
    // Five charts of the last 15 minutes, drawn from the server's history;
    // the request rate's has data (a peak above zero).
    for field in [
        "requests_per_second",
        "over_limit_share",
        "p99_ms",
        "store_errors_per_second",
        "shed_per_second",
    ] {
        assert!(
            dom.contains(&format!("data-field=\"{field}\"")),
            "no {field} chart:\n{dom}"
        );
    }
    let peak = dom
        .split("data-field=\"requests_per_second\"")
        .nth(1)
        .and_then(|rest| rest.split("data-peak=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .and_then(|peak| peak.parse::<f64>().ok());
    assert!(
        peak.is_some_and(|p| p > 0.0),
        "the request chart is empty:\n{dom}"
    );
    assert!(dom.contains("<rect x=\""), "no bar drawn:\n{dom}");
    let requests = page_requests(&net_log, &origin);
    assert!(
        requests
            .iter()
            .any(|u| u.ends_with("/top?domain=web&window=1m&n=10&by=hits")),
        "{requests:#?}"
    );
    for url in &requests {
        assert!(url.starts_with(&origin), "the page asked for {url}");
    }

    // Right from the first paint: with time for one refresh only, the
    // figures already show the traffic (the server keeps the history; the
    // page needs no second sample of its own).
    let first = {
        let (dir, page, flags) = (
            dir.path().join("first"),
            page.clone(),
            vec![
                "--dump-dom".to_owned(),
                "--virtual-time-budget=200".to_owned(),
            ],
        );
        std::fs::create_dir_all(&dir).unwrap();
        tokio::task::spawn_blocking(move || chromium(&dir, &page, &flags))
            .await
            .unwrap()
            .0
    };
    let rate = first
        .split("id=\"rate\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|rate| rate.parse::<f64>().ok());
    assert!(rate.is_some_and(|r| r > 0.0), "first paint:\n{first}");

    // Under the target directory, wherever CARGO_TARGET_DIR puts it.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("insight-page.png");
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let _ = std::fs::remove_file(&shot);
    {
        let (dir, page, flags) = (
            dir.path().join("shot"),
            page.clone(),
            vec![
                format!("--screenshot={}", shot.display()),
                "--window-size=1280,900".to_owned(),
            ],
        );
        std::fs::create_dir_all(&dir).unwrap();
        tokio::task::spawn_blocking(move || chromium(&dir, &page, &flags))
            .await
            .unwrap();
    }
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG"),
        "a PNG screenshot at {}",
        shot.display()
    );

    stop.cancel();
    traffic.await.unwrap();
    server.shutdown().await;
}

/// Outside the trusted networks (none here) the page opened with
/// `#token=...` keeps the token for the tab and sends it on its own
/// requests: the hot descriptor shows, with no console message (no view
/// answered 401). (Opened without one it asks with `prompt`, which headless
/// Chromium cannot answer; the views' 401 is checked over HTTP.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_opened_with_a_token_sends_it_on_its_own_requests() {
    const TOKEN: &str = "page-token-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("operator:{TOKEN}\n")).unwrap();
    let server = TestServer::start_with(
        index(&[("web.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions::default(),
        floodgate::ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            access: floodgate::AccessOptions {
                trusted_networks: Vec::new(),
                tokens_file: Some(tokens),
            },
            ..floodgate::ServeOptions::default()
        },
    )
    .await;
    let mut client = server.client().await;
    for _ in 0..20 {
        ask(&mut client, request("web", &[&[("user", HOT)]])).await;
    }
    let origin = format!("http://{}", server.http_addr);
    assert_eq!(get(server.http_addr, "/top?domain=web").await.status, 401);

    let url = format!("{origin}/#token={TOKEN}");
    let browser_dir = dir.path().to_owned();
    let (dom, stderr) = tokio::task::spawn_blocking(move || {
        chromium(&browser_dir, &url, &["--dump-dom".to_owned()])
    })
    .await
    .unwrap();
    shows_the_hot_descriptor_quietly(&dom, &stderr);
    assert!(
        !dom.contains(TOKEN),
        "the token stays out of the page:\n{dom}"
    );
    server.shutdown().await;
}
