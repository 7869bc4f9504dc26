//! Lines of dependencies that log through the `log` crate (the Redis
//! client among them), passed on to the tracing subscriber, their warnings
//! and errors rate limited like floodgate's own failure lines: during an
//! outage the Redis client repeats the same lines (`Failed to connect to
//! node`, `beginning slot refresh`) many times a second, which would bury
//! everything else. At most one line a second per call site is written;
//! the next one written after a quiet spell is preceded by a line that
//! says how many were left out.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// How often one call site's warnings and errors may be written.
const PERIOD: Duration = Duration::from_secs(1);

/// Call sites remembered; beyond that, lines of new ones are written (few
/// dependencies log warnings at all, so this is never reached in practice,
/// and memory stays bounded if it is).
const MAX_SITES: usize = 256;

/// The `log` crate's logger: rate limits warnings and errors per call
/// site, passes every line on to tracing (where the log filter applies).
#[derive(Debug, Default)]
pub(super) struct LogBridge {
    gate: Gate,
}

impl log::Log for LogBridge {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        // The tracing filter decides, with the record's own target.
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.level() <= log::Level::Warn {
            let site = Site {
                target: record.target().to_owned(),
                file: record.file().map(str::to_owned),
                line: record.line(),
            };
            match self.gate.admit(site, Instant::now()) {
                None => return,
                Some(0) => {}
                Some(left_out) => tracing::warn!(
                    log.target = record.target(),
                    log.left_out = left_out,
                    "lines of a dependency left out (at most one a second per kind)"
                ),
            }
        }
        let _ = tracing_log::format_trace(record);
    }

    fn flush(&self) {}
}

#[derive(Debug, PartialEq, Eq)]
struct Site {
    target: String,
    file: Option<String>,
    line: Option<u32>,
}

#[derive(Debug, Default)]
struct Gate {
    sites: Mutex<Vec<(Site, Instant, u64)>>,
}

impl Gate {
    /// Whether a line of `site` at `now` is written: `Some(n)` with the `n`
    /// lines of that site left out since its last one, `None` to leave it
    /// out (counted for the next line).
    fn admit(&self, site: Site, now: Instant) -> Option<u64> {
        let mut sites = self.sites.lock();
        if let Some((_, last, left_out)) = sites.iter_mut().find(|(s, _, _)| *s == site) {
            if now.saturating_duration_since(*last) >= PERIOD {
                *last = now;
                return Some(std::mem::take(left_out));
            }
            *left_out += 1;
            return None;
        }
        if sites.len() < MAX_SITES {
            sites.push((site, now, 0));
        }
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::{Gate, Site};
    use std::time::{Duration, Instant};

    fn site(line: u32) -> Site {
        Site {
            target: "redis::cluster_handling::async_connection".to_owned(),
            file: Some("src/cluster_handling/async_connection/mod.rs".to_owned()),
            line: Some(line),
        }
    }

    #[test]
    fn one_line_a_second_per_call_site_with_the_count_left_out() {
        let gate = Gate::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(gate.admit(site(1871), at(0)), Some(0));
        // 130 lines in the next second: all left out.
        for i in 1..=130 {
            assert_eq!(gate.admit(site(1871), at(i * 7)), None);
        }
        // Another call site has its own second.
        assert_eq!(gate.admit(site(1739), at(500)), Some(0));
        assert_eq!(gate.admit(site(1739), at(600)), None);
        // A second on: written, with how many were left out.
        assert_eq!(gate.admit(site(1871), at(1_000)), Some(130));
        assert_eq!(gate.admit(site(1871), at(1_001)), None);
        assert_eq!(gate.admit(site(1739), at(1_600)), Some(1));
    }

    #[test]
    fn call_sites_beyond_the_bound_are_written_not_remembered() {
        let gate = Gate::default();
        let now = Instant::now();
        let max = u32::try_from(super::MAX_SITES).unwrap();
        for line in 0..max {
            assert_eq!(gate.admit(site(line), now), Some(0));
        }
        let extra = max + 1;
        assert_eq!(gate.admit(site(extra), now), Some(0));
        assert_eq!(gate.admit(site(extra), now), Some(0));
        assert_eq!(gate.sites.lock().len(), super::MAX_SITES);
    }
}
