//! Tests that need a store server on PATH, started by the tests on free
//! loopback ports: `redis-server` and `redis-cli` (standalone, Sentinel and
//! Cluster) and `memcached`: the stores against the model and each other,
//! faults, hostile input, the operator views and RLQS on Redis, and the
//! simulated WAN of `support::wan`. Tests that need only *a* Cluster share
//! one per run (`support::redis::shared_cluster`).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod cluster;
mod conformance;
mod faults;
mod hostile;
mod insight;
mod lease;
mod lease_faults;
mod lease_model;
mod memcached;
mod model;
mod redact;
mod redis;
mod rlqs;
mod tables;
mod wan;
