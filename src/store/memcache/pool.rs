//! Connections to the memcached servers: each server keeps up to
//! `MEMCACHE_MAX_IDLE_CONNS` idle connections; a call takes one (or dials
//! one) and gives it back only when the call ended cleanly, so a
//! connection a timeout cut in the middle of a reply is never reused.

use memcache_async::ascii::Protocol;
use parking_lot::Mutex;
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to memcached: TCP, TLS over TCP or a unix socket.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// One connection, speaking memcached's text protocol.
pub(super) type Conn = Protocol<Box<dyn Io>>;

/// One memcached server and its idle connections.
pub(super) struct Server {
    /// As configured: `host:port` or a unix socket path.
    pub(super) addr: String,
    idle: Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("idle", &self.idle.lock().len())
            .finish()
    }
}

impl Server {
    pub(super) fn new(addr: String) -> Self {
        Self {
            addr,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle connection, or a new one.
    pub(super) async fn take(&self, tls: Option<&Arc<ClientConfig>>) -> io::Result<Conn> {
        if let Some(conn) = self.idle.lock().pop() {
            return Ok(conn);
        }
        Ok(Protocol::new(dial(&self.addr, tls).await?))
    }

    /// Keeps `conn` for the next call, unless `max_idle` are kept already.
    pub(super) fn give_back(&self, conn: Conn, max_idle: usize) {
        let mut idle = self.idle.lock();
        if idle.len() < max_idle {
            idle.push(conn);
        }
    }
}

/// Opens a stream to `addr`: a path is a unix socket (as the reference's
/// client reads an address holding a `/`), anything else `host:port` over
/// TCP, with TLS when `tls` is given.
async fn dial(addr: &str, tls: Option<&Arc<ClientConfig>>) -> io::Result<Box<dyn Io>> {
    if addr.contains('/') {
        let stream = tokio::net::UnixStream::connect(addr).await?;
        return Ok(Box::new(stream));
    }
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "memcached address without a port",
        )
    })?;
    // SRV targets end with a dot (a fully qualified name); the system's
    // resolver takes the name without it.
    let host = host.strip_suffix('.').unwrap_or(host);
    let tcp = tokio::net::TcpStream::connect((
        host.trim_start_matches('[').trim_end_matches(']'),
        parse_port(port)?,
    ))
    .await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => Ok(Box::new(tcp)),
        Some(config) => {
            let name = super::tls::server_name(host)
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(config))
                .connect(name, tcp)
                .await?;
            Ok(Box::new(stream))
        }
    }
}

fn parse_port(port: &str) -> io::Result<u16> {
    port.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "memcached port is not a number",
        )
    })
}
