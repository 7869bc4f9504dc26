//! Stats sinks and the debug listener: `USE_STATSD`, `STATSD_*`,
//! `STATS_FLUSH_INTERVAL`, `EXTRA_TAGS`, `USE_DOG_STATSD` (+ mogrifiers),
//! `DISABLE_STATS`, `PROMETHEUS_MAPPER_YAML`,
//! `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, `DEBUG_HOST`/`DEBUG_PORT`;
//! and the reference variables floodgate accepts without needing them
//! (`GRPC_SERVER_TLS_CA_CERT`, `RUNTIME_WATCH_ROOT`, `REDIS_SOCKET_TYPE`).
//!
//! Sinks follow the reference: one at a time. `USE_STATSD` defaults to true
//! as there, except that `USE_PROMETHEUS=true` alone selects Prometheus
//! (where the reference would exit because its statsd default is on);
//! `USE_PROMETHEUS` with an explicit `USE_STATSD=true` or
//! `USE_DOG_STATSD=true` is refused.

use super::*;
use crate::metrics::statsd::{Format, Mogrifier, Protocol, StatsdOptions};
use crate::metrics::statsd_names::Tags;

/// Flags of the stats sinks and the debug listener.
#[derive(Debug, Clone, Default, Args)]
pub struct StatsArgs {
    /// Debug listener serving /rlconfig and /healthcheck [env: DEBUG_HOST, DEBUG_PORT] [default: off unless one is set; host 127.0.0.1, port 6070]
    #[arg(long, value_name = "ADDR")]
    pub debug_addr: Option<SocketAddr>,
    /// Send stats to statsd [env: USE_STATSD] [default: true, unless USE_PROMETHEUS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub use_statsd: Option<bool>,
    /// statsd host [env: STATSD_HOST] [default: localhost]
    #[arg(long, value_name = "HOST")]
    pub statsd_host: Option<String>,
    /// statsd port [env: STATSD_PORT] [default: 8125]
    #[arg(long, value_name = "PORT")]
    pub statsd_port: Option<u16>,
    /// statsd transport, tcp or udp [env: STATSD_PROTOCOL] [default: tcp; udp with USE_DOG_STATSD]
    #[arg(long, value_name = "PROTOCOL")]
    pub statsd_protocol: Option<String>,
    /// Time between two statsd flushes [env: STATS_FLUSH_INTERVAL] [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stats_flush_interval: Option<Duration>,
    /// Tags added to every stat, `k1:v1,k2:v2` [env: EXTRA_TAGS]
    #[arg(long, value_name = "TAGS")]
    pub extra_tags: Option<String>,
    /// Send DogStatsD lines (tags as |#k:v) over UDP [env: USE_DOG_STATSD]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub use_dog_statsd: Option<bool>,
    /// DogStatsD mogrifier names, each set by `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`, `_NAME`, `_TAGS` [env: USE_DOG_STATSD_MOGRIFIERS]
    #[arg(long, value_name = "NAMES")]
    pub use_dog_statsd_mogrifiers: Option<String>,
    /// No stats sink at all (no statsd, no Prometheus listener) [env: DISABLE_STATS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub disable_stats: Option<bool>,
    /// statsd_exporter mapping file for the Prometheus listener [env: PROMETHEUS_MAPPER_YAML] [default: the reference's built-in mapping]
    #[arg(long, value_name = "FILE")]
    pub prometheus_mapper_yaml: Option<PathBuf>,
    /// With the built-in mapping, export the response time in milliseconds [env: PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub prometheus_response_time_as_milliseconds: Option<bool>,
}

/// Resolved stats settings.
#[derive(Debug, Clone, Default)]
pub struct StatsSettings {
    /// The statsd sink, when on.
    pub statsd: Option<StatsdOptions>,
    /// `EXTRA_TAGS`.
    pub extra_tags: Tags,
    /// `PROMETHEUS_MAPPER_YAML`.
    pub mapper_yaml: Option<PathBuf>,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`.
    pub response_time_as_ms: bool,
    /// `DISABLE_STATS`.
    pub disabled: bool,
    /// The debug listener's address, when one is asked for.
    pub debug_addr: Option<SocketAddr>,
    /// Reference variables that are set but need nothing from floodgate,
    /// with why (logged at debug at start).
    pub ignored: Vec<(&'static str, &'static str)>,
}

const DEFAULT_DEBUG_PORT: u16 = 6070;

pub(super) fn resolve<'a>(
    args: &StatsArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    use_prometheus: bool,
) -> Result<StatsSettings, SettingsError> {
    let flag = |value: Option<bool>, var: &'static str| boolean(value, get(var), var);
    let disabled = flag(args.disable_stats, "DISABLE_STATS")?;
    let explicit_statsd = match args.use_statsd {
        Some(value) => Some(value),
        None => match get("USE_STATSD") {
            Some(_) => Some(flag(None, "USE_STATSD")?),
            None => None,
        },
    };
    let dog = flag(args.use_dog_statsd, "USE_DOG_STATSD")?;
    if use_prometheus && !disabled && (explicit_statsd == Some(true) || dog) {
        return Err(SettingsError::Conflict {
            reason: "USE_PROMETHEUS and USE_STATSD/USE_DOG_STATSD are both on: one stats sink at a time, as in the reference (set USE_STATSD=false)",
        });
    }
    let tags_text = args
        .extra_tags
        .clone()
        .or_else(|| get("EXTRA_TAGS").map(str::to_owned))
        .unwrap_or_default();
    let extra_tags = Tags::parse(&tags_text).map_err(|item| SettingsError::Invalid {
        setting: "EXTRA_TAGS".to_owned(),
        reason: format!("'{item}' is not key:value"),
    })?;
    let statsd_on = !disabled && !use_prometheus && (dog || explicit_statsd.unwrap_or(true));
    let statsd = if statsd_on {
        let protocol_text = args
            .statsd_protocol
            .clone()
            .or_else(|| get("STATSD_PROTOCOL").map(str::to_owned));
        let protocol = match protocol_text
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None => {
                if dog {
                    Protocol::Udp
                } else {
                    Protocol::Tcp
                }
            }
            Some("tcp") => Protocol::Tcp,
            Some("udp") => Protocol::Udp,
            Some(_) => {
                return Err(SettingsError::InvalidEnv {
                    var: "STATSD_PROTOCOL",
                    value: protocol_text.unwrap_or_default(),
                    expected: "tcp or udp",
                });
            }
        };
        let flush_interval = duration(
            args.stats_flush_interval,
            get("STATS_FLUSH_INTERVAL"),
            "STATS_FLUSH_INTERVAL",
            Duration::from_secs(10),
        )?;
        if flush_interval.is_zero() {
            return Err(SettingsError::InvalidEnv {
                var: "STATS_FLUSH_INTERVAL",
                value: "0".to_owned(),
                expected: "a duration above zero",
            });
        }
        let format = if dog {
            let names = args
                .use_dog_statsd_mogrifiers
                .clone()
                .or_else(|| get("USE_DOG_STATSD_MOGRIFIERS").map(str::to_owned))
                .unwrap_or_default();
            Format::DogStatsd(mogrifiers(&names, get)?)
        } else {
            Format::Statsd
        };
        Some(StatsdOptions {
            host: args
                .statsd_host
                .clone()
                .or_else(|| get("STATSD_HOST").map(str::to_owned))
                .unwrap_or_else(|| "localhost".to_owned()),
            port: number(args.statsd_port, get("STATSD_PORT"), "STATSD_PORT", 8125)?,
            protocol,
            flush_interval,
            format,
            tags: extra_tags.clone(),
        })
    } else {
        None
    };
    let debug_addr =
        match args.debug_addr {
            Some(addr) => Some(addr),
            None if get("DEBUG_HOST").is_some() || get("DEBUG_PORT").is_some() => Some(
                addr_from_env(get, "DEBUG_HOST", "DEBUG_PORT", DEFAULT_DEBUG_PORT)?,
            ),
            None => None,
        };
    Ok(StatsSettings {
        statsd,
        extra_tags,
        mapper_yaml: args
            .prometheus_mapper_yaml
            .clone()
            .or_else(|| get("PROMETHEUS_MAPPER_YAML").map(PathBuf::from)),
        response_time_as_ms: flag(
            args.prometheus_response_time_as_milliseconds,
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        )?,
        disabled,
        debug_addr,
        ignored: ignored(get)?,
    })
}

/// `DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}` for each name of the
/// comma-separated list, with the reference's checks.
fn mogrifiers<'a>(
    names: &str,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<Mogrifier>, SettingsError> {
    let mut out = Vec::new();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let invalid = |reason: String| SettingsError::Invalid {
            setting: format!("DOG_STATSD_MOGRIFIER_{name}"),
            reason,
        };
        let var = |field: &str| get(&format!("DOG_STATSD_MOGRIFIER_{name}_{field}"));
        let pattern = var("PATTERN")
            .ok_or_else(|| invalid(format!("no PATTERN specified for mogrifier {name}")))?;
        let pattern = Regex::new(pattern)
            .map_err(|err| invalid(format!("failed to compile pattern {pattern}: {err}")))?;
        let new_name = var("NAME")
            .ok_or_else(|| invalid(format!("no NAME specified for mogrifier {name}")))?
            .to_owned();
        let mut tags = Vec::new();
        for item in var("TAGS")
            .unwrap_or_default()
            .split(',')
            .filter(|i| !i.is_empty())
        {
            let (key, value) = item.split_once(':').unwrap_or((item, ""));
            if key.is_empty() || value.is_empty() {
                return Err(invalid(format!("tag '{item}' needs a key and a value")));
            }
            tags.push((key.to_owned(), value.to_owned()));
        }
        tags.sort();
        out.push(Mogrifier {
            pattern,
            name: new_name,
            tags,
        });
    }
    Ok(out)
}

use regex::Regex;

/// Reference variables floodgate reads only to check them: what they set
/// is floodgate's behaviour anyway.
fn ignored<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<(&'static str, &'static str)>, SettingsError> {
    let mut ignored = Vec::new();
    if get("GRPC_SERVER_TLS_CA_CERT").is_some() {
        ignored.push((
            "GRPC_SERVER_TLS_CA_CERT",
            "never read by the reference either (client certificates use GRPC_CLIENT_TLS_CACERT)",
        ));
    }
    if get("RUNTIME_WATCH_ROOT").is_some() {
        boolean(None, get("RUNTIME_WATCH_ROOT"), "RUNTIME_WATCH_ROOT")?;
        ignored.push((
            "RUNTIME_WATCH_ROOT",
            "the rule directory is polled, which sees both a swap of the root and changes inside it",
        ));
    }
    for var in ["REDIS_SOCKET_TYPE", "REDIS_PERSECOND_SOCKET_TYPE"] {
        let Some(kind) = get(var) else { continue };
        if !matches!(kind.to_ascii_lowercase().as_str(), "tcp" | "unix") {
            return Err(SettingsError::InvalidEnv {
                var,
                value: kind.to_owned(),
                expected: "tcp or unix",
            });
        }
        ignored.push((
            var,
            "the URL says it: a path or unix:// is a unix socket, host:port is tcp",
        ));
    }
    Ok(ignored)
}

/// A logrus level name as a tracing filter (`warning` is `warn`; `fatal`
/// and `panic` are `error`); anything else is passed on as written.
pub(super) fn log_filter(level: &str) -> String {
    let lower = level.to_ascii_lowercase();
    match lower.as_str() {
        "warning" => "warn".to_owned(),
        "fatal" | "panic" => "error".to_owned(),
        _ => lower,
    }
}
