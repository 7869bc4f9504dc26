//! The `floodgate` binary: parses the command line, sets up logging and the
//! runtime, and turns errors into messages and exit codes (1 for a bad
//! configuration or startup failure, 2 for usage errors, from clap).
#![allow(clippy::print_stdout, clippy::print_stderr)] // the binary's own output

use clap::{Parser, Subcommand};

#[path = "main/commands.rs"]
mod commands;
use commands::{
    CheckArgs, ExplainArgs, SettingsDocArgs, print_config_error, run_check_config, run_explain,
    run_settings_doc,
};

/// mimalloc instead of glibc malloc: under load glibc's arena locks showed up
/// as futex waits and ~14% of CPU in malloc/free (bench/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use floodgate::Limiter;
use floodgate::LoadOptions;
use floodgate::Mapper;
use floodgate::Metrics;
use floodgate::SystemClock;
use floodgate::XdsClient;
use floodgate::{BackendType, Env, ServeArgs, Settings};
use floodgate::{GrpcAt, Listeners, ReloadOptions, ServeError, ServeOptions, StatsExport};
use floodgate::{
    Index, Tables, Unkept, cancel_on_signal, error_chain, init_logging, load_dir, serve_with_debug,
};
use floodgate::{MEMCACHE_STORE_SPAN, MEMORY_STORE_SPAN, REDIS_STORE_SPAN, Tracing, TracingError};
use floodgate::{MemcacheStore, MemoryStore, RedisStore, StoreKind};
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// A global rate-limit decision service speaking Envoy's RLS v3 API.
#[derive(Debug, Parser)]
#[command(name = "floodgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve ShouldRateLimit over gRPC, with health and HTTP endpoints.
    Serve(Box<ServeArgs>),
    /// Validate every rule file in DIR; print each error, or one line per domain.
    CheckConfig(CheckArgs),
    /// Explain a request (a POST /json body) against the rules in DIR, with
    /// empty counters; prints what POST /explain would answer.
    Explain(ExplainArgs),
    /// Print the settings reference (docs/settings.md's table), generated
    /// from the settings' declarations; with --write, put it in FILE.
    #[command(hide = true)]
    SettingsDoc(SettingsDocArgs),
}

/// The command line; run as `ratelimit` (Envoy Gateway's `/bin/ratelimit`,
/// the reference's binary name) without a subcommand, floodgate serves, as
/// the reference does.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_reference = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .is_some_and(|name| name == "ratelimit");
    // Every subcommand clap knows (and `help`, and the top-level help and
    // version flags), so `ratelimit explain ...` explains and a subcommand
    // added later needs no change here.
    let has_subcommand = args.get(1).is_some_and(|arg| {
        ["help", "--help", "-h", "--version", "-V"].contains(&arg.to_str().unwrap_or_default())
            || <Cli as clap::CommandFactory>::command()
                .get_subcommands()
                .any(|sub| arg == sub.get_name())
    });
    if as_reference && !has_subcommand {
        args.insert(1.min(args.len()), "serve".into());
    }
    args
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(command_line());
    let env: Env = std::env::vars().collect();
    match cli.command {
        Command::Serve(args) => run_serve(&args, &env),
        Command::CheckConfig(args) => run_check_config(&args),
        Command::Explain(args) => run_explain(&args),
        Command::SettingsDoc(args) => run_settings_doc(&args),
    }
}

/// What stops `serve` after the runtime started.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Serve(ServeError),
    #[error(
        "redis not connected {0:?} after start (REDIS_STARTUP_MAX_ELAPSED_TIME): giving up, as the reference does"
    )]
    RedisStartup(std::time::Duration),
    #[error("cannot start tracing")]
    Tracing(#[source] TracingError),
    #[error("cannot use memcached")]
    Memcache(#[source] floodgate::StoreError),
}

fn run_serve(args: &ServeArgs, env: &Env) -> ExitCode {
    let settings = match Settings::resolve(args, env) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("error: {}", error_chain(&err));
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = init_logging(&settings.log_level, settings.log_format) {
        eprintln!("error: {}", error_chain(&err));
        return ExitCode::FAILURE;
    }
    for (var, why) in &settings.stats.ignored {
        tracing::debug!(
            setting = var,
            reason = why,
            "reference setting accepted and ignored"
        );
    }
    // The mapping file is checked before any port is bound, like the rules.
    let mapper = if settings.metrics_addr.is_some() {
        let mapper = match &settings.stats.mapper_yaml {
            Some(path) => match Mapper::from_file(path) {
                Ok(mapper) => mapper,
                Err(err) => {
                    eprintln!(
                        "error: PROMETHEUS_MAPPER_YAML {}: {}",
                        path.display(),
                        error_chain(&err)
                    );
                    return ExitCode::FAILURE;
                }
            },
            None => Mapper::reference_default(settings.stats.response_time_as_ms),
        };
        Some(Arc::new(mapper))
    } else {
        None
    };
    // Rules are validated before any port is bound: a bad file never
    // produces a half-started service.
    let options = LoadOptions {
        merge_domains: settings.merge_domain_config,
        ignore_dotfiles: settings.ignore_dotfiles,
        fixed_windows_only: settings.store == BackendType::Memcache,
        // The stores rules may name (`store: NAME`), in the places the
        // limiter counts in.
        stores: floodgate::store_catalog(&settings.stores, settings.store == BackendType::Memory),
    };
    // With xDS (CONFIG_TYPE=GRPC_XDS_SOTW) rules come from the management
    // server only: no rule directory is read or watched.
    let file_rules = settings.xds.is_none();
    // Fingerprint the directory before loading it, so a change made during
    // the load is reloaded.
    let reload = file_rules.then(|| ReloadOptions {
        interval: settings.config_poll_interval,
        ..ReloadOptions::new(settings.config_dir.clone(), options.clone())
    });
    let loaded = match &reload {
        Some(reload) => load_dir(&settings.config_dir, &options).inspect(|_| {
            reload.stats.record_initial_load();
        }),
        None => Ok(Index::empty()),
    };
    let index = match loaded {
        Ok(index) => index,
        Err(err) => {
            print_config_error(&err);
            return ExitCode::FAILURE;
        }
    };
    for s in index.summaries() {
        tracing::info!(rl.domain = %s.domain, descriptors = s.descriptors, rules = s.rules, "domain loaded");
    }
    // memcached is set up on the runtime (an SRV record is asked there);
    // the other stores are ready here.
    let store = match settings.store {
        BackendType::Memcache => None,
        BackendType::Memory => {
            let store = MemoryStore::with_snapshot(
                settings.memory_store_max_bytes,
                settings.memory_store_snapshot.clone(),
            );
            // A snapshot that cannot be read stops the start: starting
            // empty would hand every caller a fresh quota. The operator
            // removes (or fixes) the file to start empty on purpose.
            match store.load_snapshot(floodgate::Clock::now(&SystemClock)) {
                Ok(read) if read.kept == 0 && read.dropped == 0 => {}
                // `counters` is what was restored; `dropped`, what the
                // byte budget did not hold (the least recently used).
                Ok(read) => {
                    tracing::info!(
                        counters = read.kept,
                        dropped = read.dropped,
                        "memory store snapshot read"
                    );
                }
                Err(err) => {
                    eprintln!(
                        "error: {} (remove the file to start with empty counters)",
                        error_chain(&err)
                    );
                    return ExitCode::FAILURE;
                }
            }
            Some(StoreKind::Memory(store))
        }
        BackendType::Redis => match &settings.redis {
            Some(redis) => {
                tracing::info!(redis.url = %redis.main.redacted_url(), "using the redis store");
                Some(StoreKind::Redis {
                    main: RedisStore::new(redis.main.clone()),
                    per_second: redis.per_second.clone().map(RedisStore::new),
                })
            }
            None => {
                eprintln!("error: redis store selected without redis settings");
                return ExitCode::FAILURE;
            }
        },
    };
    // Limit tables are read back before any port is bound: a log that
    // cannot be read stops the start (serving without the tables would
    // give every tenant the rule's default).
    let tables = match (settings.store, &settings.tables_path) {
        (BackendType::Redis, _) => Tables::shared(),
        (BackendType::Memcache, _) => Tables::unkept(Unkept::Memcache),
        (BackendType::Memory, None) => Tables::unkept(Unkept::NoPath),
        (BackendType::Memory, Some(path)) => match Tables::open(path) {
            Ok(tables) => tables,
            Err(err) => {
                eprintln!("error: {}", error_chain(&err));
                return ExitCode::FAILURE;
            }
        },
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // A woken task waits its turn instead of running at once (tokio's LIFO
    // slot): the requests one Redis reply (or one socket read) answers are
    // all answered before their connections write, so answers share writes
    // instead of leaving one by one (bench/RESULTS.md, "The LIFO slot").
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!(
                "error: cannot start the async runtime: {}",
                error_chain(&err)
            );
            return ExitCode::FAILURE;
        }
    };
    let rules = Arc::new(arc_swap::ArcSwap::from_pointee(index));
    let xds = match &settings.xds {
        Some(xds) => match XdsClient::new(xds.clone(), options, rules.clone(), Arc::default()) {
            Ok(client) => Some(client),
            Err(err) => {
                eprintln!("error: {}", error_chain(&err));
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let result = runtime.block_on(async {
        let token = CancellationToken::new();
        tokio::spawn(cancel_on_signal(token.clone()));
        let rule_feed = xds.as_ref().map(XdsClient::feed);
        let xds_task = xds.map(|client| {
            tokio::spawn(
                client
                    .run(token.clone())
                    .instrument(tracing::info_span!("xds")),
            )
        });
        if let Some(feed) = &rule_feed
            && !settings.force_start_without_initial_config
        {
            // As the reference: nothing listens until the first rules are
            // in (FORCE_START_WITHOUT_INITIAL_CONFIG serves at once).
            tracing::info!("waiting for the first rules from the xds server");
            let mut feed = feed.clone();
            tokio::select! {
                () = token.cancelled() => {
                    stop_xds(xds_task).await;
                    return Ok(());
                }
                _ = feed.first() => {}
            }
        }
        // A failed bind returns at once; dropping the runtime then ends the
        // xDS client.
        let grpc_at = match &settings.grpc_uds {
            Some(path) => GrpcAt::Unix(path.clone()),
            None => GrpcAt::Tcp(settings.grpc_addr),
        };
        let listeners = Listeners::bind(grpc_at, settings.http_addr, settings.metrics_addr)
            .await
            .map_err(StartError::Serve)?;
        let debug =
            match settings.stats.debug_addr {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| {
                        StartError::Serve(ServeError::Bind {
                            addr: addr.to_string(),
                            source,
                        })
                    },
                )?),
                None => None,
            };
        let store = match (store, &settings.memcache) {
            (Some(store), _) => store,
            (None, Some(config)) => {
                let store = MemcacheStore::connect(config.clone())
                    .await
                    .map_err(StartError::Memcache)?;
                tracing::info!(memcache.servers = ?store.servers(), "using the memcache store");
                StoreKind::Memcache(store)
            }
            (None, None) => {
                return Err(StartError::Memcache(floodgate::StoreError::Config {
                    reason: "memcache store selected without memcache settings",
                }));
            }
        };
        let others = floodgate::open_stores(
            &settings.stores,
            settings.store == BackendType::Memory,
            settings.memory_store_max_bytes,
        )
        .await
        .map_err(StartError::Memcache)?;
        for (store, named) in others.iter().zip(&settings.stores) {
            tracing::info!(rl.store = %store.name, kind = named.kind.label(), "store named by rules");
        }
        let metrics = Metrics::new(settings.near_limit_ratio, settings.metrics_max_series);
        let limiter = Arc::new(
            Limiter::new(
                rules,
                store,
                Arc::new(SystemClock),
                settings.limiter.clone(),
            )
            .with_stores(others)
            .with_metrics(Arc::new(metrics))
            .with_redactor(settings.redactor.clone())
            .with_tables(Arc::new(tables)),
        );
        // Inside the runtime: the gRPC exporter's connection runs on it.
        let tracing = match &settings.tracing {
            Some(tracing) => Some(Tracing::start(tracing).map_err(StartError::Tracing)?),
            None => None,
        };
        let serve_options = ServeOptions {
            reload,
            rule_feed,
            tracer: tracing.as_ref().map(|t| {
                t.request_tracer(match settings.store {
                    BackendType::Memory => MEMORY_STORE_SPAN,
                    BackendType::Redis => REDIS_STORE_SPAN,
                    BackendType::Memcache => MEMCACHE_STORE_SPAN,
                })
            }),
            stats: StatsExport {
                mapper,
                extra_tags: settings.stats.extra_tags.clone(),
                statsd: settings.stats.statsd.clone(),
            },
            ..settings.serve
        };
        // REDIS_STARTUP_MAX_ELAPSED_TIME: no first connection by then stops
        // the process (a graceful stop, then exit 1).
        let startup_limit = settings.redis.as_ref().and_then(|r| r.startup_max_elapsed);
        let gave_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(limit) = startup_limit {
            let (limiter, token, gave_up) = (limiter.clone(), token.clone(), gave_up.clone());
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + limit;
                while !limiter.store().is_ready() && tokio::time::Instant::now() < deadline {
                    tokio::select! {
                        () = token.cancelled() => return,
                        () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
                    }
                }
                if !limiter.store().is_ready() {
                    tracing::error!(after = ?limit, "redis not connected in time; stopping");
                    gave_up.store(true, std::sync::atomic::Ordering::SeqCst);
                    token.cancel();
                }
            });
        }
        let served =
            serve_with_debug(limiter, listeners, debug, serve_options, token.clone()).await;
        token.cancel();
        stop_xds(xds_task).await;
        // Last in the shutdown order: export the spans still queued.
        if let Some(tracing) = tracing
            && let Err(err) = tracing.shutdown().await
        {
            tracing::warn!(error = &err as &dyn Error, "spans lost at shutdown");
        }
        served.map_err(StartError::Serve)?;
        match startup_limit {
            Some(limit) if gave_up.load(std::sync::atomic::Ordering::SeqCst) => {
                Err(StartError::RedisStartup(limit))
            }
            _ => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = &err as &dyn Error, "server failed");
            eprintln!("error: {}", error_chain(&err));
            ExitCode::FAILURE
        }
    }
}

/// Awaits the xDS client's task (its token already cancelled).
async fn stop_xds(task: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = task
        && let Err(err) = task.await
    {
        tracing::error!(error = &err as &dyn Error, "xds client stopped abnormally");
    }
}
