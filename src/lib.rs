//! floodgate: a global rate-limit decision service speaking Envoy's RLS v3 API.
//!
//! Module map. ARCHITECTURE.md has the layer
//! rule (which module may import which; `tests/tidy.rs` enforces it), the
//! request's path, the code map file by file and the invariants.
//!
//! - [`descriptor`]: request vocabulary shared by every layer.
//! - [`config`]: rule files in, validated into a descriptor index, reloaded
//!   when the rule directory changes; or rules over xDS (`config::xds`, an
//!   ADS client).
//! - [`limiter`]: the decision, with the reference service's semantics.
//! - [`server`]: gRPC (with optional TLS/mTLS) and HTTP (`/json`,
//!   `/rlconfig`, `/healthcheck`, `/metrics`) over the limiter.
//! - [`metrics`]: every metric, rendered for Prometheus (floodgate's names,
//!   and the reference's through a statsd_exporter mapping) and sent to statsd.
//! - [`insight`]: operator views that never count (top lists by domain).
//! - [`otel`]: OpenTelemetry spans of calls and store round trips, exported
//!   over OTLP when `TRACING_ENABLED`.
//! - [`rlqs`]: Envoy's Rate Limit Quota Service over the same rules and
//!   store: a rule's budget split across the Envoys reporting a bucket.
//! - [`proto`]: the code generated from `proto/`, once, for every layer
//!   that speaks proto.
//! - [`store`]: where counters live: the embedded memory store or Redis
//!   (standalone, Sentinel, Cluster).
//! - [`settings`], [`telemetry`], [`shutdown`]: process settings, logging and
//!   signals, used by the binary.
//! - [`algorithm`]: pure counting math over an injected `now`.
//! - [`clock`]: the one reader of the system clock; a manual clock for tests.
//!
//! Stores know nothing of descriptors; algorithms know nothing of I/O.

// No index that can panic on a request path: indexes and slices go through
// `get` or iterators (unit tests may index).
#![cfg_attr(not(test), warn(clippy::indexing_slicing))]

pub mod algorithm;
pub mod clock;
pub mod config;
pub mod descriptor;
pub mod insight;
pub mod limiter;
pub mod metrics;
pub mod otel;
pub mod proto;
pub mod rlqs;
pub mod server;
pub mod settings;
pub mod shutdown;
pub mod store;
pub mod telemetry;
