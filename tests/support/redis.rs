//! Real redis-server processes on free loopback ports: one standalone server
//! per test, or a 3-master cluster built with `redis-cli --cluster create`.
//! Every process is killed and reaped on drop.

use super::{free_port, freeze, poll_until, signal};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const INSTALL_HINT: &str = "redis-server not found: install it (Debian: apt-get install redis-server redis-tools) or set REDIS_SERVER_BIN";

fn server_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("REDIS_SERVER_BIN") {
        return PathBuf::from(bin);
    }
    which("redis-server").unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

fn cli_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("REDIS_CLI_BIN") {
        return PathBuf::from(bin);
    }
    which("redis-cli").unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// One redis-server process.
pub struct RedisServer {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
    /// Extra `redis-cli` arguments (TLS).
    cli_args: Vec<String>,
}

impl RedisServer {
    /// Starts a standalone server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments, retrying on a port
    /// collision.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_retrying("redis-server", |port, dir| {
            (standalone_args(port, dir, extra), Vec::new())
        })
    }

    /// Launches the server `args_for(port, dir)` describes on a free port,
    /// trying again with another port (and directory) up to five times;
    /// `args_for` also gives the `redis-cli` arguments that reach it.
    fn start_retrying(
        what: &str,
        args_for: impl Fn(u16, &Path) -> (Vec<String>, Vec<String>),
    ) -> Self {
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().unwrap();
            let (args, cli_args) = args_for(port, dir.path());
            match Self::launch(port, dir, &args, cli_args) {
                Ok(server) => return server,
                Err(log) => last_log = log,
            }
        }
        panic!("{what} did not start; last log:\n{last_log}");
    }

    /// Spawns `redis-server args… --logfile <dir>/redis.log` and waits for
    /// PING; on failure stops it and returns its log.
    fn launch(
        port: u16,
        dir: tempfile::TempDir,
        args: &[String],
        cli_args: Vec<String>,
    ) -> Result<Self, String> {
        let log = dir.path().join("redis.log");
        let child = Command::new(server_bin())
            .args(args)
            .arg("--logfile")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("{INSTALL_HINT}: {err}"));
        let mut server = Self {
            port,
            child,
            dir,
            cli_args,
        };
        if server.wait_ready(Duration::from_secs(10)) {
            Ok(server)
        } else {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            server.stop();
            Err(text)
        }
    }

    /// Starts a standalone server on a given free `port`.
    pub fn start_on(port: u16) -> Self {
        match Self::spawn(port, tempfile::tempdir().unwrap(), &[]) {
            Ok(server) => server,
            Err(log) => panic!("redis-server did not start on {port}:\n{log}"),
        }
    }

    /// Starts a Sentinel with the config file `conf` (copied, since Sentinel
    /// rewrites it).
    pub fn start_sentinel(conf: &Path) -> Self {
        Self::start_retrying("redis sentinel", |port, dir| {
            let own = dir.join("sentinel.conf");
            std::fs::copy(conf, &own).unwrap();
            let args = vec![
                own.to_string_lossy().into_owned(),
                "--sentinel".to_owned(),
                "--port".to_owned(),
                port.to_string(),
                "--bind".to_owned(),
                "127.0.0.1".to_owned(),
            ];
            (args, Vec::new())
        })
    }

    /// Starts a server on `port` again (after [`RedisServer::stop`]).
    pub fn restart(&mut self, extra: &[&str]) {
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        match Self::spawn(self.port, dir, extra) {
            Ok(server) => *self = server,
            Err(log) => panic!("redis-server did not restart:\n{log}"),
        }
    }

    fn spawn(port: u16, dir: tempfile::TempDir, extra: &[&str]) -> Result<Self, String> {
        let args = standalone_args(port, dir.path(), extra);
        Self::launch(port, dir, &args, Vec::new())
    }

    fn wait_ready(&mut self, within: Duration) -> bool {
        poll_until(within, Duration::from_millis(20), || {
            if self.child.try_wait().ok().flatten().is_some() {
                return Some(false);
            }
            self.cli(&["PING"])
                .is_some_and(|out| out.trim() == "PONG")
                .then_some(true)
        })
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server; `None` if it failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let mut all: Vec<&str> = self.cli_args.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        cli(self.port, &all)
    }

    /// Starts a server that speaks only TLS on its port, with the PEM files
    /// `ca.pem`, `server.pem` and `server.key` in `certs`; with
    /// `require_client_cert`, clients must present a certificate signed by
    /// the CA (`client.pem`/`client.key` there are used by `redis-cli`).
    pub fn start_tls(certs: &Path, require_client_cert: bool) -> Self {
        let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
        Self::start_retrying("redis-server with TLS", |port, dir| {
            let mut args = standalone_args(0, dir, &[]);
            let auth_clients = if require_client_cert { "yes" } else { "no" };
            args.extend(
                [
                    "--tls-port",
                    &port.to_string(),
                    "--tls-cert-file",
                    &file("server.pem"),
                    "--tls-key-file",
                    &file("server.key"),
                    "--tls-ca-cert-file",
                    &file("ca.pem"),
                    "--tls-auth-clients",
                    auth_clients,
                ]
                .map(str::to_owned),
            );
            let cli_args = [
                "--tls",
                "--cacert",
                &file("ca.pem"),
                "--cert",
                &file("client.pem"),
                "--key",
                &file("client.key"),
            ]
            .map(str::to_owned)
            .to_vec();
            (args, cli_args)
        })
    }

    /// The server's data directory (holds its log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Freezes the process ([`freeze`]). [`RedisServer::stop`] still
    /// kills it.
    pub fn pause(&self) {
        freeze(self.child.id());
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.id(), "-CONT");
    }

    /// Kills the process and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Arguments of a standalone server on `port` (0: no plaintext port) with
/// no persistence and its files in `dir`, then `extra`.
fn standalone_args(port: u16, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .into_iter()
        .chain(["--save", "", "--appendonly", "no", "--dir"])
        .map(str::to_owned)
        .collect();
    args.push(dir.to_string_lossy().into_owned());
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args
}

/// Runs `redis-cli -p port args…`, returning stdout on success.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new(cli_bin())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The 3-master Cluster every test of this binary shares when it needs
/// only *a* Cluster (tests keep apart by key prefix; tests that kill,
/// pause, flush or count calls on nodes start their own). Started on first
/// use, and stopped when the test process exits: a static is never dropped,
/// so a watchdog shell waits for the process to end (bounded: at most two
/// hours), then kills the nodes and removes their directories.
pub fn shared_cluster() -> &'static RedisCluster {
    static SHARED: std::sync::OnceLock<RedisCluster> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = RedisCluster::start(3);
        let mut watchdog = Command::new("sh");
        watchdog
            .arg("-c")
            .arg(
                r#"owner=$1; shift
i=0
while [ $i -lt 36000 ] && kill -0 "$owner" 2>/dev/null; do sleep 0.2; i=$((i+1)); done
while [ "$1" != "--" ]; do kill -9 "$1" 2>/dev/null; shift; done; shift
rm -rf "$@""#,
            )
            .arg("sh")
            .arg(std::process::id().to_string());
        for node in &cluster.nodes {
            watchdog.arg(node.child.id().to_string());
        }
        watchdog.arg("--");
        for node in &cluster.nodes {
            watchdog.arg(node.dir());
        }
        // Never waited for: it outlives the test process by design.
        #[allow(clippy::zombie_processes)]
        watchdog
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs the shared cluster's watchdog");
        cluster
    })
}

/// A Redis Cluster of `n` masters and no replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` cluster-enabled servers and joins them.
    pub fn start(masters: usize) -> Self {
        Self::start_with(masters, 0, &["--cluster-node-timeout", "2000"])
    }

    /// Starts `masters` masters with `replicas` replicas each (as
    /// `redis-cli --cluster create --cluster-replicas` places them: the
    /// first `masters` nodes are the masters), each server with `extra`
    /// arguments.
    pub fn start_with(masters: usize, replicas: usize, extra: &[&str]) -> Self {
        let args: Vec<&str> = ["--cluster-enabled", "yes"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_with(&args))
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(RedisServer::addr));
        args.extend([
            "--cluster-replicas".to_owned(),
            replicas.to_string(),
            "--cluster-yes".to_owned(),
        ]);
        let out = Command::new(cli_bin())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        let ok = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
            cluster.is_ok().then_some(true)
        });
        assert!(ok, "cluster did not reach cluster_state:ok");
        cluster
    }

    fn is_ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.cli(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
        }) && self.replicas_attached()
    }

    /// Whether every replica is in sync with its master (`--cluster create`
    /// sets them up a moment after the masters; a replica that never synced
    /// would refuse to fail over).
    fn replicas_attached(&self) -> bool {
        let Some(table) = self
            .nodes
            .first()
            .and_then(|n| n.cli(&["CLUSTER", "NODES"]))
        else {
            return false;
        };
        let masters = table.lines().filter(|l| l.contains("master")).count();
        let in_sync = self
            .nodes
            .iter()
            .filter(|n| {
                n.cli(&["INFO", "replication"]).is_some_and(|info| {
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
            })
            .count();
        in_sync == self.nodes.len() - masters
    }

    /// The node serving `slot` as node `asked` sees it (`CLUSTER NODES`):
    /// its index in `nodes`.
    pub fn serving(&self, asked: usize, slot: u16) -> Option<usize> {
        let table = self.nodes[asked].cli(&["CLUSTER", "NODES"])?;
        table.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if !fields.get(2)?.contains("master") || fields.get(2)?.contains("fail") {
                return None;
            }
            let serves = fields.iter().skip(8).any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                    _ => false,
                }
            });
            let port: u16 = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
            serves
                .then(|| self.nodes.iter().position(|n| n.port == port))
                .flatten()
        })
    }

    /// The replica of master `i` (its index in `nodes`).
    pub fn replica_of(&self, i: usize) -> Option<usize> {
        let id = self.nodes[i].cli(&["CLUSTER", "MYID"])?;
        let id = id.trim();
        self.nodes.iter().position(|n| {
            n.cli(&["INFO", "replication"])
                .is_some_and(|info| info.contains("role:slave"))
                && n.cli(&["CLUSTER", "NODES"]).is_some_and(|nodes| {
                    nodes
                        .lines()
                        .any(|l| l.contains("myself") && l.contains(id))
                })
        })
    }

    /// The node holding `key` (it must exist), by looking on each.
    pub fn holder(&self, key: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.cli(&["EXISTS", key]).is_some_and(|r| r.trim() == "1"))
    }

    /// The slot of `key`, as Redis computes it.
    pub fn slot(&self, key: &str) -> u16 {
        let nodes = self.nodes.first().unwrap();
        nodes
            .cli(&["CLUSTER", "KEYSLOT", key])
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Starts moving `slot` from node `from` to node `to` as
    /// `redis-cli --cluster reshard` does, and moves its keys; the slot
    /// stays MIGRATING / IMPORTING until [`RedisCluster::finish_move`].
    pub fn begin_move(&self, slot: u16, from: usize, to: usize) {
        let slot = slot.to_string();
        let id = |i: usize| {
            self.nodes[i]
                .cli(&["CLUSTER", "MYID"])
                .unwrap()
                .trim()
                .to_owned()
        };
        let (from_id, to_id) = (id(from), id(to));
        let ok = |node: &RedisServer, args: &[&str]| {
            let out = node.cli(args).unwrap_or_default();
            assert!(
                out.trim() == "OK" || out.trim() == "NOKEY",
                "{args:?}: {out}"
            );
        };
        ok(
            &self.nodes[to],
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
        );
        ok(
            &self.nodes[from],
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
        );
        let keys = self.nodes[from]
            .cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"])
            .unwrap();
        let port = self.nodes[to].port.to_string();
        for key in keys.lines().filter(|k| !k.is_empty()) {
            ok(
                &self.nodes[from],
                &["MIGRATE", "127.0.0.1", &port, key, "0", "5000"],
            );
        }
    }

    /// Gives `slot` to node `to` on every node (the last step of a move).
    pub fn finish_move(&self, slot: u16, to: usize) {
        let slot = slot.to_string();
        let to_id = self.nodes[to]
            .cli(&["CLUSTER", "MYID"])
            .unwrap()
            .trim()
            .to_owned();
        for node in &self.nodes {
            let out = node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
            assert_eq!(out.as_deref().map(str::trim), Some("OK"));
        }
    }

    /// Seed list in the `REDIS_URL` cluster form: `h1:p1,h2:p2,…`.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::addr)
            .collect::<Vec<_>>()
            .join(",")
    }
}
