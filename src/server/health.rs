//! Whether this instance is serving, mirrored into HTTP `/healthcheck` and
//! gRPC `grpc.health.v1.Health`.
//!
//! Serving means: started and not shutting down, the store connected (Redis
//! reachable at least once), and, when `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`
//! is set, the rule index in force has at least one domain.

use crate::config::Index;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// gRPC health service names reported as SERVING / NOT_SERVING: the overall
/// server ("") and the reference service's name.
const HEALTH_SERVICES: [&str; 2] = ["", "ratelimit"];

/// Shared health state; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Serving has started and shutdown has not begun.
    started: AtomicBool,
    /// The index in force has at least one domain.
    has_rules: AtomicBool,
    /// The store has connected.
    store_ready: AtomicBool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    require_rules: bool,
    reporter: HealthReporter,
    /// Serialises publishing to gRPC health: the flags are read under it, so
    /// the last publish always reflects the latest flags. A tokio lock
    /// because publishing awaits the reporter.
    publish: tokio::sync::Mutex<()>,
}

impl Health {
    /// Not yet serving; `index` is the rule index in force at start.
    pub(crate) fn new(
        reporter: HealthReporter,
        require_rules: bool,
        index: &Index,
        store_ready: bool,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                started: AtomicBool::new(false),
                has_rules: AtomicBool::new(!index.is_empty()),
                store_ready: AtomicBool::new(store_ready),
                require_rules,
                reporter,
                publish: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Whether this instance should receive traffic.
    pub(crate) fn is_serving(&self) -> bool {
        let inner = &self.inner;
        inner.started.load(Ordering::Acquire)
            && inner.store_ready.load(Ordering::Acquire)
            && (!inner.require_rules || inner.has_rules.load(Ordering::Acquire))
    }

    /// Marks serving as started (`true`) or shutting down (`false`).
    pub(crate) async fn set_started(&self, started: bool) {
        self.inner.started.store(started, Ordering::Release);
        self.publish().await;
    }

    /// Records that the store has connected.
    pub(crate) async fn set_store_ready(&self, ready: bool) {
        self.inner.store_ready.store(ready, Ordering::Release);
        self.publish().await;
    }

    /// Records the rule index now in force.
    pub(crate) async fn set_rules(&self, index: &Index) {
        self.inner
            .has_rules
            .store(!index.is_empty(), Ordering::Release);
        self.publish().await;
    }

    /// Publishes whether the named store `name` answers, as the gRPC
    /// health service `store/NAME` (the instance's own services follow
    /// the process-wide store alone).
    pub(crate) async fn set_named_store(&self, name: &str, up: bool) {
        let status = if up {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.inner
            .reporter
            .set_service_status(format!("store/{name}"), status)
            .await;
    }

    async fn publish(&self) {
        let _guard = self.inner.publish.lock().await;
        let status = if self.is_serving() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in HEALTH_SERVICES {
            self.inner.reporter.set_service_status(name, status).await;
        }
    }
}
