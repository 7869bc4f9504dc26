//! Test harness shared by the integration tests: real servers on free
//! loopback ports, started and stopped by each test.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod envoy;
pub mod grpc;
pub mod http;
pub mod redis;
pub mod tls;

use std::sync::Once;

/// Installs a test-writer tracing subscriber once per test binary.
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
    });
}
