//! The subcommands besides `serve`: `check-config`, `explain` and
//! `settings-doc`.

use floodgate::{
    ConfigError, Limiter, LimiterOptions, LoadOptions, MemoryStore, StoreKind, SystemClock,
};
use floodgate::{error_chain, explain_json, load_dir};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub(crate) struct SettingsDocArgs {
    /// Replace the generated table in FILE (between its markers).
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// Rule directory to explain against.
    #[arg(long, value_name = "DIR")]
    config_dir: PathBuf,
    /// The request, as the JSON body of POST /json.
    request: String,
    /// Merge rule files that name the same domain (MERGE_DOMAIN_CONFIG).
    #[arg(long)]
    merge_domain_config: bool,
    /// Skip rule files whose name starts with '.' (RUNTIME_IGNOREDOTFILES).
    #[arg(long)]
    ignore_dotfiles: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Rule directory to validate.
    dir: PathBuf,
    /// Merge rule files that name the same domain (MERGE_DOMAIN_CONFIG).
    #[arg(long)]
    merge_domain_config: bool,
    /// Skip rule files whose name starts with '.' (RUNTIME_IGNOREDOTFILES).
    #[arg(long)]
    ignore_dotfiles: bool,
}

pub(crate) fn run_settings_doc(args: &SettingsDocArgs) -> ExitCode {
    let generated = floodgate::settings_reference::markdown();
    let Some(path) = &args.write else {
        print!("{generated}");
        return ExitCode::SUCCESS;
    };
    let written = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))
        .and_then(|document| {
            floodgate::settings_reference::replace(&document, &generated)
                .ok_or_else(|| format!("{} has no generated-table markers", path.display()))
        })
        .and_then(|document| {
            std::fs::write(path, document)
                .map_err(|err| format!("cannot write {}: {err}", path.display()))
        });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn run_explain(args: &ExplainArgs) -> ExitCode {
    let options = LoadOptions {
        merge_domains: args.merge_domain_config,
        ignore_dotfiles: args.ignore_dotfiles,
        ..LoadOptions::default()
    };
    let index = match load_dir(&args.config_dir, &options) {
        Ok(index) => index,
        Err(err) => {
            print_config_error(&err);
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {}", error_chain(&err));
            return ExitCode::FAILURE;
        }
    };
    // Empty counters (a fresh embedded store), so a rule change can be
    // checked before it ships: the answer POST /explain gives on a fresh server.
    let limiter = Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index)),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions::default(),
    );
    match runtime.block_on(explain_json(&limiter, args.request.as_bytes())) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {}", error_chain(&err));
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn run_check_config(args: &CheckArgs) -> ExitCode {
    let options = LoadOptions {
        merge_domains: args.merge_domain_config,
        ignore_dotfiles: args.ignore_dotfiles,
        ..LoadOptions::default()
    };
    match load_dir(&args.dir, &options) {
        Ok(index) => {
            let summaries = index.summaries();
            if summaries.is_empty() {
                println!("{}: no domains", args.dir.display());
            }
            for s in summaries {
                println!(
                    "domain '{}': {} descriptors, {} rules",
                    s.domain, s.descriptors, s.rules
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            print_config_error(&err);
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn print_config_error(err: &ConfigError) {
    match err {
        ConfigError::Invalid(issues) => {
            for issue in issues {
                eprintln!("{issue}");
            }
            eprintln!("error: {err}");
        }
        other => eprintln!("error: {}", error_chain(other)),
    }
}
