//! What a failed call says about its connection, and the signals the lanes
//! raise for the store's maintenance task.
//!
//! Two questions are answered here, once for every mode:
//! - may the call be sent again? Only when it provably never reached Redis
//!   (its connection could not even be made): a call whose bytes may have
//!   been written may have counted, and sending it again would count twice;
//! - must the connection be replaced? A server that answers READONLY (a
//!   master demoted behind a DNS name or a Service), LOADING or MASTERDOWN
//!   keeps a healthy TCP connection, so no client reconnects by itself: the
//!   store dials afresh (and asks Sentinel again) before long.

use crate::metrics::store::CallStats;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

/// Whether `err` proves the call never reached Redis: the connection it
/// was to go on could not be made (refused). Such a call counted nothing,
/// so it may be sent once more.
pub(super) fn is_unsent(err: &RedisError) -> bool {
    err.is_connection_refusal()
}

/// Whether `err` means the connection answers for a server that cannot
/// take writes now (READONLY, LOADING, MASTERDOWN), or is gone: it must be
/// replaced, not reused.
pub(super) fn needs_redial(err: &RedisError) -> bool {
    is_readonly(err)
        || matches!(
            err.kind(),
            ErrorKind::Server(ServerErrorKind::BusyLoading | ServerErrorKind::MasterDown)
        )
        || err.is_connection_dropped()
        || err.is_unrecoverable_error()
}

/// Whether `err` came from the connection rather than from Redis's
/// answer: refused, reset, broken, closed.
pub(super) fn is_connection_failure(err: &RedisError) -> bool {
    err.is_connection_dropped() || err.is_connection_refusal() || err.is_unrecoverable_error()
}

/// Whether a connection that met `err` must be left for a fresh one:
/// [`needs_redial`], READONLY only when `leave_readonly`
/// (`REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`).
pub(super) fn must_leave(err: &RedisError, leave_readonly: bool) -> bool {
    needs_redial(err) && (leave_readonly || !is_readonly(err))
}

fn is_readonly(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Shared by a store's lanes: the redial signal and the call counters
/// behind `/metrics`.
#[derive(Debug)]
pub(super) struct Signals {
    /// Whether READONLY asks for a redial
    /// (`REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`).
    redial_on_readonly: bool,
    /// Raised when a lane met an error that [`needs_redial`]; the store's
    /// maintenance task dials afresh.
    pub(super) redial: Notify,
    calls: AtomicU64,
    requests: AtomicU64,
}

impl Signals {
    /// Signals of a store; `redial_on_readonly` as configured.
    pub(super) fn new(redial_on_readonly: bool) -> Self {
        Self {
            redial_on_readonly,
            redial: Notify::new(),
            calls: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// Counts one script call carrying `requests` requests.
    pub(super) fn count_call(&self, requests: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(
            u64::try_from(requests).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Notes a failed call: raises the redial signal when the connection
    /// must be replaced.
    pub(super) fn failed(&self, err: &RedisError) {
        if must_leave(err, self.redial_on_readonly) {
            self.redial.notify_one();
        }
    }

    /// The counters now.
    pub(super) fn stats(&self) -> CallStats {
        CallStats {
            calls: self.calls.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_unsent, needs_redial};
    use redis::RedisError;

    fn server(text: &str) -> RedisError {
        // As the client parses a server's error line.
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            Err(err) => err,
            Ok(other) => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn demoted_loading_or_masterless_servers_are_dialled_again() {
        assert!(needs_redial(&server(
            "READONLY You can't write against a read only replica."
        )));
        assert!(needs_redial(&server(
            "LOADING Redis is loading the dataset in memory"
        )));
        assert!(needs_redial(&server(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
        )));
        assert!(needs_redial(&RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))));
        // A script error or a NOSCRIPT keeps the connection.
        assert!(!needs_redial(&server("NOSCRIPT No matching script.")));
        assert!(!needs_redial(&server("ERR something")));
    }

    #[test]
    fn only_a_refused_connection_proves_nothing_was_sent() {
        assert!(is_unsent(&RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        // A reset or a broken pipe may come after the bytes were written.
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::TimedOut,
        ] {
            assert!(!is_unsent(&RedisError::from(std::io::Error::from(kind))));
        }
        assert!(!is_unsent(&server("READONLY x")));
    }
}
