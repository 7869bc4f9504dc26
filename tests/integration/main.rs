//! floodgate's first integration tier: needs nothing but the floodgate
//! binary (no redis-server, Envoy, Chromium or Prometheus on PATH). Real
//! servers on free loopback ports, started and stopped by each test; the
//! other tiers are named by what they need (`redis`, `envoy`, `chromium`,
//! `prometheus_kubectl`).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod access;
mod cli;
mod grpc;
mod http;
mod overload;
mod redact;
mod reload;
mod snapshot;
mod stores;
mod tables;
mod tls;
mod uds;
mod xds;
