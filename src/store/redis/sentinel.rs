//! Following Sentinel's `+switch-master` announcements, so a failover is
//! seen the moment Sentinel makes it, not at the next poll.

use super::config::{RedisConfig, connection_info};
use super::fault::Signals;
use futures_util::StreamExt as _;
use redis::Client;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Wait before subscribing again after a Sentinel went away (the poll
/// still follows the master meanwhile).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// Subscribes to `+switch-master` on the Sentinel nodes, one at a time in
/// turn, and raises the redial signal whenever the master this store
/// follows is switched; until `shutdown`.
pub(super) async fn follow_switches(
    config: &RedisConfig,
    signals: &Signals,
    shutdown: &CancellationToken,
) {
    let mut parts = config.url.split(',').map(str::trim);
    let Some(name) = parts.next().filter(|n| !n.is_empty()) else {
        return;
    };
    let nodes: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
    if nodes.is_empty() {
        return;
    }
    for node in nodes.iter().cycle() {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = listen(config, node, name, signals) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
        }
    }
}

/// Listens on one Sentinel until its connection ends.
async fn listen(config: &RedisConfig, node: &str, name: &str, signals: &Signals) {
    let subscribe = async {
        let info = connection_info(node, config.sentinel_auth.as_deref(), None)?;
        let mut pubsub = Client::open(info)?.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    let mut pubsub = match tokio::time::timeout(config.connect_timeout, subscribe).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(err)) => {
            debug!(error = %err, sentinel = %node, "cannot subscribe to +switch-master");
            return;
        }
        Err(_) => {
            debug!(sentinel = %node, "subscribing to +switch-master timed out");
            return;
        }
    };
    debug!(sentinel = %node, "following +switch-master");
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        // `<master name> <old ip> <old port> <new ip> <new port>`
        let payload: String = message.get_payload().unwrap_or_default();
        if is_switch_of(&payload, name) {
            debug!(%payload, "sentinel switched the master");
            signals.redial.notify_one();
        }
    }
}

/// Whether a `+switch-master` payload is about the master named `name`.
fn is_switch_of(payload: &str, name: &str) -> bool {
    payload.split_ascii_whitespace().next() == Some(name)
}

#[cfg(test)]
mod tests {
    use super::is_switch_of;

    #[test]
    fn only_the_followed_master_triggers_a_redial() {
        assert!(is_switch_of(
            "mymaster 127.0.0.1 6379 127.0.0.1 6380",
            "mymaster"
        ));
        assert!(!is_switch_of(
            "other 127.0.0.1 6379 127.0.0.1 6380",
            "mymaster"
        ));
        assert!(!is_switch_of("mymaster2 a 1 b 2", "mymaster"));
        assert!(!is_switch_of("", "mymaster"));
    }
}
