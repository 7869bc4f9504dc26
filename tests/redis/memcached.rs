//! The memcached store against a real `memcached`: the reference's keys and
//! expiry times (a fleet can share one memcached while it moves), exact
//! counts under concurrency, several servers picked as the reference's
//! client picks them, servers from a DNS SRV record the test serves, TLS
//! with a client certificate, a server down or frozen (the failure policy),
//! and the binary refusing a rule memcached cannot count.

use crate::conformance;
use crate::support::backends::Backend;
use crate::support::memcached::Memcached;
use crate::support::tls::redis_pki;
use crate::support::{free_port, poll_until_async};
use arc_swap::ArcSwap;
use floodgate::{
    Code, Descriptor, FailureMode, Limiter, LimiterOptions, ManualClock, MemcacheConfig,
    MemcacheServers, MemcacheStore, MemcacheTls, Request, StoreKind, UnixMillis,
};
use hickory_proto::op::{Message, MessageType, OpCode};
use hickory_proto::rr::rdata::SRV;
use hickory_proto::rr::{Name, RData, Record};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const RULES: &str = r"
domain: mc
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: fifty
    rate_limit: {unit: hour, requests_per_unit: 50}
";

/// 40 s into a minute.
const T0: u64 = 1_700_000_080;

pub(crate) async fn store(config: MemcacheConfig) -> StoreKind {
    StoreKind::Memcache(MemcacheStore::connect(config).await.unwrap())
}

fn config(servers: &[&Memcached]) -> MemcacheConfig {
    MemcacheConfig {
        expiration_jitter_max_secs: 0,
        timeout: Duration::from_secs(2),
        ..MemcacheConfig::servers(servers.iter().map(|s| s.addr()).collect())
    }
}

/// A store on a memcached of its own, for the conformance scenarios.
pub(crate) async fn backend() -> Backend {
    let server = Memcached::start();
    let store = store(config(&[&server])).await;
    Backend::new(store, server)
}

fn limiter(
    store: &StoreKind,
    clock: &ManualClock,
    options: LimiterOptions,
) -> Arc<Limiter<StoreKind>> {
    Arc::new(Limiter::new(
        Arc::new(ArcSwap::from_pointee(crate::support::grpc::index(&[(
            "mc.yaml", RULES,
        )]))),
        store.clone(),
        Arc::new(clock.clone()),
        options,
    ))
}

fn req(key: &str, value: &str, hits: Option<u64>) -> Request {
    Request {
        domain: "mc".into(),
        descriptors: vec![Descriptor {
            hits_addend: hits,
            ..Descriptor::from_pairs([(key, value)])
        }],
        hits_addend: 0,
    }
}

async fn code(l: &Limiter<StoreKind>, key: &str, value: &str) -> Code {
    l.should_rate_limit(&req(key, value, None))
        .await
        .unwrap()
        .overall_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_expiry_are_the_references() {
    let server = Memcached::start();
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let prefixed = MemcacheConfig {
        key_prefix: "pfx:".to_owned(),
        ..config(&[&server])
    };
    let l = limiter(&store(prefixed).await, &clock, LimiterOptions::default());
    assert_eq!(code(&l, "user", "alice").await, Code::Ok);
    assert_eq!(code(&l, "user", "alice").await, Code::Ok);
    // prefix + domain_key_value_ + the window's start, as the reference.
    let minute = "pfx:mc_user_alice_1700000040";
    assert_eq!(server.get(minute).as_deref(), Some("2"));
    let ttl = server.ttl(minute).unwrap();
    assert!(
        (55..=60).contains(&ttl),
        "a minute's counter lives a minute: {ttl}"
    );
    // A year is past memcached's 30-day limit on durations: it must still
    // live about a year (sent as a point in time), not expire at once.
    assert_eq!(code(&l, "yearly", "x").await, Code::Ok);
    let year_start = T0 - T0 % 31_536_000;
    let yearly = format!("pfx:mc_yearly_x_{year_start}");
    assert_eq!(server.get(&yearly).as_deref(), Some("1"));
    let ttl = server.ttl(&yearly).unwrap();
    assert!(ttl > 31_000_000, "a year's counter lives a year: {ttl}");
    // A value memcached cannot take as a key is still counted, apart.
    for _ in 0..4 {
        l.should_rate_limit(&req("user", "a b", None))
            .await
            .unwrap();
    }
    assert_eq!(code(&l, "user", "a b").await, Code::OverLimit);
    assert_eq!(code(&l, "user", "a  b").await, Code::Ok);
    assert!(server.keys().iter().any(|k| k.starts_with("pfx:#")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_the_reference_counted_are_seen() {
    // The reference and floodgate on one memcached during a migration:
    // what one counted, the other sees.
    let server = Memcached::start();
    server.set("mc_user_bob_1700000040", "2", 60);
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(
        &store(config(&[&server])).await,
        &clock,
        LimiterOptions::default(),
    );
    let r = l
        .should_rate_limit(&req("user", "bob", None))
        .await
        .unwrap();
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (Code::Ok, 0)
    );
    assert_eq!(code(&l, "user", "bob").await, Code::OverLimit);
    assert_eq!(server.get("mc_user_bob_1700000040").as_deref(), Some("4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_admit_exactly_the_limit() {
    // Two limiters (two floodgate instances) on one memcached, 200 calls
    // at once on a limit of 50: `incr` answers the count, so exactly 50.
    let server = Memcached::start();
    let backend = Backend::new(store(config(&[&server])).await, ());
    conformance::admit_exactly_the_limit(&backend, &["fifty"]).await;
    // Every hit counts (the reference's fixed windows); with stop-increment
    // only the admitted ones stay counted.
    let hour = 1_700_000_080 / 3_600 * 3_600;
    assert_eq!(
        server.get(&format!("conf_fifty_count_{hour}")).as_deref(),
        Some("200")
    );
    assert_eq!(
        server.get(&format!("conf_fifty_stop_{hour}")).as_deref(),
        Some("50")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_spread_over_servers_as_the_reference_client_spreads_them() {
    let servers = [Memcached::start(), Memcached::start(), Memcached::start()];
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(
        &store(config(&[&servers[0], &servers[1], &servers[2]])).await,
        &clock,
        LimiterOptions::default(),
    );
    let mut used = [false; 3];
    for i in 0..30 {
        let value = format!("u{i}");
        assert_eq!(code(&l, "user", &value).await, Code::Ok);
        let key = format!("mc_user_{value}_1700000040");
        // gomemcache's ServerList: IEEE CRC-32 of the key, modulo the count.
        let home = crc32fast::hash(key.as_bytes()) as usize % 3;
        used[home] = true;
        for (n, server) in servers.iter().enumerate() {
            let want = (n == home).then(|| "1".to_owned());
            assert_eq!(server.get(&key), want, "{key} on server {n}");
        }
    }
    assert_eq!(used, [true; 3], "30 keys reach every server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_or_frozen_gets_the_failure_policy() {
    let mut server = Memcached::start();
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let quick = MemcacheConfig {
        timeout: Duration::from_millis(300),
        ..config(&[&server])
    };
    let shared = store(quick).await;
    let policy = |failure_mode| LimiterOptions {
        failure_mode,
        ..LimiterOptions::default()
    };
    let error = limiter(&shared, &clock, policy(FailureMode::Error));
    let allow = limiter(&shared, &clock, policy(FailureMode::Allow));
    let deny = limiter(&shared, &clock, policy(FailureMode::Deny));
    assert_eq!(code(&error, "user", "f").await, Code::Ok);

    // Frozen: connections stay open, nothing answers; the timeout ends
    // each call and the policy answers.
    server.pause();
    assert!(
        error
            .should_rate_limit(&req("user", "f", None))
            .await
            .is_err()
    );
    assert_eq!(code(&allow, "user", "f").await, Code::Ok);
    assert_eq!(code(&deny, "user", "f").await, Code::OverLimit);
    assert!(!shared.answers().await);
    server.resume();
    // Calls cut by the timeout left their connections behind (never
    // reused); what they had sent is counted once memcached runs again:
    // the first call and at most the three sent while frozen.
    let counted = poll_until_async(Duration::from_secs(5), Duration::from_millis(20), || {
        let counted = server.get("mc_user_f_1700000040");
        async move { (counted.as_deref() == Some("4")).then_some(true) }
    })
    .await;
    assert!(counted, "{:?}", server.get("mc_user_f_1700000040"));
    assert!(shared.answers().await);

    // Down: connections refused.
    server.stop();
    assert!(
        error
            .should_rate_limit(&req("user", "g", None))
            .await
            .is_err()
    );
    assert_eq!(code(&allow, "user", "g").await, Code::Ok);
    assert_eq!(code(&deny, "user", "g").await, Code::OverLimit);
}

/// A DNS server on loopback answering every SRV question with `answers`
/// (TTL 0, so each lookup asks again).
struct TestDns {
    addr: SocketAddr,
    answers: Arc<Mutex<Vec<(String, u16)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestDns {
    async fn start(answers: Vec<(String, u16)>) -> Self {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let answers = Arc::new(Mutex::new(answers));
        let served = answers.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0; 4096];
            loop {
                let Ok((len, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(query) = Message::from_vec(&buf[..len]) else {
                    continue;
                };
                let mut reply =
                    Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
                reply.metadata.recursion_desired = query.metadata.recursion_desired;
                reply.metadata.recursion_available = true;
                for q in &query.queries {
                    reply.add_query(q.clone());
                    for (target, port) in served.lock().iter() {
                        let srv = SRV::new(0, 0, *port, Name::from_ascii(target).unwrap());
                        reply.add_answer(Record::from_rdata(q.name().clone(), 0, RData::SRV(srv)));
                    }
                }
                let _ = socket.send_to(&reply.to_vec().unwrap(), from).await;
            }
        });
        Self {
            addr,
            answers,
            task,
        }
    }

    fn set(&self, answers: Vec<(String, u16)>) {
        *self.answers.lock() = answers;
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_come_from_an_srv_record_and_follow_it() {
    let (a, b) = (Memcached::start(), Memcached::start());
    let dns = TestDns::start(vec![
        ("localhost.".to_owned(), b.port),
        ("localhost.".to_owned(), a.port),
    ])
    .await;
    let memcache = MemcacheStore::connect(MemcacheConfig {
        servers: MemcacheServers::Srv {
            name: "_memcache._tcp.floodgate.test".to_owned(),
            refresh: Some(Duration::from_millis(100)),
            dns: Some(dns.addr),
        },
        ..config(&[])
    })
    .await
    .unwrap();
    // As the reference: `target:port`, sorted.
    let mut want = vec![
        format!("localhost.:{}", a.port),
        format!("localhost.:{}", b.port),
    ];
    want.sort();
    assert_eq!(memcache.servers(), want);
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(
        &StoreKind::Memcache(memcache.clone()),
        &clock,
        LimiterOptions::default(),
    );
    for i in 0..10 {
        assert_eq!(code(&l, "user", &format!("s{i}")).await, Code::Ok);
    }
    let held = |server: &Memcached| {
        (0..10)
            .filter(|i| server.get(&format!("mc_user_s{i}_1700000040")).is_some())
            .count()
    };
    assert_eq!(held(&a) + held(&b), 10);

    // The record changes: refreshed every 100 ms, the store follows it.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let refresh = tokio::spawn({
        let memcache = memcache.clone();
        let shutdown = shutdown.clone();
        async move { memcache.maintain(shutdown).await }
    });
    dns.set(vec![("localhost.".to_owned(), b.port)]);
    let only_b = vec![format!("localhost.:{}", b.port)];
    let followed = poll_until_async(Duration::from_secs(10), Duration::from_millis(50), || {
        let servers = memcache.servers();
        let only_b = only_b.clone();
        async move { (servers == only_b).then_some(true) }
    })
    .await;
    assert!(followed, "servers: {:?}", memcache.servers());
    assert_eq!(code(&l, "user", "after").await, Code::Ok);
    assert_eq!(b.get("mc_user_after_1700000040").as_deref(), Some("1"));
    // A record that names nothing keeps the servers in use.
    dns.set(Vec::new());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(memcache.servers(), only_b);
    shutdown.cancel();
    refresh.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_client_certificate() {
    let pki = redis_pki();
    let file = |name: &str| pki.path().join(name);
    let server = Memcached::start_with(&[
        "-Z".to_owned(),
        "-o".to_owned(),
        format!(
            "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=2",
            file("server.pem").display(),
            file("server.key").display(),
            file("ca.pem").display()
        ),
    ]);
    let tls = MemcacheTls {
        ca_cert: Some(file("ca.pem")),
        client_cert: Some(file("client.pem")),
        client_key: Some(file("client.key")),
        skip_hostname_verification: false,
    };
    let at = |host: &str| MemcacheConfig {
        servers: MemcacheServers::List(vec![format!("{host}:{}", server.port)]),
        ..config(&[])
    };
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let ok = limiter(
        &store(MemcacheConfig {
            tls: Some(tls.clone()),
            ..at("localhost")
        })
        .await,
        &clock,
        LimiterOptions::default(),
    );
    for expected in [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(code(&ok, "user", "tls").await, expected);
    }
    // No client certificate: memcached (ssl_verify_mode=2) refuses.
    let anonymous = MemcacheTls {
        client_cert: None,
        client_key: None,
        ..tls.clone()
    };
    let refused = limiter(
        &store(MemcacheConfig {
            tls: Some(anonymous),
            ..at("localhost")
        })
        .await,
        &clock,
        LimiterOptions::default(),
    );
    assert!(
        refused
            .should_rate_limit(&req("user", "tls", None))
            .await
            .is_err()
    );
    // Reached by IP, the certificate (for localhost) does not match...
    let by_ip = limiter(
        &store(MemcacheConfig {
            tls: Some(tls.clone()),
            ..at("127.0.0.1")
        })
        .await,
        &clock,
        LimiterOptions::default(),
    );
    assert!(
        by_ip
            .should_rate_limit(&req("user", "tls", None))
            .await
            .is_err()
    );
    // ...unless the host name check is skipped (the chain still counts).
    let skip = MemcacheTls {
        skip_hostname_verification: true,
        ..tls
    };
    let skipping = limiter(
        &store(MemcacheConfig {
            tls: Some(skip),
            ..at("127.0.0.1")
        })
        .await,
        &clock,
        LimiterOptions::default(),
    );
    assert_eq!(code(&skipping, "user", "tls").await, Code::OverLimit);
    let other_ca = crate::support::tls::Ca::new("another ca");
    let stranger_dir = tempfile::tempdir().unwrap();
    let stranger = crate::support::tls::write(stranger_dir.path(), "ca.pem", &other_ca.cert_pem());
    let untrusted = limiter(
        &store(MemcacheConfig {
            tls: Some(MemcacheTls {
                ca_cert: Some(stranger),
                skip_hostname_verification: true,
                ..MemcacheTls::default()
            }),
            ..at("127.0.0.1")
        })
        .await,
        &clock,
        LimiterOptions::default(),
    );
    assert!(
        untrusted
            .should_rate_limit(&req("user", "tls", None))
            .await
            .is_err()
    );
}

/// The binary as users run it: `BACKEND_TYPE=memcache` counts on the
/// servers of `MEMCACHE_HOST_PORT`, and a rule memcached cannot count stops
/// the start with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_counts_on_memcached_and_refuses_other_algorithms() {
    let server = Memcached::start();
    let rules = tempfile::tempdir().unwrap();
    std::fs::write(
        rules.path().join("mc.yaml"),
        "domain: mc\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )
    .unwrap();
    let (grpc, http) = (free_port(), free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--config-dir"])
        .arg(rules.path())
        .env_clear()
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("HOST", "127.0.0.1")
        .env("PORT", http.to_string())
        .env("BACKEND_TYPE", "memcache")
        .env("MEMCACHE_HOST_PORT", server.addr())
        .env("CACHE_KEY_PREFIX", "e2e_")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut client = None;
    for _ in 0..200 {
        if let Ok(c) = floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://127.0.0.1:{grpc}")).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = client.expect("floodgate listens");
    let request = crate::support::grpc::request("mc", &[&[("user", "e2e")]]);
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(
            crate::support::grpc::ask(&mut client, request.clone())
                .await
                .overall_code,
        );
    }
    assert_eq!(codes, [1, 1, 2], "OK, OK, OVER_LIMIT");
    let keys = server.keys();
    assert!(
        keys.iter().any(|k| k.starts_with("e2e_mc_user_e2e_")),
        "reference key in memcached: {keys:?}"
    );
    let _ = child.kill();
    let _ = child.wait();

    std::fs::write(
        rules.path().join("mc.yaml"),
        "domain: mc\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--config-dir"])
        .arg(rules.path())
        .env_clear()
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", free_port().to_string())
        .env("HOST", "127.0.0.1")
        .env("PORT", free_port().to_string())
        .env("BACKEND_TYPE", "memcache")
        .env("MEMCACHE_HOST_PORT", server.addr())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mc.yaml")
            && stderr.contains("descriptors[0] (key=user)")
            && stderr.contains("algorithm sliding_window needs Redis or the embedded store"),
        "{stderr}"
    );
}

macro_rules! on_memcached {
    ($($scenario:ident),* $(,)?) => {
        mod conformance_scenarios {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::conformance::$scenario(super::backend().await).await;
            })*
        }
    };
}

// The conformance scenarios that use fixed windows only.
on_memcached!(
    fixed_window_counts_and_resets,
    hits_addend_reference_vectors,
    shadow_and_replaces,
    stop_increment_reference_vector,
    stop_increment_with_local_cache,
);
