//! Rule reload through a running server: the rule directory is a tempdir,
//! changed while the server answers; every wait polls with a deadline.

use crate::support::grpc::{TestServer, ask, request};
use crate::support::http;
use floodgate::LimiterOptions;
use floodgate::ReloadStats;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate::{LoadOptions, load_dir};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use floodgate::{ReloadOptions, ServeOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const DOMAIN_A: &str = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";
const DOMAIN_A_TIGHTER: &str = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";
const DOMAIN_B: &str =
    "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n";

struct Reloading {
    server: TestServer,
    stats: Arc<ReloadStats>,
}

async fn start(dir: &Path, load: LoadOptions, healthy_only_with_rules: bool) -> Reloading {
    // Options first: they fingerprint the directory the index is loaded from.
    let reload = ReloadOptions::new(dir.to_path_buf(), load);
    let index = load_dir(dir, &reload.load).unwrap();
    let stats = reload.stats.clone();
    let server = TestServer::start_with(
        index,
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_000))),
        LimiterOptions::default(),
        ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            healthy_only_with_rules,
            reload: Some(reload),
            ..ServeOptions::default()
        },
    )
    .await;
    Reloading { server, stats }
}

/// Requests per unit of the limit applied to `domain` / `k=v` (`None`: no
/// limit). Asking with `hits_addend` 0 counts nothing.
async fn limit_of(server: &TestServer, domain: &str, key: &str) -> Option<u32> {
    let mut client = server.client().await;
    let mut req = request(domain, &[&[(key, "v")]]);
    req.descriptors[0].hits_addend = Some(0);
    let r: RateLimitResponse = ask(&mut client, req).await;
    r.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

fn write(dir: &Path, name: &str, text: &str) {
    // Write then rename, as editors and config tools do, so the server never
    // reads half a file.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn rules_dir() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    (root, dir)
}

fn skip_dotfiles() -> LoadOptions {
    LoadOptions {
        ignore_dotfiles: true,
        ..LoadOptions::default()
    }
}

#[tokio::test]
async fn added_file_serves_its_domain() {
    let (_root, dir) = rules_dir();
    write(&dir, "a.yaml", DOMAIN_A);
    let s = start(&dir, skip_dotfiles(), false).await;
    assert_eq!(limit_of(&s.server, "b", "k").await, None);

    write(&dir, "b.yaml", DOMAIN_B);
    crate::support::wait_until("domain b", Duration::from_secs(10), || async {
        limit_of(&s.server, "b", "k").await == Some(7)
    })
    .await;
    assert_eq!(limit_of(&s.server, "a", "k").await, Some(5));
    assert!(s.stats.success() >= 1);
    assert_eq!(s.stats.error(), 0);
    s.server.shutdown().await;
}

#[tokio::test]
async fn modified_limit_applies_and_other_counters_survive() {
    let (_root, dir) = rules_dir();
    write(&dir, "a.yaml", DOMAIN_A);
    let s = start(&dir, skip_dotfiles(), false).await;
    let mut client = s.server.client().await;
    for _ in 0..3 {
        ask(&mut client, request("a", &[&[("other", "v")]])).await;
    }

    write(&dir, "a.yaml", DOMAIN_A_TIGHTER);
    crate::support::wait_until("the tighter limit", Duration::from_secs(10), || async {
        limit_of(&s.server, "a", "k").await == Some(2)
    })
    .await;
    // The unchanged rule kept its count: 3 hits taken before the reload.
    let r = ask(&mut client, request("a", &[&[("other", "v")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 6);
    s.server.shutdown().await;
}

#[tokio::test]
async fn deleted_file_makes_its_domain_unknown() {
    let (_root, dir) = rules_dir();
    write(&dir, "a.yaml", DOMAIN_A);
    write(&dir, "b.yaml", DOMAIN_B);
    let s = start(&dir, skip_dotfiles(), false).await;
    assert_eq!(limit_of(&s.server, "b", "k").await, Some(7));

    std::fs::remove_file(dir.join("b.yaml")).unwrap();
    crate::support::wait_until("domain b to go", Duration::from_secs(10), || async {
        limit_of(&s.server, "b", "k").await.is_none()
    })
    .await;
    assert_eq!(limit_of(&s.server, "a", "k").await, Some(5));
    s.server.shutdown().await;
}

#[tokio::test]
async fn invalid_file_keeps_the_last_good_rules_and_counts_an_error() {
    let (_root, dir) = rules_dir();
    write(&dir, "a.yaml", DOMAIN_A);
    let s = start(&dir, skip_dotfiles(), false).await;

    write(
        &dir,
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n",
    );
    crate::support::wait_until("a reload error", Duration::from_secs(10), || async {
        s.stats.error() >= 1
    })
    .await;
    assert_eq!(limit_of(&s.server, "a", "k").await, Some(5));
    assert_eq!(s.stats.success(), 0);

    // Fixing the file reloads it.
    write(&dir, "a.yaml", DOMAIN_A_TIGHTER);
    crate::support::wait_until("the fixed rules", Duration::from_secs(10), || async {
        limit_of(&s.server, "a", "k").await == Some(2)
    })
    .await;
    assert_eq!(s.stats.success(), 1);
    s.server.shutdown().await;
}

#[cfg(unix)]
#[tokio::test]
async fn configmap_symlink_swap_reloads() {
    use std::os::unix::fs::symlink;

    // The layout kubelet writes for a ConfigMap volume:
    //   ..2026_01/a.yaml, ..data -> ..2026_01, a.yaml -> ..data/a.yaml
    let (_root, dir) = rules_dir();
    std::fs::create_dir(dir.join("..2026_01")).unwrap();
    std::fs::write(dir.join("..2026_01/a.yaml"), DOMAIN_A).unwrap();
    symlink("..2026_01", dir.join("..data")).unwrap();
    symlink("..data/a.yaml", dir.join("a.yaml")).unwrap();
    let s = start(&dir, skip_dotfiles(), false).await;
    assert_eq!(limit_of(&s.server, "a", "k").await, Some(5));

    // An update: a new timestamped directory, then an atomic rename of a
    // fresh `..data` symlink over the old one, then links for new files.
    std::fs::create_dir(dir.join("..2026_02")).unwrap();
    std::fs::write(dir.join("..2026_02/a.yaml"), DOMAIN_A_TIGHTER).unwrap();
    std::fs::write(dir.join("..2026_02/b.yaml"), DOMAIN_B).unwrap();
    symlink("..2026_02", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    symlink("..data/b.yaml", dir.join("b.yaml")).unwrap();
    std::fs::remove_dir_all(dir.join("..2026_01")).unwrap();

    crate::support::wait_until("the swapped rules", Duration::from_secs(10), || async {
        limit_of(&s.server, "a", "k").await == Some(2)
            && limit_of(&s.server, "b", "k").await == Some(7)
    })
    .await;
    assert_eq!(s.stats.error(), 0);
    s.server.shutdown().await;
}

#[tokio::test]
async fn health_follows_rules_when_at_least_one_config_is_required() {
    let (_root, dir) = rules_dir();
    let s = start(&dir, skip_dotfiles(), true).await;
    let addr = s.server.http_addr;
    assert_eq!(http::get(addr, "/healthcheck").await.status, 500);

    write(&dir, "a.yaml", DOMAIN_A);
    crate::support::wait_until("serving", Duration::from_secs(10), || async {
        http::get(addr, "/healthcheck").await.status == 200
    })
    .await;
    {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let mut health = HealthClient::new(s.server.channel().await);
        let status = health
            .check(HealthCheckRequest {
                service: "ratelimit".to_owned(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32);
    }

    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    crate::support::wait_until("not serving", Duration::from_secs(10), || async {
        http::get(addr, "/healthcheck").await.status == 500
    })
    .await;
    s.server.shutdown().await;
}
