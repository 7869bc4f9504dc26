//! `TestServer`: floodgate serving on 127.0.0.1 port 0, with a client.

use arc_swap::ArcSwap;
use floodgate::Clock;
use floodgate::StoreKind;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use floodgate::{Index, LoadOptions, Source, load_sources};
use floodgate::{Limiter, LimiterOptions};
use floodgate::{Listeners, ServeError, ServeOptions, serve};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A running floodgate; `shutdown()` stops it and surfaces its error.
pub struct TestServer {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub limiter: Arc<Limiter<StoreKind>>,
    token: CancellationToken,
    handle: Option<JoinHandle<Result<(), ServeError>>>,
}

/// Builds an index from inline YAML rule files `(name, text)`.
pub fn index(files: &[(&str, &str)]) -> Index {
    let sources: Vec<Source> = files
        .iter()
        .map(|(name, text)| Source {
            name: (*name).to_owned(),
            text: (*text).to_owned(),
        })
        .collect();
    load_sources(&sources, &LoadOptions::default()).expect("test rules are valid")
}

impl TestServer {
    /// Serves `index` from `store`, reading time from `clock`.
    pub async fn start(
        index: Index,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
    ) -> Self {
        Self::start_with(index, store, clock, options, default_serve_options()).await
    }

    /// Serves `index` with explicit serving options (rule reload, health
    /// policy).
    pub async fn start_with(
        index: Index,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        serve_options: ServeOptions,
    ) -> Self {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_on(grpc, index, store, clock, options, serve_options).await
    }

    /// Serves whatever index `rules` holds (shared with what swaps it, an
    /// xDS client say), with explicit serving options.
    pub async fn start_with_rules(
        rules: Arc<ArcSwap<Index>>,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        serve_options: ServeOptions,
    ) -> Self {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_shared(grpc, rules, store, clock, options, serve_options).await
    }

    /// Like [`TestServer::start`], but with the gRPC listener on `grpc_addr`
    /// (a port a previous server used, e.g. to restart behind an Envoy that
    /// knows that port). Binding retries briefly in case the old socket is
    /// still being released.
    pub async fn start_on(
        grpc_addr: SocketAddr,
        index: Index,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
    ) -> Self {
        Self::start_on_with(
            grpc_addr,
            index,
            store,
            clock,
            options,
            default_serve_options(),
        )
        .await
    }

    /// [`TestServer::start_on`] with explicit serving options.
    pub async fn start_on_with(
        grpc_addr: SocketAddr,
        index: Index,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        serve_options: ServeOptions,
    ) -> Self {
        let grpc = bind_retrying(grpc_addr).await;
        Self::serve_on(grpc, index, store, clock, options, serve_options).await
    }

    async fn serve_on(
        grpc: tokio::net::TcpListener,
        index: Index,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        serve_options: ServeOptions,
    ) -> Self {
        let rules = Arc::new(ArcSwap::from_pointee(index));
        Self::serve_shared(grpc, rules, store, clock, options, serve_options).await
    }

    async fn serve_shared(
        grpc: tokio::net::TcpListener,
        rules: Arc<ArcSwap<Index>>,
        store: StoreKind,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        serve_options: ServeOptions,
    ) -> Self {
        super::init_tracing();
        let listeners = Listeners {
            grpc: grpc.into(),
            http: tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            metrics: None,
        };
        let floodgate::GrpcAt::Tcp(grpc_addr) = listeners.grpc.local().unwrap() else {
            unreachable!("bound on TCP above")
        };
        let http_addr = listeners.http.local_addr().unwrap();
        let limiter = Arc::new(Limiter::new(rules, store, clock, options));
        let token = CancellationToken::new();
        let handle = tokio::spawn(serve(
            limiter.clone(),
            listeners,
            serve_options,
            token.clone(),
        ));
        Self {
            grpc_addr,
            http_addr,
            limiter,
            token,
            handle: Some(handle),
        }
    }

    /// A connected RLS client. The listener is bound before serving starts,
    /// so connecting needs no wait.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    /// A connected channel to the gRPC port.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Stops the server and fails the test if it returned an error.
    pub async fn shutdown(mut self) {
        self.token.cancel();
        if let Some(handle) = self.handle.take() {
            handle
                .await
                .expect("server task panicked")
                .expect("server failed");
        }
    }
}

/// Serving options for tests: a short drain.
fn default_serve_options() -> ServeOptions {
    ServeOptions {
        shutdown_grace: Duration::from_secs(5),
        ..ServeOptions::default()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// Binds `addr`, retrying for up to 5 s while it is still in use.
pub async fn bind_retrying(addr: SocketAddr) -> tokio::net::TcpListener {
    let bound = std::cell::RefCell::new(None);
    let last_error = std::cell::RefCell::new(None);
    super::poll_until_async(Duration::from_secs(5), Duration::from_millis(20), || {
        let (bound, last_error) = (&bound, &last_error);
        async move {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    *bound.borrow_mut() = Some(listener);
                    Some(true)
                }
                Err(err) => {
                    tracing::debug!(error = %err, %addr, "port busy; retrying bind");
                    *last_error.borrow_mut() = Some(err);
                    None
                }
            }
        }
    })
    .await;
    bound
        .into_inner()
        .unwrap_or_else(|| panic!("cannot bind {addr}: {:?}", last_error.into_inner()))
}

/// A request for `domain` with one descriptor per `(key, value)` list.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: (*key).to_owned(),
                        value: (*value).to_owned(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Sends `request` and returns the response, panicking on a gRPC error.
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}
