//! Rules over xDS: a test ADS server (tests/support/xds.rs) pushes rules,
//! changes them, pushes an invalid set, stops and comes back, while
//! floodgate answers ShouldRateLimit; over plaintext and over mTLS with
//! certificates made here. Then the binary as Envoy Gateway runs it:
//! `CONFIG_TYPE=GRPC_XDS_SOTW` from the environment, with and without
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`. Every wait polls with a deadline.

use crate::support::grpc::{TestServer, ask, request};
use crate::support::tls::{Ca, Pem};
use crate::support::xds::{AdsServer, Seen, ServerTls, config, limit};
use crate::support::{free_port, http, poll_until_async};
use arc_swap::ArcSwap;
use floodgate::LimiterOptions;
use floodgate::ServeOptions;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::ratelimit::config::ratelimit::v3::{RateLimitConfig, RateLimitUnit};
use floodgate::{Backoff, RuleFeed, XdsClient, XdsOptions, XdsTls};
use floodgate::{Index, LoadOptions};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;
const WAIT: Duration = Duration::from_secs(15);
const EVERY: Duration = Duration::from_millis(20);

/// Reconnect waits small enough for tests.
fn quick_backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(200),
        random_factor: 0.5,
        jitter: true,
    }
}

/// The first rule set: two domains, three limits.
fn rules_v1() -> Vec<RateLimitConfig> {
    vec![
        config(
            "edge-rules",
            "edge",
            vec![limit("user", RateLimitUnit::Minute, 2)],
        ),
        config(
            "api-rules",
            "api",
            vec![limit("path", RateLimitUnit::Hour, 5)],
        ),
    ]
}

/// v1 with `api` tightened and a domain added; `edge` unchanged.
fn rules_v2() -> Vec<RateLimitConfig> {
    vec![
        config(
            "edge-rules",
            "edge",
            vec![limit("user", RateLimitUnit::Minute, 2)],
        ),
        config(
            "api-rules",
            "api",
            vec![limit("path", RateLimitUnit::Hour, 1)],
        ),
        config("new-rules", "new", vec![limit("k", RateLimitUnit::Day, 0)]),
    ]
}

/// Invalid: a unit the reference rejects, and a descriptor with no key.
fn rules_invalid() -> Vec<RateLimitConfig> {
    let mut user = limit("user", RateLimitUnit::Unknown, 2);
    user.descriptors = vec![limit("", RateLimitUnit::Second, 1)];
    vec![
        config("edge-rules", "edge", vec![user]),
        config(
            "api-rules",
            "api",
            vec![limit("path", RateLimitUnit::Hour, 1)],
        ),
    ]
}

const INVALID_DETAIL: &str = "edge-rules: descriptors[0] (key=user): invalid rate limit unit 'UNKNOWN'\n\
    edge-rules: descriptors[0].descriptors[0]: descriptor has empty key";

/// `(code, requests_per_unit or 0, remaining)` of a one-descriptor answer.
fn answer(response: &RateLimitResponse) -> (i32, u32, u32) {
    let status = &response.statuses[0];
    (
        status.code,
        status
            .current_limit
            .as_ref()
            .map_or(0, |l| l.requests_per_unit),
        status.limit_remaining,
    )
}

async fn one(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    domain: &str,
    key: &str,
    value: &str,
) -> (i32, u32, u32) {
    answer(&ask(client, request(domain, &[&[(key, value)]])).await)
}

/// Waits until the server has a reply to the response it sent for
/// `version` (on any stream), and returns it.
async fn reply_to_version(ads: &AdsServer, version: &str) -> Seen {
    let mut found = None;
    let replied = poll_until_async(WAIT, EVERY, || {
        let reply = ads.nonce_of(version).and_then(|nonce| ads.reply_to(&nonce));
        let done = reply.is_some();
        found = reply;
        async move { done.then_some(true) }
    })
    .await;
    assert!(replied, "no reply to version {version}: {:?}", ads.seen());
    found.unwrap()
}

/// floodgate in process with an xDS client, both stopped by `stop`.
struct XdsFloodgate {
    server: TestServer,
    feed: RuleFeed,
    token: CancellationToken,
    client: tokio::task::JoinHandle<()>,
}

impl XdsFloodgate {
    async fn start(options: XdsOptions) -> Self {
        Self::start_with(options, false).await
    }

    async fn start_with(options: XdsOptions, healthy_only_with_rules: bool) -> Self {
        let rules = Arc::new(ArcSwap::from_pointee(Index::empty()));
        let client = XdsClient::new(
            options,
            LoadOptions::default(),
            rules.clone(),
            Arc::default(),
        )
        .unwrap();
        let feed = client.feed();
        let token = CancellationToken::new();
        let task = tokio::spawn(client.run(token.clone()));
        let server = TestServer::start_with_rules(
            rules,
            StoreKind::Memory(MemoryStore::new()),
            Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_000))),
            LimiterOptions::default(),
            ServeOptions {
                shutdown_grace: Duration::from_secs(5),
                rule_feed: Some(feed.clone()),
                healthy_only_with_rules,
                ..ServeOptions::default()
            },
        )
        .await;
        Self {
            server,
            feed,
            token,
            client: task,
        }
    }

    async fn stop(self) {
        self.token.cancel();
        self.client.await.unwrap();
        self.server.shutdown().await;
    }
}

/// The whole story, over whatever transport `ads` and `options` agree on.
async fn rules_follow_the_server(mut ads: AdsServer, options: XdsOptions) {
    let floodgate = XdsFloodgate::start(options).await;
    let mut client = floodgate.server.client().await;

    // Before any rules: every domain is unknown, so OK without a limit.
    assert_eq!(one(&mut client, "edge", "user", "alice").await, (OK, 0, 0));

    // v1 arrives: applied, ACKed with its version and nonce.
    ads.set("1", rules_v1());
    let ack = reply_to_version(&ads, "1").await;
    assert_eq!(ack.request.version_info, "1");
    assert!(ack.request.error_detail.is_none(), "{ack:?}");
    assert_eq!(
        ack.request.type_url,
        "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
    );
    let node = ack.request.node.as_ref().unwrap();
    assert_eq!(node.id, "test-node");
    assert_eq!(ack.headers.get("x-tenant").unwrap(), "blue");
    let subscription = ads.seen().into_iter().next().unwrap();
    assert_eq!(subscription.request.version_info, "");
    assert_eq!(subscription.request.response_nonce, "");
    assert_eq!(one(&mut client, "edge", "user", "alice").await, (OK, 2, 1));
    assert_eq!(one(&mut client, "api", "path", "/a").await, (OK, 5, 4));
    let rlconfig = http::get(floodgate.server.http_addr, "/rlconfig").await;
    assert!(
        rlconfig
            .body
            .contains("edge.user: unit=MINUTE requests_per_unit=2"),
        "{}",
        rlconfig.body
    );

    // v2 changes `api` and adds `new`; `edge` is unchanged, and its counter
    // (one hit of two) carries over.
    ads.set("2", rules_v2());
    let ack = reply_to_version(&ads, "2").await;
    assert_eq!(ack.request.version_info, "2");
    assert!(ack.request.error_detail.is_none());
    assert_eq!(one(&mut client, "edge", "user", "alice").await, (OK, 2, 0));
    assert_eq!(
        one(&mut client, "edge", "user", "alice").await.0,
        OVER_LIMIT
    );
    assert_eq!(one(&mut client, "api", "path", "/b").await, (OK, 1, 0));
    assert_eq!(one(&mut client, "new", "k", "x").await.0, OVER_LIMIT);

    // An invalid set: NACKed with the version still in force, this nonce,
    // and the same text a rule file with these errors gets; v2 keeps
    // serving.
    ads.set("3", rules_invalid());
    let nack = reply_to_version(&ads, "3").await;
    assert_eq!(nack.request.version_info, "2");
    assert_eq!(Some(nack.request.response_nonce.clone()), ads.nonce_of("3"));
    let detail = nack.request.error_detail.as_ref().unwrap();
    assert_eq!(detail.message, INVALID_DETAIL);
    assert_eq!(detail.code, tonic::Code::InvalidArgument as i32);
    assert_eq!(one(&mut client, "new", "k", "x").await.0, OVER_LIMIT);
    assert_eq!(one(&mut client, "api", "path", "/c").await, (OK, 1, 0));
    let stats = floodgate.feed.stats();
    assert_eq!((stats.success(), stats.error()), (2, 1));
    let metrics = http::get(floodgate.server.http_addr, "/metrics").await;
    assert!(
        metrics
            .body
            .contains("ratelimit_service_config_load_error 1"),
        "{}",
        metrics.body
    );

    // The server goes away: the rules in force keep serving.
    ads.stop().await;
    assert_eq!(one(&mut client, "new", "k", "y").await.0, OVER_LIMIT);
    assert_eq!(one(&mut client, "edge", "user", "bob").await, (OK, 2, 1));

    // It comes back with v4: floodgate reconnects on its own, subscribes
    // saying it has v2, applies v4 and ACKs it on the new stream.
    ads.set("4", rules_v1());
    ads.restart().await;
    let ack = reply_to_version(&ads, "4").await;
    assert!(ack.stream > 1, "{ack:?}");
    assert_eq!(ack.request.version_info, "4");
    let resubscription = ads
        .seen()
        .into_iter()
        .find(|seen| seen.stream == ack.stream)
        .unwrap();
    assert_eq!(resubscription.request.version_info, "2");
    assert_eq!(resubscription.request.response_nonce, "");
    assert_eq!(one(&mut client, "new", "k", "z").await, (OK, 0, 0));
    assert_eq!(one(&mut client, "api", "path", "/d").await, (OK, 5, 4));
    // `edge.user` never changed: bob's one hit is still counted.
    assert_eq!(one(&mut client, "edge", "user", "bob").await, (OK, 2, 0));

    floodgate.stop().await;
    ads.stop().await;
}

fn plain_options(ads: &AdsServer) -> XdsOptions {
    XdsOptions {
        server_url: ads.addr.to_string(),
        node_id: "test-node".to_owned(),
        node_metadata: vec![("zone".to_owned(), "a".to_owned())],
        additional_headers: vec![("X-Tenant".to_owned(), "blue".to_owned())],
        backoff: quick_backoff(),
        connect_retry_interval: Duration::from_millis(50),
        ..XdsOptions::default()
    }
}

#[tokio::test]
async fn rules_follow_the_xds_server_through_changes_errors_and_outages() {
    let ads = AdsServer::start(None).await;
    let options = plain_options(&ads);
    rules_follow_the_server(ads, options).await;
}

/// PEM files of a test PKI: a CA, a server certificate for `xds.test`
/// and a client certificate, written to `dir`.
struct Pki {
    server: ServerTls,
    client: XdsTls,
}

fn pki(dir: &Path) -> Pki {
    let ca = Ca::new("xds test ca");
    let server = ca.server_for("xds.test");
    let client: Pem = ca.client("floodgate.test");
    let write = |name: &str, text: &str| crate::support::tls::write(dir, name, text);
    let client = XdsTls {
        ca_cert: Some(write("ca.pem", &ca.cert_pem())),
        client_cert: Some(write("client.pem", &client.cert)),
        client_key: Some(write("client.key", &client.key)),
        // The server is dialled as 127.0.0.1; its certificate names xds.test.
        san: Some("xds.test".to_owned()),
    };
    let server = ServerTls {
        cert: server.cert,
        key: server.key,
        client_ca: Some(ca.cert_pem()),
    };
    Pki { server, client }
}

#[tokio::test]
async fn rules_follow_the_xds_server_over_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let ads = AdsServer::start(Some(pki.server.clone())).await;
    let options = XdsOptions {
        tls: Some(pki.client.clone()),
        ..plain_options(&ads)
    };
    rules_follow_the_server(ads, options).await;
}

#[tokio::test]
async fn a_client_without_a_certificate_gets_no_rules_over_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let ads = AdsServer::start(Some(pki.server.clone())).await;
    ads.set("1", rules_v1());
    // Trusts the server, but presents no certificate.
    let options = XdsOptions {
        tls: Some(XdsTls {
            client_cert: None,
            client_key: None,
            ..pki.client.clone()
        }),
        ..plain_options(&ads)
    };
    let floodgate = XdsFloodgate::start(options).await;
    // The same client with its certificate gets v1 from the same server:
    // what keeps the first one out is only the missing certificate.
    let with_cert = XdsFloodgate::start(XdsOptions {
        tls: Some(pki.client.clone()),
        ..plain_options(&ads)
    })
    .await;
    let mut feed = with_cert.feed.clone();
    assert!(tokio::time::timeout(WAIT, feed.first()).await.unwrap());
    assert_eq!(floodgate.feed.applied(), 0);
    assert_eq!(ads.sent().len(), 1, "{:?}", ads.sent());
    with_cert.stop().await;
    floodgate.stop().await;
}

#[tokio::test]
async fn a_response_over_the_size_bound_is_refused_and_the_last_good_rules_serve() {
    let ads = AdsServer::start(None).await;
    let floodgate = XdsFloodgate::start(XdsOptions {
        max_message_bytes: 4096,
        ..plain_options(&ads)
    })
    .await;
    let mut client = floodgate.server.client().await;
    ads.set("1", rules_v1());
    reply_to_version(&ads, "1").await;

    // v2 carries metadata larger than the bound on its own.
    let mut big = rules_v2();
    let blob = prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue("x".repeat(8192))),
    };
    big[0].descriptors[0].metadata = Some(prost_types::Struct {
        fields: [("blob".to_owned(), blob)].into_iter().collect(),
    });
    ads.set("2", big);
    // Each stream breaks on it and floodgate reconnects (the server sends
    // v2 again on every new stream); it is never applied, ACKed or NACKed.
    let resent = poll_until_async(WAIT, EVERY, || {
        let sent = ads.sent().iter().filter(|s| s.version == "2").count();
        async move { (sent >= 2).then_some(true) }
    })
    .await;
    assert!(resent, "{:?}", ads.sent());
    for sent in ads.sent().iter().filter(|s| s.version == "2") {
        assert!(ads.reply_to(&sent.nonce).is_none(), "{:?}", ads.seen());
    }
    assert_eq!(one(&mut client, "api", "path", "/a").await, (OK, 5, 4));
    assert_eq!(one(&mut client, "new", "k", "x").await, (OK, 0, 0));
    let stats = floodgate.feed.stats();
    assert_eq!((stats.success(), stats.error()), (1, 0));
    floodgate.stop().await;
}

#[tokio::test]
async fn health_waits_for_xds_rules_when_rules_are_required() {
    let ads = AdsServer::start(None).await;
    let floodgate = XdsFloodgate::start_with(plain_options(&ads), true).await;
    let addr = floodgate.server.http_addr;
    assert_ne!(http::get(addr, "/healthcheck").await.status, 200);
    ads.set("1", rules_v1());
    let healthy = poll_until_async(WAIT, EVERY, || async move {
        (http::get(addr, "/healthcheck").await.status == 200).then_some(true)
    })
    .await;
    assert!(healthy, "not healthy after the first rules");
    floodgate.stop().await;
}

// --- The binary, configured from the environment as Envoy Gateway does.

/// `floodgate serve` with xDS settings from `env`, killed when dropped.
struct Binary {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
}

impl Binary {
    fn start(ads: &AdsServer, env: &[(&str, String)]) -> Self {
        let (grpc_port, http_port) = (free_port(), free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        command
            .arg("serve")
            .env_clear()
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", grpc_port.to_string())
            .env("HOST", "127.0.0.1")
            .env("PORT", http_port.to_string())
            .env("LOG_LEVEL", "warn")
            .env("CONFIG_TYPE", "GRPC_XDS_SOTW")
            .env("CONFIG_GRPC_XDS_SERVER_URL", ads.addr.to_string())
            .env("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit")
            .env("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,tier=edge")
            .env("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:blue")
            .env("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "50ms")
            .env("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "20ms")
            .env("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        Self {
            child: command.spawn().unwrap(),
            http: format!("127.0.0.1:{http_port}").parse().unwrap(),
            grpc: format!("127.0.0.1:{grpc_port}").parse().unwrap(),
        }
    }

    async fn healthy(&mut self) -> bool {
        let (http, child) = (self.http, &mut self.child);
        poll_until_async(WAIT, EVERY, || {
            let exited = child.try_wait().unwrap();
            async move {
                assert!(exited.is_none(), "floodgate exited: {exited:?}");
                let up = tokio::net::TcpStream::connect(http).await.is_ok()
                    && http::get(http, "/healthcheck").await.status == 200;
                up.then_some(true)
            }
        })
        .await
    }

    async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// SIGTERM; the process must exit within the deadline, successfully.
    /// Waits on the runtime, so this test's own connections can answer
    /// the server's goodbye and let it drain at once.
    async fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let child = &mut self.child;
        let mut status = None;
        poll_until_async(WAIT, EVERY, || {
            status = child.try_wait().unwrap();
            let done = status.map(|_| true);
            async move { done }
        })
        .await;
        let status = status.expect("did not stop on SIGTERM");
        assert!(status.success(), "exited with {status}");
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn without_force_start_nothing_listens_until_the_first_rules_over_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let ads = AdsServer::start(Some(pki.server.clone())).await;
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().unwrap().display().to_string();
    let mut floodgate = Binary::start(
        &ads,
        &[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                path(&pki.client.ca_cert),
            ),
            (
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                path(&pki.client.client_cert),
            ),
            (
                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                path(&pki.client.client_key),
            ),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.test".to_owned()),
        ],
    );
    // floodgate has subscribed (so it is up and connected over mTLS) ...
    let subscribed = poll_until_async(WAIT, EVERY, || {
        let seen = !ads.seen().is_empty();
        async move { seen.then_some(true) }
    })
    .await;
    assert!(subscribed, "no subscription");
    let subscription = ads.seen().remove(0);
    let node = subscription.request.node.unwrap();
    assert_eq!(node.id, "envoy-ratelimit");
    let metadata = node.metadata.unwrap();
    assert_eq!(metadata.fields.len(), 2, "{metadata:?}");
    assert_eq!(subscription.headers.get("x-tenant").unwrap(), "blue");
    // ... but without rules it does not serve: nothing listens yet.
    assert!(
        tokio::net::TcpStream::connect(floodgate.http)
            .await
            .is_err()
    );
    assert!(
        tokio::net::TcpStream::connect(floodgate.grpc)
            .await
            .is_err()
    );
    // Invalid first rules are NACKed (no version applied yet), and still
    // nothing listens.
    ads.set("0", rules_invalid());
    let nack = reply_to_version(&ads, "0").await;
    assert_eq!(nack.request.version_info, "");
    assert_eq!(nack.request.error_detail.unwrap().message, INVALID_DETAIL);
    assert!(
        tokio::net::TcpStream::connect(floodgate.http)
            .await
            .is_err()
    );

    ads.set("1", rules_v1());
    assert!(
        floodgate.healthy().await,
        "not serving after the first rules"
    );
    let mut client = floodgate.client().await;
    assert_eq!(one(&mut client, "api", "path", "/a").await.1, 5);
    let rlconfig = http::get(floodgate.http, "/rlconfig").await;
    assert!(
        rlconfig
            .body
            .contains("api.path: unit=HOUR requests_per_unit=5"),
        "{}",
        rlconfig.body
    );

    ads.set("2", rules_invalid());
    let nack = reply_to_version(&ads, "2").await;
    assert_eq!(nack.request.version_info, "1");
    assert_eq!(nack.request.error_detail.unwrap().message, INVALID_DETAIL);
    assert_eq!(one(&mut client, "api", "path", "/a").await.1, 5);
    let metrics = http::get(floodgate.http, "/metrics").await;
    assert!(
        metrics
            .body
            .contains("ratelimit_service_config_load_success 1"),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("ratelimit_service_config_load_error 2"),
        "{}",
        metrics.body
    );
    floodgate.stop().await;
}

#[tokio::test]
async fn force_start_serves_before_the_first_rules() {
    let ads = AdsServer::start(None).await;
    let mut floodgate = Binary::start(
        &ads,
        &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned())],
    );
    assert!(floodgate.healthy().await, "not serving without rules");
    let mut client = floodgate.client().await;
    // No rules yet: every domain is unknown, so OK with no limit.
    assert_eq!(one(&mut client, "edge", "user", "alice").await, (OK, 0, 0));

    ads.set("1", rules_v1());
    let ack = reply_to_version(&ads, "1").await;
    assert!(ack.request.error_detail.is_none());
    assert_eq!(one(&mut client, "edge", "user", "alice").await.1, 2);
    floodgate.stop().await;
}

#[tokio::test]
async fn sigterm_while_waiting_for_the_first_rules_exits_cleanly() {
    let ads = AdsServer::start(None).await;
    let floodgate = Binary::start(&ads, &[]);
    let subscribed = poll_until_async(WAIT, EVERY, || {
        let seen = !ads.seen().is_empty();
        async move { seen.then_some(true) }
    })
    .await;
    assert!(subscribed, "no subscription");
    floodgate.stop().await;
}

#[test]
fn unreadable_xds_tls_files_stop_the_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("serve")
        .env_clear()
        .env("GRPC_PORT", free_port().to_string())
        .env("PORT", free_port().to_string())
        .env("CONFIG_TYPE", "GRPC_XDS_SOTW")
        .env("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true")
        .env("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent/ca.pem")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read /nonexistent/ca.pem"),
        "{stderr}"
    );
}
