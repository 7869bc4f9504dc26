//! The speed ceiling for bench/run.sh: a tonic RLS server that answers OK
//! to every `ShouldRateLimit` without any work (no matching, no counting),
//! served like floodgate (multi-threaded runtime, TCP_NODELAY, mimalloc as
//! the allocator: with glibc's malloc a request's allocations cost the
//! no-op server about 2 µs more than floodgate's cost it). Whatever
//! floodgate reaches is measured against what this reaches under the same
//! load.
//!
//! ```text
//! ceiling [ADDR] [--no-lifo]   # default 127.0.0.1:8091
//! ```
//!
//! `--no-lifo` schedules its runtime as floodgate's (tokio's LIFO slot off),
//! so a comparison can also separate what floodgate's scheduling choice
//! gains from what its work costs.
#![allow(clippy::print_stderr)] // a command-line tool

use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use floodgate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::net::SocketAddr;
use std::process::ExitCode;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

/// floodgate's allocator (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers OK, one OK status per descriptor.
#[derive(Debug)]
struct Ceiling;

#[tonic::async_trait]
impl RateLimitService for Ceiling {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok.into(),
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

fn main() -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if std::env::args().any(|arg| arg == "--no-lifo") {
        #[cfg(tokio_unstable)]
        builder.disable_lifo_slot();
        #[cfg(not(tokio_unstable))]
        {
            eprintln!("error: --no-lifo needs a build with --cfg tokio_unstable");
            return ExitCode::FAILURE;
        }
    }
    match builder.build() {
        Ok(runtime) => runtime.block_on(serve()),
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> ExitCode {
    let addr: SocketAddr = match std::env::args()
        .nth(1)
        .filter(|arg| arg != "--no-lifo")
        .map_or_else(
            || Ok(SocketAddr::from(([127, 0, 0, 1], 8091))),
            |arg| arg.parse(),
        ) {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("error: bad address: {err}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("error: cannot listen on {addr}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let served = tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Ceiling))
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: server failed: {err}");
            ExitCode::FAILURE
        }
    }
}
