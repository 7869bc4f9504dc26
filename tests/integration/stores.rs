//! A store per rule (`STORES_FILE`, `store: NAME`) as users run it: a bad
//! stores file or a rule naming an unknown store stops the start naming
//! them; each limit counts on the store its rule names, and `/explain` and
//! `/metrics` say which; a stores file changed under a running instance is
//! checked and the stores in force are kept.

use crate::cli::{repo, serve_on_any_port};
use crate::support::floodgate::{Floodgate, http_text};
use crate::support::grpc::request;
use crate::support::wait_until;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// `floodgate serve` with `rules` (or the examples) and `stores` as the
/// stores file: it must exit 1, its error saying `says`.
fn refused(rules: Option<&str>, stores: Option<&str>, says: impl Fn(&Path) -> String) {
    let dir = tempfile::tempdir().unwrap();
    let config = match rules {
        Some(yaml) => {
            let config = dir.path().join("config");
            std::fs::create_dir(&config).unwrap();
            std::fs::write(config.join("r.yaml"), yaml).unwrap();
            config
        }
        None => repo("examples/config"),
    };
    let file = dir.path().join("stores.yaml");
    let mut command = serve_on_any_port(&config);
    command.env_clear().stdout(Stdio::null());
    if let Some(text) = stores {
        std::fs::write(&file, text).unwrap();
        command.arg("--stores-file").arg(&file);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let wanted = says(&file);
    assert!(stderr.contains(&wanted), "wanted {wanted:?} in: {stderr}");
}

#[test]
fn a_bad_stores_file_stops_the_start_naming_the_file_and_the_store() {
    refused(
        None,
        Some("global:\n  type: redis\n  url: 127.0.0.1:1\n  timeot: 2s\n"),
        |file| {
            format!(
                "STORES_FILE: {}: store 'global': unknown setting 'timeot' for type redis",
                file.display()
            )
        },
    );
    refused(None, Some("local:\n  type: memory\n"), |file| {
        format!("{}: store 'local': 'local' is reserved", file.display())
    });
}

#[test]
fn a_rule_naming_an_unknown_store_stops_the_start_naming_the_rule() {
    let rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, store: global}\n";
    refused(Some(rules), None, |_| {
        "r.yaml: descriptors[0] (key=k): store 'global' is not defined (stores: default, local;"
            .to_owned()
    });
    // Defined, the same rules load.
    refused(Some(rules), Some("elsewhere:\n  type: memory\n"), |_| {
        "store 'global' is not defined (stores: default, elsewhere, local;".to_owned()
    });
}

const RULES: &str = "domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 3, store: side}
      - {unit: hour, requests_per_unit: 5}
";

fn explain_body(value: &str) -> String {
    format!(r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"k","value":"{value}"}}]}}]}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_counts_on_the_store_its_rule_names() {
    let dir = tempfile::tempdir().unwrap();
    let stores = dir.path().join("stores.yaml");
    std::fs::write(&stores, "side:\n  type: memory\n  failure_mode: deny\n").unwrap();
    let log = dir.path().join("log");
    let server = Floodgate::start_with(
        &[("edge.yaml", RULES)],
        &[
            ("STORES_FILE", stores.display().to_string()),
            ("LOG_LEVEL", "info".to_owned()),
        ],
        Some(std::fs::File::create(&log).unwrap()),
    )
    .await;
    let mut client = server.client().await;
    for _ in 0..4 {
        client
            .should_rate_limit(request("d", &[&[("k", "v")]]))
            .await
            .unwrap();
    }
    // Four hits: the minute (on `side`) is over at 3; the hour (on the
    // process-wide store) counted every one.
    let (status, body) = http_text(
        server.http,
        "POST",
        "/explain",
        explain_body("v").as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let explained: serde_json::Value = serde_json::from_str(&body).unwrap();
    let windows = explained["descriptors"][0]["windows"].as_array().unwrap();
    let by_store: Vec<(&str, u64, bool)> = windows
        .iter()
        .map(|w| {
            (
                w["store"].as_str().unwrap(),
                w["count"].as_u64().unwrap(),
                w["overLimit"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_store, [("side", 4, true), ("default", 4, false)]);
    let (_, metrics) = http_text(server.http, "GET", "/metrics", b"").await;
    for line in [
        "ratelimit_store_calls_total{store=\"default\"} 4",
        "ratelimit_store_calls_total{store=\"side\"} 4",
        "ratelimit_store_errors_total{store=\"side\"} 0",
        "ratelimit_store_up{store=\"default\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }

    // A stores file that no longer reads: an ERROR, the stores in force
    // kept (the minute still counts on `side`).
    std::fs::write(&stores, "side:\n  type: postgres\n").unwrap();
    let logged = |wanted: &'static str| {
        let log = log.clone();
        async move {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains(wanted))
        }
    };
    wait_until(
        "the bad stores file logged",
        Duration::from_secs(10),
        || logged("stores file invalid; keeping the stores in force"),
    )
    .await;
    // One that reads but differs: a WARN, taking effect at the next start.
    std::fs::write(&stores, "side:\n  type: memory\nmore:\n  type: memory\n").unwrap();
    wait_until(
        "the changed stores file logged",
        Duration::from_secs(10),
        || logged("stores file changed; the new stores take effect at the next start"),
    )
    .await;
    let answer = client
        .should_rate_limit(request("d", &[&[("k", "w")]]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, 1);
    let (_, body) = http_text(
        server.http,
        "POST",
        "/explain",
        explain_body("w").as_bytes(),
    )
    .await;
    assert!(body.contains(r#""store":"side""#), "{body}");
    server.stop().await;
}
