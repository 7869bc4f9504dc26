//! The redaction probe: a random 40-character secret is sent as the value
//! of a secret descriptor key over gRPC, `/json` and `/explain`, on every
//! store (embedded with snapshots, Redis, memcached; `REDACT_STORE_KEYS`
//! on), with statsd (a UDP listener here), OTLP (a collector here),
//! `detailed_metric` / `value_to_metric` and `LOG_LEVEL=trace`. Then every
//! HTTP answer, log byte, statsd packet, span, snapshot file and store key
//! and value is searched for it: no hit. The same run without redaction
//! finds it, so the probe looks where the secret would be.

use crate::support::floodgate::Floodgate;
use crate::support::grpc::{ask, request};
use crate::support::http::{get, post_json};
use crate::support::memcached::Memcached;
use crate::support::otlp::OtlpReceiver;
use crate::support::redis::RedisServer;
use crate::support::wait_until;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where the counters live in one run.
#[derive(Debug, Clone, Copy)]
enum Store {
    Embedded,
    Redis,
    Memcached,
}

/// The rules: one rule names the secret key with `detailed_metric`, one
/// below another key with `value_to_metric`. With `redact`, the first node
/// marks the key secret in the domain (memcached runs name it in
/// `REDACT_DESCRIPTOR_KEYS` instead).
fn rules(redact: bool) -> String {
    let mark = if redact { "\n    redact: true" } else { "" };
    format!(
        "domain: probe
descriptors:
  - key: api_key{mark}
    detailed_metric: true
    rate_limit: {{unit: minute, requests_per_unit: 1000}}
  - key: tenant
    descriptors:
      - key: api_key
        value_to_metric: true
        rate_limit: {{unit: minute, requests_per_unit: 1000}}
"
    )
}

/// 40 random characters.
fn secret() -> String {
    format!(
        "{:032x}{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
    .chars()
    .take(40)
    .collect()
}

/// What one run saw: every place searched, with its bytes.
struct Seen {
    places: Vec<(String, Vec<u8>)>,
}

impl Seen {
    fn add(&mut self, place: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.places.push((place.into(), bytes.into()));
    }

    /// The places whose bytes hold `needle`.
    fn holding(&self, needle: &str) -> Vec<&str> {
        self.places
            .iter()
            .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .map(|(place, _)| place.as_str())
            .collect()
    }

    fn text(&self, place: &str) -> String {
        self.places
            .iter()
            .filter(|(p, _)| p == place)
            .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
            .collect()
    }
}

/// One run on `store`, redacted or not, with `key_file` as
/// `REDACT_KEY_FILE`; what it saw, and the secret it sent.
async fn probe(store: Store, redact: bool, key_file: &Path) -> (Seen, String) {
    let secret = secret();
    let dir = tempfile::tempdir().unwrap();
    let statsd = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let statsd_port = statsd.local_addr().unwrap().port();
    let packets = Arc::new(Mutex::new(Vec::<u8>::new()));
    let listener = {
        let packets = packets.clone();
        tokio::spawn(async move {
            let mut buf = vec![0; 65_536];
            while let Ok(len) = statsd.recv(&mut buf).await {
                let mut all = packets.lock();
                all.extend_from_slice(buf.get(..len).unwrap_or_default());
                all.push(b'\n');
            }
        })
    };
    let collector = OtlpReceiver::http().await;
    let snapshot = dir.path().join("snapshot");
    let mut env: Vec<(&str, String)> = vec![
        ("LOG_LEVEL", "trace".into()),
        // One stats sink at a time: statsd, not the Prometheus listener.
        ("USE_PROMETHEUS", "false".into()),
        ("USE_STATSD", "true".into()),
        ("STATSD_HOST", "127.0.0.1".into()),
        ("STATSD_PORT", statsd_port.to_string()),
        ("STATSD_PROTOCOL", "udp".into()),
        ("STATS_FLUSH_INTERVAL", "100ms".into()),
        ("TRACING_ENABLED", "true".into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("REDACT_KEY_FILE", key_file.display().to_string()),
    ];
    if redact {
        env.push(("REDACT_STORE_KEYS", "true".into()));
    }
    let (redis, memcached) = match store {
        Store::Embedded => {
            env.push(("MEMORY_STORE_SNAPSHOT_PATH", snapshot.display().to_string()));
            env.push(("MEMORY_STORE_SNAPSHOT_INTERVAL", "50ms".into()));
            (None, None)
        }
        Store::Redis => {
            let redis = RedisServer::start();
            env.push(("BACKEND_TYPE", "redis".into()));
            env.push(("REDIS_URL", redis.addr()));
            (Some(redis), None)
        }
        Store::Memcached => {
            let memcached = Memcached::start();
            env.push(("BACKEND_TYPE", "memcache".into()));
            env.push(("MEMCACHE_HOST_PORT", memcached.addr()));
            if redact {
                env.push(("REDACT_DESCRIPTOR_KEYS", "api_key".into()));
            }
            (None, Some(memcached))
        }
    };
    // memcached runs mark the key by setting, not by the rule.
    let marked = redact && !matches!(store, Store::Memcached);
    let log_path = dir.path().join("log");
    let rules = rules(marked);
    let server = Floodgate::start_with(
        &[("probe.yaml", &rules)],
        &env,
        Some(std::fs::File::create(&log_path).unwrap()),
    )
    .await;

    let mut seen = Seen { places: Vec::new() };
    let mut client = server.client().await;
    let pairs: [&[(&str, &str)]; 2] = [
        &[("api_key", &secret)],
        &[("tenant", "t1"), ("api_key", &secret)],
    ];
    for _ in 0..3 {
        let answer = ask(&mut client, request("probe", &pairs)).await;
        seen.add("grpc answer", format!("{answer:?}"));
    }
    let body = format!(
        r#"{{"domain":"probe","descriptors":[{{"entries":[{{"key":"api_key","value":"{secret}"}}]}},{{"entries":[{{"key":"tenant","value":"t1"}},{{"key":"api_key","value":"{secret}"}}]}}]}}"#
    );
    let http = server.http;
    seen.add("/json", post_json(http, "/json", &body).await.body);
    seen.add("/explain", post_json(http, "/explain", &body).await.body);
    let bucket = format!("/rlqs?domain=probe&bucket=api_key={secret}");
    for path in [
        "/top?domain=probe",
        "/top?domain=probe&by=over_limit",
        "/history",
        "/",
        "/rlconfig",
        bucket.as_str(),
    ] {
        let answer = get(http, path).await;
        seen.add(path.to_owned(), answer.headers + &answer.body);
    }
    // The stats reach statsd.
    wait_until(
        "the probe's stats reach statsd",
        Duration::from_secs(20),
        || async { String::from_utf8_lossy(&packets.lock()).contains("probe.") },
    )
    .await;
    seen.add("/metrics", get(http, "/metrics").await.body);
    collector
        .wait_for(Duration::from_secs(20), |spans| !spans.is_empty())
        .await;
    server.stop().await;
    listener.abort();
    seen.add("statsd packets", packets.lock().clone());
    seen.add("spans", format!("{:?}", collector.spans()));
    seen.add("log", std::fs::read(&log_path).unwrap());
    if let Some(redis) = &redis {
        let keys = redis.cli(&["--raw", "KEYS", "*"]).unwrap_or_default();
        for key in keys.lines().filter(|k| !k.is_empty()) {
            seen.add("redis key", key);
            let dump = redis.cli(&["DUMP", key]).unwrap_or_default();
            seen.add(format!("redis value of {key}"), dump);
        }
    }
    if let Some(memcached) = &memcached {
        for key in memcached.keys() {
            let value = memcached.get(&key).unwrap_or_default();
            seen.add("memcached key", key.clone());
            seen.add(format!("memcached value of {key}"), value);
        }
    }
    if matches!(store, Store::Embedded) {
        // One file per shard: the path, then `<path>.1` … beside it.
        for file in std::fs::read_dir(dir.path()).unwrap() {
            let path = file.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snapshot")
            {
                seen.add("snapshot", std::fs::read(&path).unwrap());
            }
        }
    }
    (seen, secret)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redacted_secret_leaves_no_trace_in_any_answer_log_metric_span_or_store() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("redact.key");
    std::fs::write(&key_file, "probe-key-0123456789abcdef0123456789\n").unwrap();
    let redactor = floodgate::Redactor::new(Some(&key_file), Vec::new(), false).unwrap();
    for store in [Store::Embedded, Store::Redis, Store::Memcached] {
        let (seen, secret) = probe(store, true, &key_file).await;
        let hits = seen.holding(&secret);
        assert!(hits.is_empty(), "{store:?}: the secret is in {hits:?}");
        // The probe saw the traffic: its tag is on the views, in the
        // metric names and in the store.
        let tag = redactor.tag(&secret);
        let tagged = seen.holding(&tag);
        for place in [
            "/top?domain=probe",
            "/explain",
            "/metrics",
            "statsd packets",
        ] {
            assert!(
                tagged.contains(&place),
                "{store:?}: no tag in {place}: {tagged:?}"
            );
        }
        let in_store = match store {
            Store::Embedded => "snapshot",
            Store::Redis => "redis key",
            Store::Memcached => "memcached key",
        };
        assert!(
            tagged.contains(&in_store),
            "{store:?}: {tagged:?}\n{}",
            seen.text("/top?domain=probe")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redaction_the_probe_finds_the_secret_where_it_looks() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("redact.key");
    std::fs::write(&key_file, "probe-key-0123456789abcdef0123456789\n").unwrap();
    for store in [Store::Embedded, Store::Redis, Store::Memcached] {
        let (seen, secret) = probe(store, false, &key_file).await;
        let hits = seen.holding(&secret);
        let in_store = match store {
            Store::Embedded => "snapshot",
            Store::Redis => "redis key",
            Store::Memcached => "memcached key",
        };
        for place in [
            "/top?domain=probe",
            "/explain",
            "/metrics",
            "statsd packets",
            in_store,
        ] {
            assert!(hits.contains(&place), "{store:?}: not in {place}: {hits:?}");
        }
    }
}
