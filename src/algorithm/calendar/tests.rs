use super::*;
use proptest::prelude::*;

fn at(text: &str) -> u64 {
    u64::try_from(text.parse::<Timestamp>().unwrap().as_second()).unwrap()
}

fn window(unit: CalendarUnit, zone: &str, now: &str) -> (u64, u64) {
    Calendar::interned(unit, zone, Weekday::Monday)
        .unwrap()
        .bounds(at(now))
}

/// `(unit, zone, an instant, the window's start and end)`, each written
/// from the calendar by hand.
const TABLE: &[(CalendarUnit, &str, &str, &str, &str)] = &[
    // Paris: summer time from 29 March 2026 02:00, to 25 October 03:00.
    (
        CalendarUnit::Day,
        "Europe/Paris",
        "2026-03-29T12:00:00Z",
        "2026-03-28T23:00:00Z",
        "2026-03-29T22:00:00Z",
    ),
    (
        CalendarUnit::Day,
        "Europe/Paris",
        "2026-10-25T12:00:00Z",
        "2026-10-24T22:00:00Z",
        "2026-10-25T23:00:00Z",
    ),
    (
        CalendarUnit::Day,
        "Europe/Paris",
        "2026-07-01T21:59:59Z",
        "2026-06-30T22:00:00Z",
        "2026-07-01T22:00:00Z",
    ),
    (
        CalendarUnit::Day,
        "Europe/Paris",
        "2026-07-01T22:00:00Z",
        "2026-07-01T22:00:00Z",
        "2026-07-02T22:00:00Z",
    ),
    // New York: 8 March 2026 and 1 November 2026.
    (
        CalendarUnit::Day,
        "America/New_York",
        "2026-03-08T12:00:00Z",
        "2026-03-08T05:00:00Z",
        "2026-03-09T04:00:00Z",
    ),
    (
        CalendarUnit::Day,
        "America/New_York",
        "2026-11-01T12:00:00Z",
        "2026-11-01T04:00:00Z",
        "2026-11-02T05:00:00Z",
    ),
    // Lord Howe Island moves its clocks by half an hour: 5 April and
    // 4 October 2026 (+11:00 in summer, +10:30 otherwise).
    (
        CalendarUnit::Day,
        "Australia/Lord_Howe",
        "2026-04-05T00:00:00Z",
        "2026-04-04T13:00:00Z",
        "2026-04-05T13:30:00Z",
    ),
    (
        CalendarUnit::Day,
        "Australia/Lord_Howe",
        "2026-10-04T00:00:00Z",
        "2026-10-03T13:30:00Z",
        "2026-10-04T13:00:00Z",
    ),
    // Weeks start on Monday: 25 November 2026 is a Wednesday.
    (
        CalendarUnit::Week,
        "UTC",
        "2026-11-25T10:00:00Z",
        "2026-11-23T00:00:00Z",
        "2026-11-30T00:00:00Z",
    ),
    (
        CalendarUnit::Week,
        "Europe/Paris",
        "2026-03-30T10:00:00Z",
        "2026-03-29T22:00:00Z",
        "2026-04-05T22:00:00Z",
    ),
    // Month ends, 29 February, years.
    (
        CalendarUnit::Month,
        "UTC",
        "2028-02-15T00:00:00Z",
        "2028-02-01T00:00:00Z",
        "2028-03-01T00:00:00Z",
    ),
    (
        CalendarUnit::Month,
        "UTC",
        "2027-02-28T23:59:59Z",
        "2027-02-01T00:00:00Z",
        "2027-03-01T00:00:00Z",
    ),
    (
        CalendarUnit::Month,
        "UTC",
        "2026-12-31T23:59:59Z",
        "2026-12-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    ),
    (
        CalendarUnit::Month,
        "America/New_York",
        "2026-11-01T03:59:59Z",
        "2026-10-01T04:00:00Z",
        "2026-11-01T04:00:00Z",
    ),
    (
        CalendarUnit::Day,
        "UTC",
        "2028-02-29T12:00:00Z",
        "2028-02-29T00:00:00Z",
        "2028-03-01T00:00:00Z",
    ),
    (
        CalendarUnit::Year,
        "UTC",
        "2028-06-01T00:00:00Z",
        "2028-01-01T00:00:00Z",
        "2029-01-01T00:00:00Z",
    ),
    (
        CalendarUnit::Year,
        "Europe/Paris",
        "2026-12-31T23:30:00Z",
        "2026-12-31T23:00:00Z",
        "2027-12-31T23:00:00Z",
    ),
];

#[test]
fn windows_follow_the_local_calendar() {
    for &(unit, zone, now, start, end) in TABLE {
        assert_eq!(
            window(unit, zone, now),
            (at(start), at(end)),
            "{unit:?} in {zone} at {now}"
        );
    }
}

#[test]
fn daylight_saving_days_are_23_or_25_hours_long() {
    let len = |zone, now| {
        let (start, end) = window(CalendarUnit::Day, zone, now);
        end - start
    };
    assert_eq!(len("Europe/Paris", "2026-03-29T12:00:00Z"), 23 * 3_600);
    assert_eq!(len("Europe/Paris", "2026-10-25T12:00:00Z"), 25 * 3_600);
    assert_eq!(
        len("Australia/Lord_Howe", "2026-04-05T00:00:00Z"),
        24 * 3_600 + 1_800
    );
    assert_eq!(
        len("Australia/Lord_Howe", "2026-10-04T00:00:00Z"),
        23 * 3_600 + 1_800
    );
}

#[test]
fn week_start_moves_the_week() {
    let sunday = Calendar::interned(CalendarUnit::Week, "UTC", Weekday::Sunday).unwrap();
    assert_eq!(
        sunday.bounds(at("2026-11-25T10:00:00Z")),
        (at("2026-11-22T00:00:00Z"), at("2026-11-29T00:00:00Z"))
    );
    // On the first day itself, the week is the one it starts.
    assert_eq!(
        sunday.bounds(at("2026-11-22T00:00:00Z")),
        (at("2026-11-22T00:00:00Z"), at("2026-11-29T00:00:00Z"))
    );
}

#[test]
fn calendars_are_interned_and_zones_checked() {
    let a = Calendar::interned(CalendarUnit::Month, "Asia/Tokyo", Weekday::Monday).unwrap();
    let b = Calendar::interned(CalendarUnit::Month, "Asia/Tokyo", Weekday::Monday).unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(
        Calendar::interned(CalendarUnit::Day, "Mars/Olympus_Mons", Weekday::Monday),
        Err(UnknownZone("Mars/Olympus_Mons".to_owned()))
    );
    assert_eq!(parse_weekday("Sunday"), Some(Weekday::Sunday));
    assert_eq!(parse_weekday("sun"), None);
}

const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Sao_Paulo",
];

proptest! {
    /// For any instant from 1971 to 2100: the window holds it, the next
    /// window starts where it ends, its start is local midnight (of the
    /// week's first day for weeks, the 1st for months, 1 January for
    /// years), and a day lasts between 23 and 25 hours.
    #[test]
    fn windows_tile_the_calendar(now in 31_536_000u64..4_102_444_800, zone in 0usize..ZONES.len(), unit in 0usize..4, first in 0i8..7) {
        let unit = [CalendarUnit::Day, CalendarUnit::Week, CalendarUnit::Month, CalendarUnit::Year][unit];
        let week_start = Weekday::from_monday_zero_offset(first).unwrap();
        let calendar = Calendar::interned(unit, ZONES[zone], week_start).unwrap();
        let (start, end) = calendar.bounds(now);
        prop_assert!(start <= now && now < end);
        prop_assert_eq!(calendar.bounds(start), (start, end));
        prop_assert_eq!(calendar.bounds(end).0, end);
        prop_assert!(end - start <= calendar.longest_secs());
        let tz = TimeZone::get(ZONES[zone]).unwrap();
        let local = Timestamp::from_second(i64::try_from(start).unwrap()).unwrap().to_zoned_datetime(tz);
        let date = local.date();
        // The first instant of its day: midnight, or later when midnight
        // was skipped by a clock change.
        prop_assert!(local.hour() < 2, "{local}");
        match unit {
            CalendarUnit::Day => prop_assert!((23 * 3_600..=25 * 3_600).contains(&(end - start))),
            CalendarUnit::Week => prop_assert_eq!(date.weekday(), week_start),
            CalendarUnit::Month => prop_assert_eq!(date.day(), 1),
            CalendarUnit::Year => prop_assert_eq!((date.month(), date.day()), (1, 1)),
        }
    }
}
