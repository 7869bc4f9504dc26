//! A real `memcached` on a free loopback port, started and stopped by the
//! test, and a plain text-protocol client to look at what it holds.

use super::{free_port, freeze, signal};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str =
    "memcached not found: install Debian's `memcached` package (scripts/test.sh does)";

pub struct Memcached {
    pub port: u16,
    child: Child,
}

impl Memcached {
    /// Starts a plaintext server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments (TLS), retrying on a port
    /// collision. The look-inside helpers ([`Memcached::get`] and the
    /// others) speak plaintext: not for a TLS server.
    pub fn start_with(extra: &[String]) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("memcached")
                .args([
                    "-l",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    "0",
                    "-m",
                    "16",
                    "-u",
                    "root",
                ])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|err| panic!("{INSTALL_HINT}: {err}"));
            let mut server = Self { port, child };
            if server.wait_listening(Duration::from_secs(10)) {
                return server;
            }
            server.stop();
        }
        panic!("memcached did not start");
    }

    fn wait_listening(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends one text-protocol command and reads the reply up to its last
    /// line (`END`, `EN`, a status line, or a value's data line).
    fn command(&self, line: &str) -> Vec<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut lines = Vec::new();
        for _ in 0..64 {
            let mut text = String::new();
            reader.read_line(&mut text).unwrap();
            let text = text.trim_end().to_owned();
            let done = matches!(text.as_str(), "END" | "EN" | "STORED" | "NOT_STORED")
                || text.starts_with("ERROR")
                || text.starts_with("HD")
                || text.starts_with("CLIENT_ERROR")
                || text.starts_with("SERVER_ERROR");
            let value = text.starts_with("VA ");
            lines.push(text);
            if value {
                let mut data = String::new();
                reader.read_line(&mut data).unwrap();
                lines.push(data.trim_end().to_owned());
                break;
            }
            if done {
                break;
            }
        }
        lines
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        let reply = self.command(&format!("mg {key} v"));
        match reply.first() {
            Some(head) if head.starts_with("VA ") => reply.get(1).cloned(),
            _ => None,
        }
    }

    /// Seconds `key` has left to live (-1: never expires), if it exists.
    pub fn ttl(&self, key: &str) -> Option<i64> {
        let reply = self.command(&format!("mg {key} t"));
        let head = reply.first()?;
        if !head.starts_with("HD") {
            return None;
        }
        head.split_whitespace()
            .find_map(|flag| flag.strip_prefix('t'))
            .and_then(|t| t.parse().ok())
    }

    /// Stores `value` under `key` (expiring in `ttl` seconds).
    pub fn set(&self, key: &str, value: &str, ttl: u32) {
        let reply = self.command(&format!("set {key} 0 {ttl} {}\r\n{value}", value.len()));
        assert_eq!(
            reply.first().map(String::as_str),
            Some("STORED"),
            "{reply:?}"
        );
    }

    /// Every key memcached holds now (`lru_crawler metadump all`, which
    /// writes them URL-encoded).
    pub fn keys(&self) -> Vec<String> {
        self.command("lru_crawler metadump all")
            .into_iter()
            .filter_map(|line| {
                line.strip_prefix("key=")
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(|key| {
                        form_urlencoded::parse(format!("k={key}").as_bytes())
                            .next()
                            .map(|(_, v)| v.into_owned())
                            .unwrap_or_default()
                    })
            })
            .collect()
    }

    /// Freezes the process ([`freeze`]).
    pub fn pause(&self) {
        freeze(self.child.id());
    }

    /// Lets a paused process run again.
    pub fn resume(&self) {
        signal(self.child.id(), "-CONT");
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.stop();
    }
}
