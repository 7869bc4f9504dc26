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

/// A duration setting, in Go's syntax (see [`parse_duration`]).
pub(super) fn duration(
    flag: Option<Duration>,
    env: Option<&str>,
    var: &'static str,
    default: Duration,
) -> Result<Duration, SettingsError> {
    match (flag, env) {
        (Some(value), _) => Ok(value),
        (None, Some(text)) => {
            parse_duration(text).map_err(|source| SettingsError::InvalidDuration {
                var,
                value: text.to_owned(),
                source,
            })
        }
        (None, None) => Ok(default),
    }
}

/// A timeout where `0` means no deadline, as the reference reads its own.
pub(super) fn timeout(
    flag: Option<Duration>,
    env: Option<&str>,
    var: &'static str,
    default: Duration,
) -> Result<Duration, SettingsError> {
    let value = duration(flag, env, var, default)?;
    Ok(if value.is_zero() { NO_DEADLINE } else { value })
}

/// What a `0` timeout becomes: a deadline no call ever meets, yet near
/// enough that adding it to an `Instant` cannot overflow.
pub(crate) const NO_DEADLINE: Duration = Duration::from_secs(100 * 365 * 24 * 3_600);

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

/// Why a text is not a duration floodgate takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not in Go's syntax at all.
    #[error("not a duration in Go's syntax, such as 300ms, 1.5s, 2h45m or 0")]
    Syntax,
    /// A number without its unit.
    #[error("a number has no unit (ns, us, µs, ms, s, m or h)")]
    MissingUnit,
    /// A unit Go does not know.
    #[error("unknown unit '{0}' (ns, us, µs, ms, s, m or h)")]
    UnknownUnit(String),
    /// More than Go's `time.Duration` holds.
    #[error("longer than 2562047h47m16.854775807s")]
    Overflow,
    /// Below zero, which no setting takes.
    #[error("negative, and no duration setting can be")]
    Negative,
}

/// Nanoseconds in each unit Go's `time.ParseDuration` knows.
const UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5, the micro sign
    ("μs", 1_000), // U+03BC, the Greek mu
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// `1 << 63`: one past `i64::MAX`, the bound of Go's arithmetic.
const GO_BOUND: u64 = 1 << 63;

/// Parses `text` exactly as Go's `time.ParseDuration` does, into signed
/// nanoseconds: an optional sign, then `0` alone or numbers (digits, an
/// optional fraction) each followed by a unit.
///
/// # Errors
///
/// [`DurationError`] for every text Go refuses.
pub(crate) fn parse_go_duration(text: &str) -> Result<i64, DurationError> {
    let mut rest = text.as_bytes();
    let negative = rest.first() == Some(&b'-');
    if let Some((b'-' | b'+', tail)) = rest.split_first() {
        rest = tail;
    }
    if rest == b"0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    let mut total: u64 = 0;
    while let Some(&first) = rest.first() {
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(DurationError::Syntax);
        }
        let (whole, after) = leading_int(rest)?;
        let mut had_digits = after.len() != rest.len();
        rest = after;
        let (mut fraction, mut scale) = (0, 1.0);
        if let Some((b'.', tail)) = rest.split_first() {
            let (f, s, after) = leading_fraction(tail);
            had_digits |= after.len() != tail.len();
            (fraction, scale, rest) = (f, s, after);
        }
        if !had_digits {
            return Err(DurationError::Syntax);
        }
        let unit_len = rest
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        rest = after;
        if unit.is_empty() {
            return Err(DurationError::MissingUnit);
        }
        let Some(&(_, nanos)) = UNITS.iter().find(|(name, _)| name.as_bytes() == unit) else {
            return Err(DurationError::UnknownUnit(
                String::from_utf8_lossy(unit).into_owned(),
            ));
        };
        if whole > GO_BOUND / nanos {
            return Err(DurationError::Overflow);
        }
        let mut value = whole * nanos;
        if fraction > 0 {
            value = value.saturating_add(fraction_nanos(fraction, nanos, scale));
            if value > GO_BOUND {
                return Err(DurationError::Overflow);
            }
        }
        total = total.saturating_add(value);
        if total > GO_BOUND {
            return Err(DurationError::Overflow);
        }
    }
    if negative {
        return Ok(0_i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| DurationError::Overflow)
}

/// Go's `leadingInt`: the leading digits as a number, and what follows.
fn leading_int(text: &[u8]) -> Result<(u64, &[u8]), DurationError> {
    let len = text.iter().take_while(|c| c.is_ascii_digit()).count();
    let (digits, rest) = text.split_at(len);
    let mut value: u64 = 0;
    for &c in digits {
        if value > GO_BOUND / 10 {
            return Err(DurationError::Overflow);
        }
        value = value * 10 + u64::from(c - b'0');
        if value > GO_BOUND {
            return Err(DurationError::Overflow);
        }
    }
    Ok((value, rest))
}

/// Go's `leadingFraction`: the digits after the dot as a number and its
/// scale (`10^digits` kept), and what follows; digits past what 63 bits
/// hold are read and dropped, as Go does.
fn leading_fraction(text: &[u8]) -> (u64, f64, &[u8]) {
    let len = text.iter().take_while(|c| c.is_ascii_digit()).count();
    let (digits, rest) = text.split_at(len);
    let (mut value, mut scale) = (0_u64, 1.0_f64);
    for &c in digits {
        if value > (GO_BOUND - 1) / 10 {
            break;
        }
        let next = value * 10 + u64::from(c - b'0');
        if next > GO_BOUND {
            break;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, rest)
}

/// A fraction's nanoseconds, computed in `f64` as Go computes them so that
/// both give the same value to the nanosecond; at most 3.6e12 (under an
/// hour), so the cast back cannot truncate.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "Go's own float arithmetic, on values below an hour of nanoseconds"
)]
fn fraction_nanos(fraction: u64, unit_nanos: u64, scale: f64) -> u64 {
    (fraction as f64 * (unit_nanos as f64 / scale)) as u64
}

/// Parses a duration setting: what Go's `time.ParseDuration` reads
/// (`300ms`, `1.5s`, `2h45m`, `250us`, `0`), never negative, rounded up to
/// whole milliseconds (floodgate's timers count milliseconds; `250us` is
/// `1ms`, never zero).
///
/// # Errors
///
/// [`DurationError`]: not Go's syntax, or negative.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let nanos = parse_go_duration(text)?;
    let nanos = u64::try_from(nanos).map_err(|_| DurationError::Negative)?;
    Ok(Duration::from_millis(nanos.div_ceil(1_000_000)))
}
