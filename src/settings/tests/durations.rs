//! Durations in Go's syntax: the parser against Go's rules, and what each
//! setting makes of `0`, fractions and signs.

use super::*;
use crate::settings::parse::{NO_DEADLINE, parse_go_duration};
use proptest::prelude::*;

const NS: i64 = 1;
const US: i64 = 1_000;
const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;
const M: i64 = 60 * S;
const H: i64 = 60 * M;

/// What Go's `time.ParseDuration` answers, from its rules and its own test
/// table (`time_test.go`).
const ACCEPTED: &[(&str, i64)] = &[
    ("0", 0),
    ("-0", 0),
    ("+0", 0),
    ("0s", 0),
    ("5s", 5 * S),
    ("+5m", 5 * M),
    ("-5s", -5 * S),
    ("1478s", 1478 * S),
    ("5.0s", 5 * S),
    ("5.6s", 5 * S + 600 * MS),
    ("1.s", S),
    (".5s", 500 * MS),
    ("1.004s", S + 4 * MS),
    ("100.00100s", 100 * S + MS),
    ("10ns", 10 * NS),
    ("11us", 11 * US),
    ("12µs", 12 * US),
    ("12μs", 12 * US),
    ("13ms", 13 * MS),
    ("15m", 15 * M),
    ("16h", 16 * H),
    ("1m30s", 90 * S),
    ("1.5s", 1_500 * MS),
    ("250us", 250 * US),
    ("2h45m", 2 * H + 45 * M),
    ("1h1m1.5s", H + M + 1_500 * MS),
    ("10.5s4m", 4 * M + 10_500 * MS),
    ("-2m3.4s", -(2 * M + 3_400 * MS)),
    (
        "1h2m3s4ms5us6ns",
        H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS,
    ),
    ("39h9m14.425s", 39 * H + 9 * M + 14_425 * MS),
    ("0.3333333333333333333h", 20 * M),
    ("0.830103483285477580700h", 49 * M + 48 * S + 372_539_827),
    ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", i64::MAX),
    ("9223372036854775.807us", i64::MAX),
    ("9223372036s854ms775us807ns", i64::MAX),
    ("-9223372036854775808ns", i64::MIN),
    ("-2562047h47m16.854775808s", i64::MIN),
];

/// What Go's `time.ParseDuration` refuses, and why.
fn refused() -> Vec<(&'static str, DurationError)> {
    use DurationError::{MissingUnit, Overflow, Syntax, UnknownUnit};
    vec![
        ("", Syntax),
        ("-", Syntax),
        ("+", Syntax),
        (".", Syntax),
        ("-.", Syntax),
        (".s", Syntax),
        ("+.s", Syntax),
        ("s", Syntax),
        ("ms", Syntax),
        (" 1s", Syntax),
        ("--1s", Syntax),
        ("10", MissingUnit),
        ("00", MissingUnit),
        ("1s2", MissingUnit),
        ("1.5", MissingUnit),
        ("1d", UnknownUnit("d".to_owned())),
        ("1x", UnknownUnit("x".to_owned())),
        ("1 s", UnknownUnit(" s".to_owned())),
        ("1S", UnknownUnit("S".to_owned())),
        ("1s ", UnknownUnit("s ".to_owned())),
        ("9223372036854775808ns", Overflow),
        ("9223372036854775.808us", Overflow),
        ("9223372036s854ms775us808ns", Overflow),
        ("9223372036854s", Overflow),
        ("-9223372036854775809ns", Overflow),
        ("2562048h", Overflow),
        ("99999999999999999999s", Overflow),
    ]
}

#[test]
fn go_durations_parse_as_go_parses_them() {
    for &(text, nanos) in ACCEPTED {
        assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
    }
}

#[test]
fn what_go_refuses_is_refused() {
    for (text, why) in refused() {
        assert_eq!(parse_go_duration(text), Err(why), "{text:?}");
    }
}

/// Go's `Duration.String()`: `1h2m3.5s`, `1.5µs`, `0s`.
fn go_string(nanos: i64) -> String {
    let frac = |value: u64, digits: u32| {
        let scale = 10_u64.pow(digits);
        let fraction = match value % scale {
            0 => String::new(),
            f => format!(".{f:0width$}", width = digits as usize)
                .trim_end_matches('0')
                .to_owned(),
        };
        (value / scale, fraction)
    };
    let value = nanos.unsigned_abs();
    let body = if value < 1_000_000_000 {
        let (digits, unit) = match value {
            0 => return "0s".to_owned(),
            1..=999 => (0, "ns"),
            1_000..=999_999 => (3, "µs"),
            _ => (6, "ms"),
        };
        let (whole, fraction) = frac(value, digits);
        format!("{whole}{fraction}{unit}")
    } else {
        let (secs, fraction) = frac(value, 9);
        let (mins, hours) = (secs / 60, secs / 3_600);
        match (hours, mins) {
            (0, 0) => format!("{secs}{fraction}s"),
            (0, _) => format!("{mins}m{}{fraction}s", secs % 60),
            _ => format!("{hours}h{}m{}{fraction}s", mins % 60, secs % 60),
        }
    };
    if nanos < 0 { format!("-{body}") } else { body }
}

#[test]
fn go_string_is_gos() {
    assert_eq!(go_string(H + 2 * M + 3_500 * MS), "1h2m3.5s");
    assert_eq!(go_string(1_500), "1.5µs");
    assert_eq!(go_string(0), "0s");
    assert_eq!(go_string(-90 * S), "-1m30s");
    assert_eq!(go_string(i64::MIN), "-2562047h47m16.854775808s");
}

proptest! {
    #[test]
    fn any_duration_go_prints_parses_back_to_itself(nanos in any::<i64>()) {
        prop_assert_eq!(parse_go_duration(&go_string(nanos)), Ok(nanos));
    }

    #[test]
    fn small_durations_go_prints_parse_back_to_themselves(nanos in -10 * S..10 * S) {
        prop_assert_eq!(parse_go_duration(&go_string(nanos)), Ok(nanos));
    }
}

#[test]
fn settings_round_fractions_of_a_millisecond_up() {
    assert_eq!(parse_duration("250us"), Ok(Duration::from_millis(1)));
    assert_eq!(parse_duration("1ns"), Ok(Duration::from_millis(1)));
    assert_eq!(parse_duration("1.0001ms"), Ok(Duration::from_millis(2)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1_500)));
    assert_eq!(parse_duration("-0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("-1ms"), Err(DurationError::Negative));
}

fn redis(vars: &[(&str, &str)]) -> RedisSettings {
    let mut all = vec![(vars::backend_type.name, "redis")];
    all.extend_from_slice(vars);
    resolve(&[], &all).unwrap().redis.unwrap()
}

#[test]
fn reference_environments_with_go_durations_start() {
    let r = redis(&[
        (vars::redis_timeout.name, "1m30s"),
        (vars::redis_connect_timeout.name, "2h45m"),
        (vars::redis_startup_initial_interval.name, "250us"),
        (vars::redis_startup_max_interval.name, "1.5s"),
        (vars::redis_startup_max_elapsed_time.name, "0"),
    ]);
    assert_eq!(r.main.timeout, Duration::from_secs(90));
    assert_eq!(
        r.main.connect_timeout,
        Duration::from_secs(2 * 3_600 + 45 * 60)
    );
    assert_eq!(
        r.main.startup_backoff,
        (Duration::from_millis(1), Duration::from_millis(1_500))
    );
    assert_eq!(r.startup_max_elapsed, None, "0 retries forever");
    let s = resolve(
        &[],
        &[
            (vars::grpc_max_connection_age.name, "1.5h"),
            (vars::grpc_max_connection_age_grace.name, "+30s"),
            (vars::shutdown_grace.name, "500ms"),
        ],
    )
    .unwrap();
    assert_eq!(s.serve.max_connection_age, Some(Duration::from_secs(5_400)));
    assert_eq!(
        s.serve.max_connection_age_grace,
        Some(Duration::from_secs(30))
    );
}

#[test]
fn zero_keeps_the_reference_meaning() {
    let r = redis(&[
        (vars::redis_timeout.name, "0"),
        (vars::redis_connect_timeout.name, "0s"),
    ]);
    assert_eq!(r.main.timeout, NO_DEADLINE, "0: no deadline");
    assert_eq!(r.main.connect_timeout, NO_DEADLINE);
    let s = resolve(
        &[],
        &[
            (vars::grpc_max_connection_age.name, "0"),
            (vars::grpc_max_connection_age_grace.name, "0"),
        ],
    )
    .unwrap();
    assert_eq!(s.serve.max_connection_age, None, "grpc-go: 0 is no limit");
    assert_eq!(s.serve.max_connection_age_grace, None);
    let flagged = resolve(&["--store", "redis", "--redis-timeout", "0"], &[]).unwrap();
    assert_eq!(flagged.redis.unwrap().main.timeout, NO_DEADLINE);
    let err = resolve(&[], &[(vars::config_poll_interval.name, "0")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: must be more than 0", vars::config_poll_interval.name)
    );
}

#[test]
fn refused_durations_name_the_variable_and_why() {
    for (value, why) in [
        ("-1s", "negative, and no duration setting can be"),
        ("10", "a number has no unit (ns, us, µs, ms, s, m or h)"),
        ("1d", "unknown unit 'd' (ns, us, µs, ms, s, m or h)"),
        ("1h-1m", "unknown unit 'h-' (ns, us, µs, ms, s, m or h)"),
    ] {
        let err = resolve(&["--store", "redis"], &[(vars::redis_timeout.name, value)]).unwrap_err();
        assert_eq!(
            crate::error_chain(&err),
            format!(
                "environment variable {}='{value}' is not a duration floodgate takes: {why}",
                vars::redis_timeout.name
            )
        );
    }
}

#[test]
fn refused_duration_flags_name_the_flag() {
    let err = Cli::try_parse_from(["floodgate", "--redis-timeout=-5s"])
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("--redis-timeout"), "{text}");
    assert!(text.contains("negative"), "{text}");
    let cli = Cli::try_parse_from(["floodgate", "--shutdown-grace", "1m30s"]).unwrap();
    assert_eq!(cli.serve.shutdown_grace, Some(Duration::from_secs(90)));
}
