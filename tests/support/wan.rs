//! A TCP forwarder on a free loopback port that puts a wide-area network
//! between a client and a backend: every byte waits a one-way delay in each
//! direction (40 ms by default, so a round trip costs 80 ms), in order, and
//! without limiting throughput to one chunk per delay: a reader per
//! direction stamps each chunk with the instant it arrived, and a writer
//! sends it on once stamp + delay has passed, so many chunks are in flight
//! at once. `partition()` cuts the link as a client sees a partition: every
//! open connection is dropped at once, and until `heal()` each new one is
//! reset right after it is accepted.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// The one-way delay of a link between regions when a test names none.
pub const DEFAULT_ONE_WAY: Duration = Duration::from_millis(40);

/// Chunks in flight per direction of one connection; a reader that gets
/// this far ahead of its writer waits (no unbounded buffer).
const CHUNKS_IN_FLIGHT: usize = 1024;

/// Bytes read at once.
const CHUNK_BYTES: usize = 16 * 1024;

/// What the accept loop and the connections share with the handle.
struct Link {
    one_way: Mutex<Duration>,
    partitioned: AtomicBool,
    /// Connections accepted and forwarded.
    connections: AtomicU64,
    /// Connections reset on accept during a partition.
    refused: AtomicU64,
    /// Every forwarded connection's task: aborted all at once by a
    /// partition, and on drop.
    open: Mutex<JoinSet<()>>,
}

pub struct WanProxy {
    pub addr: SocketAddr,
    link: Arc<Link>,
    accept: JoinHandle<()>,
}

impl WanProxy {
    /// Starts forwarding to `backend` (`127.0.0.1:port`) with `one_way` of
    /// delay in each direction.
    pub async fn start(backend: &str, one_way: Duration) -> Self {
        let backend: SocketAddr = backend.parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let link = Arc::new(Link {
            one_way: Mutex::new(one_way),
            partitioned: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            open: Mutex::new(JoinSet::new()),
        });
        let shared = Arc::clone(&link);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                // The flag is read under the lock `partition()` aborts
                // under, so no connection accepted before a partition
                // outlives it.
                let mut open = shared.open.lock();
                while open.try_join_next().is_some() {}
                if shared.partitioned.load(Ordering::SeqCst) {
                    shared.refused.fetch_add(1, Ordering::Relaxed);
                    // Closed with a reset, not a FIN: refused as quickly as
                    // the kernel can say so.
                    let _ = inbound.set_zero_linger();
                    drop(inbound);
                    continue;
                }
                shared.connections.fetch_add(1, Ordering::Relaxed);
                open.spawn(forward(inbound, backend, Arc::clone(&shared)));
            }
        });
        Self { addr, link, accept }
    }

    /// `127.0.0.1:port`, the address clients dial instead of the backend's.
    pub fn url(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }

    /// Drops every open connection at once; until [`WanProxy::heal`], every
    /// new connection is reset as soon as it is accepted.
    pub fn partition(&self) {
        let mut open = self.link.open.lock();
        self.link.partitioned.store(true, Ordering::SeqCst);
        open.abort_all();
    }

    /// New connections are forwarded again.
    pub fn heal(&self) {
        let _open = self.link.open.lock();
        self.link.partitioned.store(false, Ordering::SeqCst);
    }

    /// Changes the one-way delay of every chunk written from now on (chunks
    /// stay in order: one due earlier than the chunk before it waits for
    /// that one).
    pub fn set_delay(&self, one_way: Duration) {
        *self.link.one_way.lock() = one_way;
    }

    /// Connections accepted and forwarded so far.
    pub fn connections(&self) -> u64 {
        self.link.connections.load(Ordering::Relaxed)
    }

    /// Connections reset on accept during a partition so far.
    pub fn refused(&self) -> u64 {
        self.link.refused.load(Ordering::Relaxed)
    }
}

impl Drop for WanProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.link.open.lock().abort_all();
    }
}

/// Carries one accepted connection to `backend` and back, each direction
/// delayed, until both directions have ended.
async fn forward(inbound: TcpStream, backend: SocketAddr, link: Arc<Link>) {
    let Ok(outbound) = TcpStream::connect(backend).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (client_read, client_write) = inbound.into_split();
    let (backend_read, backend_write) = outbound.into_split();
    // Both directions run in this task, so aborting it (a partition, or
    // drop) closes both sockets at once.
    tokio::join!(
        delayed(client_read, backend_write, &link),
        delayed(backend_read, client_write, &link),
    );
}

/// One direction: `from` is read as fast as it sends, and each chunk is
/// written to `to` one delay after it arrived. At end of input, `to` is
/// shut down for writing after the last chunk, so a half-close crosses too.
async fn delayed(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: &Link) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0; CHUNK_BYTES];
        // Ends at end of input, on an error, or when the writer is gone.
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if tx.send((Instant::now(), buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        // Ends when the reader has ended and every chunk is written, or on
        // a write error.
        while let Some((arrived, chunk)) = rx.recv().await {
            let one_way = *link.one_way.lock();
            tokio::time::sleep_until(arrived + one_way).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
