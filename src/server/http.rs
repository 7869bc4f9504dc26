//! The HTTP face (reference port 8080): `GET /healthcheck`.
//!
//! Knows the limiter and the health flag, nothing of stores.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared "is this instance serving" flag, mirrored into gRPC health.
#[derive(Debug, Clone, Default)]
pub(crate) struct Health {
    serving: Arc<AtomicBool>,
}

impl Health {
    pub(crate) fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Release);
    }

    pub(crate) fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }
}

/// Builds the HTTP router.
pub(crate) fn router(health: Health) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .with_state(health)
}

/// 200 `OK` while serving, 500 otherwise (reference behaviour).
async fn healthcheck(State(health): State<Health>) -> (StatusCode, &'static str) {
    if health.is_serving() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "NOT SERVING")
    }
}
