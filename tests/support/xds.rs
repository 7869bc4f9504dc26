//! `AdsServer`: a test xDS management server (ADS, state of the world) on
//! a free loopback port. The test sets the rule snapshot; every open
//! stream gets the snapshot when it subscribes and again whenever it
//! changes, each response with a fresh nonce. Every request floodgate
//! sends (subscription, ACK, NACK) is recorded with its stream's headers.
//! The server can stop (its streams end) and come back on the same port
//! with the same state.

use floodgate::RATE_LIMIT_CONFIG_TYPE;
use floodgate::proto::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use floodgate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use floodgate::proto::ratelimit::config::ratelimit::v3 as rls_conf;
use prost::Message as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

/// One rule set as the server sends it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub version: String,
    pub resources: Vec<rls_conf::RateLimitConfig>,
}

/// A request received from a client, with what identifies its stream.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Streams are numbered from 1 in the order they opened.
    pub stream: u64,
    pub headers: MetadataMap,
    pub request: DiscoveryRequest,
}

/// A response sent: which version went out under which nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub stream: u64,
    pub version: String,
    pub nonce: String,
}

#[derive(Default)]
struct State {
    snapshot: Option<watch::Sender<Option<Snapshot>>>,
    seen: parking_lot::Mutex<Vec<Seen>>,
    sent: parking_lot::Mutex<Vec<Sent>>,
    streams: AtomicU64,
    nonces: AtomicU64,
}

/// PEM material for serving TLS, requiring client certificates signed by
/// `client_ca` when it is set (mTLS).
#[derive(Clone)]
pub struct ServerTls {
    pub cert: String,
    pub key: String,
    pub client_ca: Option<String>,
}

/// A running test ADS server.
pub struct AdsServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    tls: Option<ServerTls>,
    token: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

#[derive(Clone)]
struct Service {
    state: Arc<State>,
    stop: CancellationToken,
}

impl AdsServer {
    /// Serves on a free port, with no rules until [`AdsServer::set`].
    pub async fn start(tls: Option<ServerTls>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (snapshot, _) = watch::channel(None);
        let state = Arc::new(State {
            snapshot: Some(snapshot),
            ..State::default()
        });
        let mut server = Self {
            addr: listener.local_addr().unwrap(),
            state,
            tls,
            token: CancellationToken::new(),
            handle: None,
        };
        server.serve(listener);
        server
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let token = CancellationToken::new();
        let service = Service {
            state: self.state.clone(),
            stop: token.clone(),
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.tls {
            let mut config =
                ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key));
            if let Some(ca) = &tls.client_ca {
                config = config.client_ca_root(Certificate::from_pem(ca));
            }
            builder = builder.tls_config(config).unwrap();
        }
        let router = builder.add_service(AggregatedDiscoveryServiceServer::new(service));
        let stop = token.clone().cancelled_owned();
        self.handle = Some(tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop)
                .await
                .expect("test ads server failed");
        }));
        self.token = token;
    }

    /// Replaces the rule set; every subscribed stream is sent it.
    pub fn set(&self, version: &str, resources: Vec<rls_conf::RateLimitConfig>) {
        let snapshot = Snapshot {
            version: version.to_owned(),
            resources,
        };
        if let Some(sender) = &self.state.snapshot {
            sender.send_replace(Some(snapshot));
        }
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }

    /// Every response sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.state.sent.lock().clone()
    }

    /// The nonce under which `version` was last sent.
    pub fn nonce_of(&self, version: &str) -> Option<String> {
        self.sent()
            .into_iter()
            .rev()
            .find(|sent| sent.version == version)
            .map(|sent| sent.nonce)
    }

    /// The request answering the response sent under `nonce`, if any.
    pub fn reply_to(&self, nonce: &str) -> Option<Seen> {
        self.seen()
            .into_iter()
            .find(|seen| seen.request.response_nonce == nonce)
    }

    /// Stops serving: open streams end, the port closes. State is kept.
    pub async fn stop(&mut self) {
        self.token.cancel();
        if let Some(handle) = self.handle.take() {
            handle.await.expect("test ads server panicked");
        }
    }

    /// Serves again on the same port, with the same state.
    pub async fn restart(&mut self) {
        let listener = super::grpc::bind_retrying(self.addr).await;
        self.serve(listener);
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let headers = request.metadata().clone();
        let mut incoming = request.into_inner();
        let state = self.state.clone();
        let stop = self.stop.clone();
        let stream = state.streams.fetch_add(1, Ordering::SeqCst) + 1;
        let mut snapshots = match &state.snapshot {
            Some(sender) => sender.subscribe(),
            None => return Err(Status::internal("no snapshot channel")),
        };
        let (responses, outgoing) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut subscribed = false;
            loop {
                let send_now = tokio::select! {
                    () = stop.cancelled() => return,
                    message = incoming.message() => match message {
                        Ok(Some(request)) => {
                            state.seen.lock().push(Seen {
                                stream,
                                headers: headers.clone(),
                                request,
                            });
                            // The first request subscribes: send what there is.
                            let first = !subscribed;
                            subscribed = true;
                            first
                        }
                        _ => return,
                    },
                    changed = snapshots.changed(), if subscribed => {
                        if changed.is_err() {
                            return;
                        }
                        true
                    }
                };
                if !send_now {
                    continue;
                }
                let Some(snapshot) = snapshots.borrow_and_update().clone() else {
                    continue;
                };
                let nonce = format!("nonce-{}", state.nonces.fetch_add(1, Ordering::SeqCst) + 1);
                state.sent.lock().push(Sent {
                    stream,
                    version: snapshot.version.clone(),
                    nonce: nonce.clone(),
                });
                let response = DiscoveryResponse {
                    version_info: snapshot.version,
                    resources: snapshot.resources.iter().map(any).collect(),
                    canary: false,
                    type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                    nonce,
                };
                if responses.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(outgoing)))
    }
}

/// A rule set packed as xDS sends it.
pub fn any(config: &rls_conf::RateLimitConfig) -> prost_types::Any {
    prost_types::Any {
        type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
        value: config.encode_to_vec(),
    }
}

/// A `RateLimitConfig` named `name` for `domain`.
pub fn config(
    name: &str,
    domain: &str,
    descriptors: Vec<rls_conf::RateLimitDescriptor>,
) -> rls_conf::RateLimitConfig {
    rls_conf::RateLimitConfig {
        name: name.to_owned(),
        domain: domain.to_owned(),
        descriptors,
    }
}

/// A descriptor `key` limited to `requests_per_unit` per `unit`.
pub fn limit(
    key: &str,
    unit: rls_conf::RateLimitUnit,
    requests_per_unit: u32,
) -> rls_conf::RateLimitDescriptor {
    rls_conf::RateLimitDescriptor {
        key: key.to_owned(),
        rate_limit: Some(rls_conf::RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit,
            ..rls_conf::RateLimitPolicy::default()
        }),
        ..rls_conf::RateLimitDescriptor::default()
    }
}
