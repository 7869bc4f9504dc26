//! Value parsing with the reference's forms: Go booleans and durations,
//! listen addresses, numbers and choices, each naming the variable at fault.

use super::*;

/// The reference's rule directory, `$runtime_root/$runtime_subdirectory/$runtime_appdirectory`,
/// when any of them is set; otherwise the bundled examples.
pub(super) fn runtime_dir<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> PathBuf {
    let (root, sub, app) = (
        get(vars::runtime_root.name),
        get(vars::runtime_subdirectory.name),
        get(vars::runtime_appdirectory.name),
    );
    if root.is_none() && sub.is_none() && app.is_none() {
        return PathBuf::from(DEFAULT_CONFIG_DIR);
    }
    let mut dir = PathBuf::from(root.unwrap_or("/srv/runtime_data/current"));
    if let Some(sub) = sub {
        dir.push(sub);
    }
    dir.push(app.unwrap_or("config"));
    dir
}

pub(super) fn addr_from_env<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    host_var: &'static str,
    port_var: &'static str,
    default_port: u16,
) -> Result<SocketAddr, SettingsError> {
    let host = match get(host_var) {
        None => DEFAULT_HOST,
        Some(value) => value.parse().map_err(|_| SettingsError::InvalidEnv {
            var: host_var,
            value: value.to_owned(),
            expected: "an IP address",
        })?,
    };
    let port = match get(port_var) {
        None => default_port,
        Some(value) => value.parse().map_err(|_| SettingsError::InvalidEnv {
            var: port_var,
            value: value.to_owned(),
            expected: "a port number",
        })?,
    };
    Ok(SocketAddr::new(host, port))
}

/// A setting from its flag, else its environment variable read by `parse`,
/// else `default`; a malformed variable is an error naming it.
pub(super) fn pick<T>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
    default: T,
) -> Result<T, SettingsError> {
    match (flag, env) {
        (Some(value), _) => Ok(value),
        (None, Some(text)) => parse(text).ok_or_else(|| SettingsError::InvalidEnv {
            var,
            value: text.to_owned(),
            expected,
        }),
        (None, None) => Ok(default),
    }
}

/// A whole-number setting.
pub(super) fn number<T: std::str::FromStr>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    default: T,
) -> Result<T, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a whole number",
        |t| t.parse().ok(),
        default,
    )
}

/// A duration setting (`500ms`, `10s`, `5m`, `1h`).
pub(super) fn duration(
    flag: Option<Duration>,
    env: Option<&str>,
    var: &'static str,
    default: Duration,
) -> Result<Duration, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a duration such as 500ms, 10s, 5m or 1h",
        |t| parse_duration(t).ok(),
        default,
    )
}

/// A setting naming one of a fixed set of values (case-insensitive).
pub(super) fn choice<T: ValueEnum>(
    flag: Option<T>,
    env: Option<&str>,
    var: &'static str,
    expected: &'static str,
    default: T,
) -> Result<T, SettingsError> {
    pick(
        flag,
        env,
        var,
        expected,
        |t| T::from_str(t, true).ok(),
        default,
    )
}

/// Parses a listen address; `:port` (Go's form) means every interface.
pub(super) fn parse_listen_addr(text: &str) -> Option<SocketAddr> {
    match text.strip_prefix(':') {
        Some(port) => port
            .parse()
            .ok()
            .map(|port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)),
        None => text.parse().ok(),
    }
}

/// A boolean setting, read the way the reference's Go settings read one
/// (`strconv.ParseBool`); absent means false.
pub(super) fn boolean(
    flag: Option<bool>,
    env: Option<&str>,
    var: &'static str,
) -> Result<bool, SettingsError> {
    pick(
        flag,
        env,
        var,
        "a boolean (true/false/1/0)",
        |text| match text {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => None,
        },
        false,
    )
}

/// Parses a duration such as `250ms`, `10s`, `5m` or `1h`.
///
/// # Errors
///
/// A message naming the accepted forms.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration such as 500ms, 10s, 5m or 1h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(value.saturating_mul(3_600))),
        _ => Err(format!(
            "'{text}' is not a duration such as 500ms, 10s, 5m or 1h"
        )),
    }
}
