//! Process metrics in the names Prometheus' client libraries use
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, …), read
//! from `/proc/self`. On a system without `/proc` nothing is rendered.

use std::fmt::Write as _;

/// Clock ticks per second of `/proc/<pid>/stat` times: Linux reports them
/// in `USER_HZ`, which is 100 on every architecture's user ABI.
const USER_HZ: f64 = 100.0;

/// What `/proc/self` says about this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Start time, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
}

impl ProcessStats {
    /// Reads `/proc/self`; `None` when it is not there or not understood.
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Self::parse(&stat, &status, &boot, &limits, open_fds)
    }

    /// Parses the texts of `/proc/self/stat`, `/proc/self/status`,
    /// `/proc/stat` and `/proc/self/limits`.
    pub(crate) fn parse(
        stat: &str,
        status: &str,
        boot: &str,
        limits: &str,
        open_fds: u64,
    ) -> Option<Self> {
        // The command name may hold spaces and parentheses: fields start
        // after the last ')'. Field 3 (state) is index 0 here.
        let fields: Vec<&str> = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        let (utime, stime, start_ticks, vsize) = (field(14)?, field(15)?, field(22)?, field(23)?);
        let kib = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let rss_kib = kib(status, "VmRSS:")?;
        let boot_time = kib(boot, "btime")?;
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok());
        #[allow(clippy::cast_precision_loss)] // display values
        Some(Self {
            cpu_seconds: (utime + stime) as f64 / USER_HZ,
            resident_bytes: rss_kib.saturating_mul(1024),
            virtual_bytes: vsize,
            start_time_seconds: boot_time as f64 + start_ticks as f64 / USER_HZ,
            open_fds,
            max_fds,
        })
    }

    /// Appends the metrics in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            self.cpu_seconds.to_string(),
        );
        metric(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            self.resident_bytes.to_string(),
        );
        metric(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            self.virtual_bytes.to_string(),
        );
        metric(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds.to_string(),
        );
        metric(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            self.open_fds.to_string(),
        );
        if let Some(max) = self.max_fds {
            metric(
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                max.to_string(),
            );
        }
    }
}

/// Appends the process metrics, if `/proc/self` can be read.
pub(crate) fn render_process(out: &mut String) {
    if let Some(stats) = ProcessStats::read() {
        stats.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_texts() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 123456789 2000 18446744073709551615";
        let status = "Name:\tx\nVmSize:\t  120560 kB\nVmRSS:\t    8192 kB\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 1048576              files\n";
        let p = ProcessStats::parse(stat, status, boot, limits, 7).unwrap();
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.0,
                resident_bytes: 8192 * 1024,
                virtual_bytes: 123_456_789,
                start_time_seconds: 1_700_000_010.0,
                open_fds: 7,
                max_fds: Some(1024),
            }
        );
        let mut out = String::new();
        p.render(&mut out);
        assert!(
            out.contains("\nprocess_resident_memory_bytes 8388608\n"),
            "{out}"
        );
        assert!(out.contains("\nprocess_max_fds 1024\n"), "{out}");
        assert!(ProcessStats::parse("garbage", status, boot, limits, 0).is_none());
    }

    #[test]
    fn reads_this_process() {
        let p = ProcessStats::read().unwrap();
        assert!(p.resident_bytes > 0 && p.open_fds > 0 && p.start_time_seconds > 1e9);
    }
}
