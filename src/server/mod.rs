//! Assembles the listeners: gRPC (RLS, RLQS, health, reflection; plaintext
//! or TLS) and HTTP, serves them until shutdown, then drains within a grace
//! period. Owns the background tasks of a running server (the store's own
//! maintenance, rule watcher, TLS certificate watcher), all on one
//! `TaskTracker`. Knows no store variant: each store runs its own
//! background work (`StoreKind::maintain`).
//!
//! Shutdown order: health turns NOT_SERVING, listeners stop accepting,
//! in-flight requests drain within `shutdown_grace`, leased blocks are
//! given back, then the store's own work ends (the embedded store writes
//! its last snapshot, with every answer in it) and background tasks are
//! cancelled and awaited.

mod access;
mod admit;
mod aged;
mod background;
use tokio_stream::StreamExt as _;
mod grpc;
mod health;
mod http;
mod metadata;
mod options;
mod shared_tables;
mod tls;
mod uds;

use crate::config::Watcher;
use crate::limiter::Limiter;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use crate::store::StoreKind;
pub use access::{AccessOptions, LineProblem, TokensError};
use arc_swap::ArcSwap;
use health::Health;
pub use http::{ExplainError, explain_json};
pub(crate) use options::MAX_WINDOW_BYTES;
pub use options::{
    GrpcAt, GrpcListener, Http2Bounds, Listeners, ReloadOptions, ServeError, ServeOptions,
    StatsExport, StoresWatch,
};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
pub use tls::TlsOptions;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpIncoming;
use tracing::{Instrument as _, info, info_span, warn};

/// How often readiness of the store is checked until it is ready.
const STORE_READY_POLL: Duration = Duration::from_millis(50);
/// How often health asks the store whether it answers, when it follows the
/// store (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
const STORE_HEALTH_POLL: Duration = Duration::from_secs(1);

/// Serves `limiter` on `listeners` until `shutdown` is cancelled, then
/// drains and returns.
///
/// # Errors
///
/// [`ServeError`] if a server fails; a drain that outlives the grace period
/// is logged, not an error.
pub async fn serve(
    limiter: Arc<Limiter<StoreKind>>,
    listeners: Listeners,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_with_debug(limiter, listeners, None, options, shutdown).await
}

/// [`serve`], plus the debug listener (`DEBUG_HOST`/`DEBUG_PORT`:
/// `/rlconfig` and `/healthcheck`) when `debug` is given.
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_with_debug(
    limiter: Arc<Limiter<StoreKind>>,
    listeners: Listeners,
    debug: Option<TcpListener>,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    // A child token: ending this server never cancels the caller's token.
    let shutdown = shutdown.child_token();
    let grpc_addr = listeners.grpc.local().map_err(ServeError::LocalAddr)?;
    let http_addr = listeners.http.local_addr().map_err(ServeError::LocalAddr)?;
    // Everything that can fail is built before the first task is spawned,
    // so an early return leaves nothing running.
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(ServeError::Reflection)?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(ServeError::Reflection)?;
    let (access, token_bytes) =
        access::Access::new(&options.access, limiter.metrics().clone(), http::PAGE)
            .map_err(ServeError::Tokens)?;
    let access = Arc::new(access);

    let tracker = TaskTracker::new();
    tracker.spawn(
        access
            .clone()
            .watch(token_bytes, shutdown.clone())
            .instrument(info_span!("admin_tokens")),
    );
    let tls_config = match &options.tls {
        Some(tls_options) => {
            let (config, digest) = tls::load(tls_options).map_err(ServeError::Tls)?;
            let config = Arc::new(ArcSwap::new(config));
            tracker.spawn(
                tls::watch(
                    tls_options.clone(),
                    config.clone(),
                    digest,
                    shutdown.clone(),
                )
                .instrument(info_span!("tls_watch")),
            );
            Some(config)
        }
        None => None,
    };

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let health = Health::new(
        health_reporter,
        options.healthy_only_with_rules,
        &limiter.rules().load(),
        limiter.store().is_ready(),
    );
    health.set_started(true).await;
    // Cancelled only once every listener has drained: the store's own work
    // (the embedded store's last snapshot) must see the last answers.
    let drained = CancellationToken::new();
    background::spawn_background(&tracker, &limiter, &options, &health, &shutdown, &drained);

    // Both servers stop accepting only once health has been switched off,
    // so a load balancer polling health sees NOT_SERVING before connections
    // close.
    let draining = CancellationToken::new();
    tracker.spawn({
        let (shutdown, draining, health) = (shutdown.clone(), draining.clone(), health.clone());
        async move {
            shutdown.cancelled().await;
            info!("shutdown started");
            health.set_started(false).await;
            draining.cancel();
        }
    });

    // The per-connection bound is HTTP/2's own SETTINGS_MAX_CONCURRENT_STREAMS:
    // callers (Envoy included) queue streams beyond it themselves, and the
    // server pays nothing per request for it (a tower concurrency limit
    // would take and release a semaphore permit on every call).
    let max_streams = u32::try_from(options.max_concurrent_per_connection).unwrap_or(u32::MAX);
    // What one connection may make floodgate hold: its streams (above),
    // each stream's header block, and the request bytes it sent unread,
    // bounded by the windows (docs/deployment.md states the bound). Set
    // here, not left to hyper's defaults, so an upgrade cannot move them.
    let http2 = options.http2;
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(max_streams))
        .http2_max_header_list_size(http2.max_header_list_bytes)
        .initial_stream_window_size(http2.stream_window_bytes)
        .initial_connection_window_size(http2.connection_window_bytes);
    if let Some(age) = options.max_connection_age {
        builder = builder.max_connection_age(age);
    }
    // The grace is each connection's own deadline (see aged.rs): tonic's
    // grace would replace the GOAWAY at the age.
    let lifetime = options
        .max_connection_age
        .zip(options.max_connection_age_grace)
        .map(|(age, grace)| age.saturating_add(grace));
    // Calls shed as they arrive when their wait behind the calls queued
    // would make them late (see admit/mod.rs).
    let runtime = tokio::runtime::Handle::current().metrics();
    let queue = Arc::new(admit::Queue::new(runtime.num_workers()));
    let busy = admit::Busy::new(
        Box::new(admit::RuntimeBusy(runtime)),
        std::time::Instant::now(),
    );
    let admission = Arc::new(admit::Admission::new(
        queue,
        busy,
        limiter.shedding().failure_mode,
        &crate::limiter::LimitError::Shed.to_string(),
        limiter.metrics().clone(),
    ));
    let router = builder
        .layer(tower::util::MapResponseLayer::new(
            grpc::undecodable_is_invalid_argument,
        ))
        .layer(tower::util::MapRequestLayer::new(grpc::stamp_arrival))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            RateLimitServiceServer::new(
                grpc::RlsService::new(limiter.clone()).with_tracer(options.tracer.clone()),
            )
            .max_decoding_message_size(options.max_request_bytes),
        )
        .add_service(
            RateLimitQuotaServiceServer::new(crate::rlqs::RlqsService::new(
                background::rlqs_sources(&limiter),
                options.rlqs.clone(),
                draining.clone(),
            ))
            .max_decoding_message_size(options.max_request_bytes),
        );
    let grpc_stop = draining.clone().cancelled_owned();
    // One boxed future either way: the plaintext and TLS incoming streams
    // have different types.
    let grpc: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
        match (listeners.grpc, tls_config) {
            (GrpcListener::Tcp(listener), Some(config)) => {
                let (incoming, accept_loop) = tls::incoming(listener, config, draining.clone());
                tracker.spawn(accept_loop.instrument(info_span!("grpc_tls_accept")));
                let incoming = incoming.map(move |tls| {
                    tls.map(|io| {
                        aged::Aged::new(admit::Admitted::new(io, admission.clone()), lifetime)
                    })
                });
                Box::pin(router.serve_with_incoming_shutdown(incoming, grpc_stop))
            }
            (GrpcListener::Tcp(listener), None) => {
                let incoming =
                    TcpIncoming::from(listener)
                        .with_nodelay(Some(true))
                        .map(move |tcp| {
                            tcp.map(|io| {
                                aged::Aged::new(
                                    admit::Admitted::new(io, admission.clone()),
                                    lifetime,
                                )
                            })
                        });
                Box::pin(router.serve_with_incoming_shutdown(incoming, grpc_stop))
            }
            // Settings refuse TLS on a unix socket (GRPC_UDS), as a peer on
            // the same host needs none; served plaintext if asked anyway.
            (GrpcListener::Unix(listener), _) => {
                // Header blocks re-encoded, so that every client stack's
                // authority is served (see uds.rs).
                let incoming =
                    tokio_stream::wrappers::UnixListenerStream::new(listener).map(move |unix| {
                        unix.map(|io| {
                            let io =
                                admit::Admitted::new(uds::Rewritten::new(io), admission.clone());
                            aged::Aged::new(io, lifetime)
                        })
                    });
                Box::pin(router.serve_with_incoming_shutdown(incoming, grpc_stop))
            }
        };
    let reloads = options
        .reload
        .as_ref()
        .map(|r| r.stats.clone())
        .or_else(|| options.rule_feed.as_ref().map(|feed| feed.stats().clone()));
    if let Some(statsd) = &options.stats.statsd {
        tracker.spawn(
            crate::metrics::statsd::run(
                limiter.metrics().clone(),
                reloads.clone(),
                statsd.clone(),
                shutdown.clone(),
            )
            .instrument(info_span!("statsd")),
        );
    }
    if let Some(listener) = debug {
        let router = http::debug_router(health.clone(), limiter.clone(), reloads.clone());
        if let Ok(addr) = listener.local_addr() {
            info!(debug.addr = %addr, "debug listener");
        }
        spawn_listener(&tracker, listener, router, &draining, "debug");
    }
    if let Some(listener) = listeners.metrics {
        let mapper = options
            .stats
            .mapper
            .clone()
            .unwrap_or_else(|| Arc::new(crate::metrics::Mapper::reference_default(false)));
        let router = http::metrics_router(
            health.clone(),
            limiter.clone(),
            reloads.clone(),
            &options.metrics_path,
            mapper,
            options.stats.extra_tags.clone(),
        );
        spawn_listener(&tracker, listener, router, &draining, "metrics");
    }
    let guard = |views: axum::Router| {
        views.route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            access::guard,
        ))
    };
    let router = http::router(
        health,
        limiter.clone(),
        reloads,
        options.max_request_bytes,
        http::rlqs::router(background::rlqs_sources(&limiter), options.rlqs.clone()),
        guard,
    );
    // The access layer decides on the peer's address.
    let http = axum::serve(
        listeners.http,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(draining.clone().cancelled_owned());

    info!(grpc.addr = %grpc_addr, grpc.tls = options.tls.is_some(), http.addr = %http_addr, "listening");
    let servers = async {
        tokio::try_join!(async { grpc.await.map_err(ServeError::Grpc) }, async {
            http.await.map_err(ServeError::Http)
        },)
    };
    let grace_elapsed = async {
        shutdown.cancelled().await;
        tokio::time::sleep(options.shutdown_grace).await;
    };
    let result = tokio::select! {
        result = servers => result.map(|_| ()),
        () = grace_elapsed => {
            warn!(grace_secs = options.shutdown_grace.as_secs(), "shutdown grace period elapsed; dropping in-flight requests");
            Ok(())
        }
    };
    // Requests have drained: the unused hits of leased blocks go back to
    // their windows before the store's connections close.
    limiter.give_back_leases().await;
    drained.cancel();
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    info!("shutdown complete");
    result
}

/// Serves an auxiliary listener (metrics, debug) on the tracker until
/// `draining`; a failure is logged, and the main listeners keep serving.
fn spawn_listener(
    tracker: &TaskTracker,
    listener: TcpListener,
    router: axum::Router,
    draining: &CancellationToken,
    name: &'static str,
) {
    let stop = draining.clone().cancelled_owned();
    tracker.spawn(
        async move {
            if let Err(err) = axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
            {
                warn!(
                    error = &err as &dyn std::error::Error,
                    listener = name,
                    "listener failed"
                );
            }
        }
        .instrument(info_span!("side_listener", listener = name)),
    );
}
