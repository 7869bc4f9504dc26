//! The server's background work: rule reloads, health following the store,
//! stats export, leases' steps and the store's own work, each owned by the
//! server's task tracker and ended by shutdown (the store's by the drain).

use super::*;

/// Background work owned by the server: every loop ends on `shutdown`,
/// but the store's own, which ends on `drained`.
pub(super) fn spawn_background(
    tracker: &TaskTracker,
    limiter: &Arc<Limiter<StoreKind>>,
    options: &ServeOptions,
    health: &Health,
    shutdown: &CancellationToken,
    drained: &CancellationToken,
) {
    if let Some(reload) = &options.reload {
        let watcher = Watcher::new(
            reload.dir.clone(),
            reload.load.clone(),
            limiter.rules().clone(),
            reload.stats.clone(),
            reload.baseline.clone(),
        );
        let (health, limiter) = (health.clone(), limiter.clone());
        tracker.spawn(
            watcher
                .run(reload.interval, shutdown.clone(), move |index| {
                    let (health, limiter) = (health.clone(), limiter.clone());
                    async move {
                        health.set_rules(&index).await;
                        // Table entries are resolved again for the new
                        // rules off the request path (a whole table's
                        // worth of work, on a blocking thread).
                        let refreshed = tokio::task::spawn_blocking(move || {
                            let rules = limiter.rules().load_full();
                            limiter.tables().refresh(&rules, limiter.metrics());
                        });
                        if let Err(err) = refreshed.await {
                            warn!(
                                error = &err as &dyn std::error::Error,
                                "table refresh failed"
                            );
                        }
                    }
                })
                .instrument(info_span!("config_watch")),
        );
    }
    if let Some(feed) = &options.rule_feed {
        let (mut feed, limiter, health) = (feed.clone(), limiter.clone(), health.clone());
        let shutdown = shutdown.clone();
        tracker.spawn(
            async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        changed = feed.changed() => if !changed { return },
                    }
                    health.set_rules(&limiter.rules().load()).await;
                }
            }
            .instrument(info_span!("xds_rules")),
        );
    }
    {
        let (store, clock) = (limiter.store().clone(), limiter.clock().clone());
        let drained = drained.clone();
        tracker.spawn(
            async move { store.maintain(clock, drained).await }.instrument(info_span!("store")),
        );
    }
    for (_, name, store) in limiter.named_stores() {
        let (store, clock) = (store.clone(), limiter.clock().clone());
        let drained = drained.clone();
        tracker.spawn(
            async move { store.maintain(clock, drained).await }
                .instrument(info_span!("store", rl.store = name.to_owned())),
        );
    }
    if limiter.named_stores().next().is_some() {
        // Each named store's state in the log and gRPC health
        // (`store/NAME`); the instance's own health follows the
        // process-wide store alone: a named store that fails affects only
        // the rules on it.
        let (limiter, health, shutdown) = (limiter.clone(), health.clone(), shutdown.clone());
        tracker.spawn(async move {
            let mut poll = tokio::time::interval(STORE_HEALTH_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut was: Vec<Option<bool>> = vec![None; limiter.named_stores().count()];
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = poll.tick() => {}
                }
                for (i, (at, name, store)) in limiter.named_stores().enumerate() {
                    let up = store.is_ready() && store.answers().await;
                    if let Some(stats) = limiter.metrics().stores.get(at) {
                        stats.up.store(up, std::sync::atomic::Ordering::Relaxed);
                    }
                    let Some(last) = was.get_mut(i) else { continue };
                    if *last != Some(up) {
                        if up {
                            info!(rl.store = name, "store answers");
                        } else if last.is_some() {
                            warn!(
                                rl.store = name,
                                "store does not answer; the rules on it answer by its failure_mode"
                            );
                        }
                        *last = Some(up);
                        health.set_named_store(name, up).await;
                    }
                }
            }
        });
    }
    {
        let (limiter, shutdown) = (limiter.clone(), shutdown.clone());
        tracker.spawn(
            async move { limiter.run_leases(shutdown).await }.instrument(info_span!("leases")),
        );
    }
    if let Some(watch) = options.stores_file.clone() {
        let shutdown = shutdown.clone();
        tracker.spawn(watch_stores_file(watch, shutdown).instrument(info_span!("stores_file")));
    }
    if super::shared_tables::redis_of(limiter).is_some() {
        // Limit tables kept in Redis: loaded once connected, then followed.
        let (limiter, shutdown) = (limiter.clone(), shutdown.clone());
        tracker.spawn(
            super::shared_tables::follow(limiter, shutdown).instrument(info_span!("tables")),
        );
    }
    {
        // The live page's last 15 minutes: the counters sampled every step.
        let (metrics, shutdown) = (limiter.metrics().clone(), shutdown.clone());
        tracker.spawn(
            async move {
                let mut tick = tokio::time::interval(crate::metrics::history::STEP);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        _ = tick.tick() => metrics.record_history(std::time::Instant::now()),
                    }
                }
            }
            .instrument(info_span!("history")),
        );
    }
    if options.health_follows_store {
        // Health follows whether the store answers, every second: a Redis
        // lost later turns the instance NOT_SERVING, and back.
        let (limiter, health, shutdown) = (limiter.clone(), health.clone(), shutdown.clone());
        tracker.spawn(async move {
            let mut poll = tokio::time::interval(STORE_HEALTH_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut serving = limiter.store().is_ready();
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = poll.tick() => {
                        let answers = limiter.store().is_ready()
                            && limiter.tables().ready()
                            && limiter.store().answers().await;
                        if answers != serving {
                            serving = answers;
                            health.set_store_ready(answers).await;
                            if answers {
                                info!("store answers again; serving");
                            } else {
                                warn!("store does not answer; health NOT_SERVING");
                            }
                        }
                    }
                }
            }
        });
    } else if !limiter.store().is_ready() || !limiter.tables().ready() {
        // Health stays NOT_SERVING until the store is connected (and limit
        // tables kept in Redis are loaded), so probes never route traffic
        // to an instance that can only answer UNAVAILABLE, or that would
        // answer tenants the rules' defaults.
        let (limiter, health, shutdown) = (limiter.clone(), health.clone(), shutdown.clone());
        tracker.spawn(async move {
            let mut poll = tokio::time::interval(STORE_READY_POLL);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = poll.tick() => if limiter.store().is_ready() && limiter.tables().ready() { break },
                }
            }
            health.set_store_ready(true).await;
            info!("store ready; serving");
        });
    }
}

/// Checks the stores file every second. Stores are opened at start only:
/// a change that reads is logged at WARN (it takes effect at the next
/// start), one that does not at ERROR; the stores in force are kept.
async fn watch_stores_file(watch: super::StoresWatch, shutdown: CancellationToken) {
    let mut poll = tokio::time::interval(STORE_HEALTH_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = watch.text.clone();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = poll.tick() => {}
        }
        let text = match std::fs::read_to_string(&watch.path) {
            Ok(text) => text,
            Err(err) => format!("\0{err}"),
        };
        if text == seen {
            continue;
        }
        let path = watch.path.display();
        match text.strip_prefix('\0') {
            Some(err) => {
                tracing::error!(stores_file = %path, error = err, "stores file unreadable; keeping the stores in force")
            }
            None => match (watch.check)(&text) {
                Err(err) => {
                    tracing::error!(stores_file = %path, error = %err, "stores file invalid; keeping the stores in force")
                }
                Ok(()) if text == watch.text => {
                    info!(stores_file = %path, "stores file back as it was at start")
                }
                Ok(()) => {
                    warn!(stores_file = %path, "stores file changed; the new stores take effect at the next start")
                }
            },
        }
        seen = text;
    }
}

/// RLQS reads the rules, store, clock and metrics the RLS limiter uses.
pub(super) fn rlqs_sources(limiter: &Limiter<StoreKind>) -> crate::rlqs::Sources {
    crate::rlqs::Sources {
        rules: limiter.rules().clone(),
        store: limiter.store().clone(),
        clock: limiter.clock().clone(),
        metrics: limiter.metrics().clone(),
        redactor: limiter.redactor().clone(),
    }
}
