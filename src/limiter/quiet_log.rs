//! Rate-limited failure logs: during an outage every request fails the same
//! way, and one line per request would bury everything else. At most one
//! line per second per kind of error is written, carrying how many were
//! left out since the last one.

use crate::clock::UnixMillis;
use parking_lot::Mutex;

/// How often one kind of error may be logged.
const PERIOD_MS: u64 = 1_000;

/// Kinds seen so far: few (one per error variant), so a small list.
#[derive(Debug, Default)]
pub(crate) struct QuietLog {
    kinds: Mutex<Vec<Kind>>,
}

#[derive(Debug)]
struct Kind {
    name: &'static str,
    last: UnixMillis,
    suppressed: u64,
}

impl QuietLog {
    /// Whether an error of `kind` at `now` is logged: `Some(n)` with the
    /// `n` errors of that kind left out since its last line, `None` to stay
    /// quiet (counted for the next line).
    pub(crate) fn admit(&self, kind: &'static str, now: UnixMillis) -> Option<u64> {
        let mut kinds = self.kinds.lock();
        let Some(seen) = kinds.iter_mut().find(|k| k.name == kind) else {
            kinds.push(Kind {
                name: kind,
                last: now,
                suppressed: 0,
            });
            return Some(0);
        };
        // A clock step backwards also logs, so a line is never lost for long.
        if now.0 >= seen.last.0.saturating_add(PERIOD_MS) || now.0 < seen.last.0 {
            seen.last = now;
            Some(std::mem::take(&mut seen.suppressed))
        } else {
            seen.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_second_per_kind_with_the_count_left_out() {
        let log = QuietLog::default();
        let t = |ms: u64| UnixMillis(1_700_000_000_000 + ms);
        assert_eq!(log.admit("timeout", t(0)), Some(0));
        for ms in 1..500 {
            assert_eq!(log.admit("timeout", t(ms)), None);
        }
        // Another kind has its own budget.
        assert_eq!(log.admit("redis", t(10)), Some(0));
        assert_eq!(log.admit("timeout", t(999)), None);
        assert_eq!(log.admit("timeout", t(1_000)), Some(500));
        assert_eq!(log.admit("timeout", t(1_001)), None);
        assert_eq!(log.admit("timeout", t(5_000)), Some(1));
        assert_eq!(log.admit("redis", t(5_000)), Some(0));
    }
}
