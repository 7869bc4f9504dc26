//! Installs the tracing subscriber: the only place that does. Lines of
//! dependencies that use the `log` crate reach it through
//! `log_bridge`, their warnings rate limited.

mod log_bridge;

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("invalid log level '{filter}'")]
    Filter {
        /// The filter text.
        filter: String,
        /// Cause.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed.
    #[error("logging already initialised")]
    AlreadySet(#[source] tracing::subscriber::SetGlobalDefaultError),
    /// A `log` logger was already installed.
    #[error("logging of dependencies already initialised")]
    LogAlreadySet(#[source] log::SetLoggerError),
}

/// Installs a global subscriber writing to stderr, filtered by `directive`
/// (settings resolve it: `RUST_LOG`, else the log level).
///
/// # Errors
///
/// [`TelemetryError`] if the filter is invalid or a subscriber exists.
pub fn init(directive: &str, format: LogFormat) -> Result<(), TelemetryError> {
    use tracing_subscriber::layer::SubscriberExt as _;

    let filter =
        EnvFilter::builder()
            .parse(directive)
            .map_err(|source| TelemetryError::Filter {
                filter: directive.to_owned(),
                source,
            })?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colour only on a terminal: files and log shippers get
                    // plain text.
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            ),
        ),
        LogFormat::Json => tracing::subscriber::set_global_default(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            ),
        ),
    };
    result.map_err(TelemetryError::AlreadySet)?;
    log::set_boxed_logger(Box::new(log_bridge::LogBridge::default()))
        .map_err(TelemetryError::LogAlreadySet)?;
    // Lines the tracing filter would drop are not even formatted.
    log::set_max_level(match tracing::level_filters::LevelFilter::current() {
        tracing::level_filters::LevelFilter::OFF => log::LevelFilter::Off,
        tracing::level_filters::LevelFilter::ERROR => log::LevelFilter::Error,
        tracing::level_filters::LevelFilter::WARN => log::LevelFilter::Warn,
        tracing::level_filters::LevelFilter::INFO => log::LevelFilter::Info,
        tracing::level_filters::LevelFilter::DEBUG => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    Ok(())
}

/// An error and each of its causes, `: `-joined: the one line an operator
/// reads (process exit messages, HTTP 400 bodies).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
