//! floodgate: a global rate-limit decision service speaking Envoy's RLS v3 API.
//!
//! Module map. ARCHITECTURE.md has the layer
//! rule (which module may import which; `tests/tidy.rs` enforces it), the
//! request's path, the code map file by file and the invariants.
//!
//! - `descriptor`: request vocabulary shared by every layer.
//! - `config`: rule files in, validated into a descriptor index, reloaded
//!   when the rule directory changes; or rules over xDS (`config::xds`, an
//!   ADS client).
//! - `limiter`: the decision, with the reference service's semantics.
//! - `server`: gRPC (with optional TLS/mTLS) and HTTP (`/json`,
//!   `/rlconfig`, `/healthcheck`, `/metrics`) over the limiter.
//! - `metrics`: every metric, rendered for Prometheus (floodgate's names,
//!   and the reference's through a statsd_exporter mapping) and sent to statsd.
//! - `insight`: operator views that never count (top lists by domain).
//! - `otel`: OpenTelemetry spans of calls and store round trips, exported
//!   over OTLP when `TRACING_ENABLED`.
//! - `rlqs`: Envoy's Rate Limit Quota Service over the same rules and
//!   store: a rule's budget split across the Envoys reporting a bucket.
//! - [`proto`]: the code generated from `proto/`, once, for every layer
//!   that speaks proto.
//! - `store`: where counters live: the embedded memory store or Redis
//!   (standalone, Sentinel, Cluster).
//! - `settings`, `telemetry`, `shutdown`: process settings, logging and
//!   signals, used by the binary.
//! - [`algorithm`]: pure counting math over an injected `now`.
//! - `clock`: the one reader of the system clock; a manual clock for tests.
//!
//! Stores know nothing of descriptors; algorithms know nothing of I/O.

// No index that can panic on a request path: indexes and slices go through
// `get` or iterators (unit tests may index).
#![cfg_attr(not(test), warn(clippy::indexing_slicing))]

// Modules are private: what the binary, the tests and the benchmarks use is
// re-exported below, once each. `algorithm` (pure math, benchmarked piece
// by piece) and `proto` (the generated wire types clients need) stay
// public as modules.
pub mod algorithm;
mod clock;
mod config;
mod descriptor;
mod insight;
mod limiter;
mod metrics;
mod otel;
pub mod proto;
mod rlqs;
mod server;
mod settings;
mod shutdown;
mod store;
mod telemetry;

pub use clock::{Clock, ManualClock, SystemClock, UnixMillis};
pub use config::xds::{
    Backoff, RATE_LIMIT_CONFIG_TYPE, RuleFeed, XdsClient, XdsError, XdsOptions, XdsTls,
};
pub use config::{
    Action, AuditPage, Change, ConfigError, Index, KeyedEntry, LoadOptions, Lookup, Page,
    RedactError, Redactor, Source, StoreInfo, TableEntry, TableError, TableSummary, Tables, Unkept,
    Window, Writing, load_dir, load_sources,
};
pub use descriptor::{Descriptor, Entry, RateLimitOverride, Request, Unit};
pub use insight::TopRecorder;
pub use limiter::{
    Code, DEFAULT_STORE, FailureMode, HeaderNames, LimitError, Limiter, LimiterOptions, Response,
    StoreEntry,
};
pub use metrics::{Mapper, MapperError, Metrics, ReloadStats};
pub use otel::{
    ExportProtocol, MEMCACHE_STORE_SPAN, MEMORY_STORE_SPAN, REDIS_STORE_SPAN, Tracing,
    TracingError, TracingSettings,
};
pub use rlqs::state::StreamBounds;
pub use rlqs::{RlqsOptions, Unmatched};
pub use server::{
    AccessOptions, ExplainError, GrpcAt, GrpcListener, Http2Bounds, LineProblem, Listeners,
    ReloadOptions, ServeError, ServeOptions, StatsExport, StoresWatch, TlsOptions, TokensError,
    explain_json, serve, serve_with_debug,
};
pub use settings::reference as settings_reference;
pub use settings::{
    BackendType, DurationError, Env, LOCAL_STORE, NamedKind, NamedStore, ServeArgs, Settings,
    SettingsError, open_stores, parse_stores, read_stores_file, store_catalog,
};
pub use shutdown::cancel_on_signal;
pub use store::rlqs::{DemandRegistry, DemandReport, Grant, Member};
pub use store::{
    Batch, CounterId, Fetch, GivenBack, MemcacheConfig, MemcacheServers, MemcacheStore,
    MemcacheTls, MemoryStore, Op, RedisConfig, RedisMode, RedisStore, RedisTls, Settled,
    SnapshotError, SnapshotRead, Store, StoreError, StoreKind, Unused,
};
pub use telemetry::{TelemetryError, error_chain, init as init_logging};
