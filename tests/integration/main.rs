//! floodgate's integration tests: one binary, real servers on free loopback
//! ports, started and stopped by each test.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod cluster;
mod conformance;
mod e2e;
mod e2e_rlqs;
mod faults;
mod gateway;
mod grpc;
mod hostile;
mod http;
mod insight;
mod metadata;
mod model;
mod ops;
mod otel;
mod page;
mod redis;
mod reload;
mod rlqs;
mod snapshot;
mod tls;
mod xds;
