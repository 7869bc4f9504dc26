//! A TCP forwarder on a free loopback port whose backend can be changed:
//! what a DNS name or a Kubernetes Service does when a failover repoints
//! it. Connections already open stay with the old backend; new ones go to
//! the new one.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub addr: SocketAddr,
    backend: Arc<Mutex<SocketAddr>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `backend` (`127.0.0.1:port`).
    pub async fn start(backend: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = Arc::new(Mutex::new(backend.parse().unwrap()));
        let target = Arc::clone(&backend);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = *target.lock();
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self {
            addr,
            backend,
            accept,
        }
    }

    /// New connections go to `backend` from now on.
    pub fn repoint(&self, backend: &str) {
        *self.backend.lock() = backend.parse().unwrap();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
