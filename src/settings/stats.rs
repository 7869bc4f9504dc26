//! Stats sinks and the debug listener: `use_statsd`, `STATSD_*`,
//! `stats_flush_interval`, `extra_tags`, `use_dog_statsd` (+ mogrifiers),
//! `disable_stats`, `prometheus_mapper_yaml`,
//! `prometheus_response_time_as_milliseconds`, `debug_host`/`debug_port`;
//! and the reference variables floodgate accepts without needing them
//! (`grpc_server_tls_ca_cert`, `runtime_watch_root`, `redis_socket_type`).
//!
//! Sinks follow the reference: one at a time. `use_statsd` defaults to true
//! as there, except that `use_prometheus=true` alone selects Prometheus
//! (where the reference would exit because its statsd default is on);
//! `use_prometheus` with an explicit `use_statsd=true` or
//! `use_dog_statsd=true` is refused.

use super::*;
use crate::metrics::statsd::{Format, Mogrifier, Protocol, StatsdOptions};
use crate::metrics::statsd_names::Tags;

/// Flags of the stats sinks and the debug listener.
#[derive(Debug, Clone, Default, Args)]
pub struct StatsArgs {
    #[arg(long, value_name = "ADDR", help = vars::help_of(&[&vars::debug_host, &vars::debug_port]))]
    pub(crate) debug_addr: Option<SocketAddr>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::use_statsd.help())]
    pub(crate) use_statsd: Option<bool>,
    #[arg(long, value_name = vars::host.name, help = vars::statsd_host.help())]
    pub(crate) statsd_host: Option<String>,
    #[arg(long, value_name = vars::port.name, help = vars::statsd_port.help())]
    pub(crate) statsd_port: Option<u16>,
    #[arg(long, value_name = "PROTOCOL", help = vars::statsd_protocol.help())]
    pub(crate) statsd_protocol: Option<String>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::stats_flush_interval.help())]
    pub(crate) stats_flush_interval: Option<Duration>,
    #[arg(long, value_name = "TAGS", help = vars::extra_tags.help())]
    pub(crate) extra_tags: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::use_dog_statsd.help())]
    pub(crate) use_dog_statsd: Option<bool>,
    #[arg(long, value_name = "NAMES", help = vars::use_dog_statsd_mogrifiers.help())]
    pub(crate) use_dog_statsd_mogrifiers: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::disable_stats.help())]
    pub(crate) disable_stats: Option<bool>,
    #[arg(long, value_name = "FILE", help = vars::prometheus_mapper_yaml.help())]
    pub(crate) prometheus_mapper_yaml: Option<PathBuf>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::prometheus_response_time_as_milliseconds.help())]
    pub(crate) prometheus_response_time_as_milliseconds: Option<bool>,
}

/// Resolved stats settings.
#[derive(Debug, Clone, Default)]
pub struct StatsSettings {
    /// The statsd sink, when on.
    pub statsd: Option<StatsdOptions>,
    /// `extra_tags`.
    pub extra_tags: Tags,
    /// `prometheus_mapper_yaml`.
    pub mapper_yaml: Option<PathBuf>,
    /// `prometheus_response_time_as_milliseconds`.
    pub response_time_as_ms: bool,
    /// `disable_stats`.
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
    let disabled = flag(args.disable_stats, vars::disable_stats.name)?;
    let explicit_statsd = match args.use_statsd {
        Some(value) => Some(value),
        None => match get(vars::use_statsd.name) {
            Some(_) => Some(flag(None, vars::use_statsd.name)?),
            None => None,
        },
    };
    let dog = flag(args.use_dog_statsd, vars::use_dog_statsd.name)?;
    if use_prometheus && !disabled && (explicit_statsd == Some(true) || dog) {
        return Err(SettingsError::Conflict {
            reason: format!(
                "{} and {}/{} are both on: one stats sink at a time, as in the reference (set {}=false)",
                vars::use_prometheus.name,
                vars::use_statsd.name,
                vars::use_dog_statsd.name,
                vars::use_statsd.name
            ),
        });
    }
    let tags_text = args
        .extra_tags
        .clone()
        .or_else(|| get(vars::extra_tags.name).map(str::to_owned))
        .unwrap_or_default();
    let extra_tags = Tags::parse(&tags_text).map_err(|item| SettingsError::Invalid {
        setting: vars::extra_tags.name.to_owned(),
        reason: format!("'{item}' is not key:value"),
    })?;
    let statsd_on = !disabled && !use_prometheus && (dog || explicit_statsd.unwrap_or(true));
    let statsd = if statsd_on {
        let protocol_text = args
            .statsd_protocol
            .clone()
            .or_else(|| get(vars::statsd_protocol.name).map(str::to_owned));
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
                    var: vars::statsd_protocol.name,
                    value: protocol_text.unwrap_or_default(),
                    expected: "tcp or udp",
                });
            }
        };
        let flush_interval = duration(
            args.stats_flush_interval,
            get(vars::stats_flush_interval.name),
            vars::stats_flush_interval.name,
            Duration::from_secs(10),
        )?;
        if flush_interval.is_zero() {
            return Err(SettingsError::InvalidEnv {
                var: vars::stats_flush_interval.name,
                value: "0".to_owned(),
                expected: "a duration above zero",
            });
        }
        let format = if dog {
            let names = args
                .use_dog_statsd_mogrifiers
                .clone()
                .or_else(|| get(vars::use_dog_statsd_mogrifiers.name).map(str::to_owned))
                .unwrap_or_default();
            Format::DogStatsd(mogrifiers(&names, get)?)
        } else {
            Format::Statsd
        };
        Some(StatsdOptions {
            host: args
                .statsd_host
                .clone()
                .or_else(|| get(vars::statsd_host.name).map(str::to_owned))
                .unwrap_or_else(|| "localhost".to_owned()),
            port: number(
                args.statsd_port,
                get(vars::statsd_port.name),
                vars::statsd_port.name,
                8125,
            )?,
            protocol,
            flush_interval,
            format,
            tags: extra_tags.clone(),
        })
    } else {
        None
    };
    let debug_addr = match args.debug_addr {
        Some(addr) => Some(addr),
        None if get(vars::debug_host.name).is_some() || get(vars::debug_port.name).is_some() => {
            Some(addr_from_env(
                get,
                vars::debug_host.name,
                vars::debug_port.name,
                DEFAULT_DEBUG_PORT,
            )?)
        }
        None => None,
    };
    Ok(StatsSettings {
        statsd,
        extra_tags,
        mapper_yaml: args
            .prometheus_mapper_yaml
            .clone()
            .or_else(|| get(vars::prometheus_mapper_yaml.name).map(PathBuf::from)),
        response_time_as_ms: flag(
            args.prometheus_response_time_as_milliseconds,
            vars::prometheus_response_time_as_milliseconds.name,
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
    if get(vars::grpc_server_tls_ca_cert.name).is_some() {
        ignored.push((
            vars::grpc_server_tls_ca_cert.name,
            "never read by the reference either (the client CA for mTLS is --grpc-client-tls-cacert)",
        ));
    }
    if get(vars::runtime_watch_root.name).is_some() {
        boolean(
            None,
            get(vars::runtime_watch_root.name),
            vars::runtime_watch_root.name,
        )?;
        ignored.push((
            vars::runtime_watch_root.name,
            "the rule directory is polled, which sees both a swap of the root and changes inside it",
        ));
    }
    for var in [
        vars::redis_socket_type.name,
        vars::redis_persecond_socket_type.name,
    ] {
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
