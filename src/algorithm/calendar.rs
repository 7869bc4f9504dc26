//! Calendar windows (`calendar: true` on a `fixed_window` limit): a day,
//! week, month or year as a time zone's calendar has it, not a fixed
//! number of seconds from the epoch.
//!
//! Definition: the window containing `now` starts at local midnight of
//! the day that contains `now` (of the `week_start` weekday on or before
//! it, of the 1st of its month, of 1 January of its year) and ends at the
//! next such midnight. Days around a daylight-saving change are 23 or 25
//! hours long (Lord Howe Island's: 23.5 or 24.5); a midnight that does not
//! exist starts at the first instant of that day. The time zone database
//! is compiled in (jiff's bundled copy): no system files are read.
//!
//! Calendars are interned: one `&'static Calendar` per distinct (unit,
//! zone, week start), so a window stays `Copy` and a rule reload builds
//! nothing new for calendars it already had.

use jiff::Timestamp;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use parking_lot::Mutex;
use std::hash::{Hash, Hasher};

/// The calendar unit of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarUnit {
    /// From local midnight to the next.
    Day,
    /// From the week's first day (`week_start`) to the next.
    Week,
    /// From the 1st of the month to the 1st of the next.
    Month,
    /// From 1 January to the next.
    Year,
}

/// A calendar a window follows: its unit, time zone and first weekday.
#[derive(Debug)]
pub struct Calendar {
    unit: CalendarUnit,
    zone_name: Box<str>,
    zone: TimeZone,
    week_start: Weekday,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.unit == other.unit
            && self.zone_name == other.zone_name
            && self.week_start == other.week_start
    }
}

impl Eq for Calendar {}

impl Hash for Calendar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.unit.hash(state);
        self.zone_name.hash(state);
        self.week_start.to_monday_zero_offset().hash(state);
    }
}

/// A time zone name the database does not know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown time zone '{0}' (an IANA name such as Europe/Paris or America/New_York)")]
pub struct UnknownZone(pub String);

/// Every calendar built so far (few: one per distinct unit, zone and
/// week start in the rules ever loaded).
static INTERNED: Mutex<Vec<&'static Calendar>> = Mutex::new(Vec::new());

impl Calendar {
    /// The calendar of `unit` in the IANA zone `zone` (`UTC` included),
    /// weeks starting on `week_start`; the same `&'static` for the same
    /// arguments.
    ///
    /// # Errors
    ///
    /// [`UnknownZone`] when the zone database has no such zone.
    pub fn interned(
        unit: CalendarUnit,
        zone: &str,
        week_start: Weekday,
    ) -> Result<&'static Self, UnknownZone> {
        let mut interned = INTERNED.lock();
        if let Some(found) = interned
            .iter()
            .find(|c| c.unit == unit && &*c.zone_name == zone && c.week_start == week_start)
        {
            return Ok(found);
        }
        let tz = TimeZone::get(zone).map_err(|_| UnknownZone(zone.to_owned()))?;
        // Leaked on purpose: interned, so bounded by the distinct calendars
        // of all rules ever loaded.
        let calendar: &'static Self = Box::leak(Box::new(Self {
            unit,
            zone_name: zone.into(),
            zone: tz,
            week_start,
        }));
        interned.push(calendar);
        Ok(calendar)
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The zone's IANA name.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The longest window of the unit, in seconds (a 25-hour day, a
    /// 31-day month with an extra hour, a leap year with one): an upper
    /// bound for expiry times.
    pub fn longest_secs(&self) -> u64 {
        const HOUR: u64 = 3_600;
        match self.unit {
            CalendarUnit::Day => 25 * HOUR,
            CalendarUnit::Week => 7 * 24 * HOUR + HOUR,
            CalendarUnit::Month => 31 * 24 * HOUR + HOUR,
            CalendarUnit::Year => 366 * 24 * HOUR + HOUR,
        }
    }

    /// Start and end (seconds since the epoch) of the window containing
    /// `now_secs`: `start <= now_secs < end`.
    pub fn bounds(&self, now_secs: u64) -> (u64, u64) {
        let now = i64::try_from(now_secs).unwrap_or(i64::MAX);
        let Ok(instant) = Timestamp::from_second(now) else {
            return (now_secs, now_secs.saturating_add(1));
        };
        let today = instant.to_zoned_datetime(self.zone.clone()).date();
        let first = match self.unit {
            CalendarUnit::Day => today,
            CalendarUnit::Week => {
                let back = today.weekday().since(self.week_start);
                today
                    .checked_sub(jiff::Span::new().days(i64::from(back)))
                    .unwrap_or(today)
            }
            CalendarUnit::Month => today.first_of_month(),
            CalendarUnit::Year => today.first_of_year(),
        };
        let next = match self.unit {
            CalendarUnit::Day => first.checked_add(jiff::Span::new().days(1)),
            CalendarUnit::Week => first.checked_add(jiff::Span::new().weeks(1)),
            CalendarUnit::Month => first.checked_add(jiff::Span::new().months(1)),
            CalendarUnit::Year => first.checked_add(jiff::Span::new().years(1)),
        };
        let start = self.midnight(first).unwrap_or(now_secs);
        let end = next
            .ok()
            .and_then(|next| self.midnight(next))
            .filter(|&end| end > now_secs)
            .unwrap_or(now_secs.saturating_add(1));
        (start.min(now_secs), end)
    }

    /// The first instant of `date` in the zone, in seconds.
    fn midnight(&self, date: Date) -> Option<u64> {
        let zoned = date.to_zoned_datetime(self.zone.clone()).ok()?;
        u64::try_from(zoned.timestamp().as_second()).ok()
    }
}

/// Parses a rule file's `week_start`: a weekday's English name, any case.
pub fn parse_weekday(name: &str) -> Option<Weekday> {
    let name = name.to_ascii_lowercase();
    [
        ("monday", Weekday::Monday),
        ("tuesday", Weekday::Tuesday),
        ("wednesday", Weekday::Wednesday),
        ("thursday", Weekday::Thursday),
        ("friday", Weekday::Friday),
        ("saturday", Weekday::Saturday),
        ("sunday", Weekday::Sunday),
    ]
    .into_iter()
    .find(|(n, _)| *n == name)
    .map(|(_, day)| day)
}

#[cfg(test)]
mod tests;
