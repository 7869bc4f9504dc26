//! Turns SIGINT/SIGTERM into a cancelled token.

use tokio_util::sync::CancellationToken;

/// Cancels `token` when SIGINT or SIGTERM arrives (or returns at once if the
/// signal handlers cannot be installed, cancelling too, so the process never
/// runs without a way to stop it).
pub async fn cancel_on_signal(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(err) => {
                tracing::error!(
                    error = &err as &dyn std::error::Error,
                    "cannot install SIGTERM handler"
                );
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    token.cancel();
}
