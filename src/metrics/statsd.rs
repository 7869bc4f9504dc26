//! The statsd sink (`USE_STATSD`, `USE_DOG_STATSD`): every
//! `STATS_FLUSH_INTERVAL` a background task sends the reference's stats
//! (`statsd_names`) to `STATSD_HOST:STATSD_PORT` over TCP (the reference's
//! default) or UDP: counters as the change since the last flush
//! (`name:N|c`, only when it moved), gauges as values (`|g`), and each
//! response time as a timer in milliseconds (`|ms`). Lines are batched into
//! packets of at most 1432 bytes over UDP (no fragmentation) and 64 KiB
//! writes over TCP.
//!
//! Requests never wait on statsd: they only bump atomics; this task reads
//! them. A flush that cannot be delivered (nothing listening, a full or slow
//! peer, a name that does not resolve) is dropped within a bounded time and
//! counted in `ratelimit_statsd_dropped_lines_total`; the next flush tries
//! again, reconnecting over TCP. At most [`MAX_TIMER_LINES`] timer lines
//! are sent per flush; beyond that, the observations of one value share a
//! line with a sample rate (`|@0.25` stands for 4).
//!
//! DogStatsD (`USE_DOG_STATSD`) sends the same stats over UDP with tags in
//! DogStatsD form (`|#k:v`): `EXTRA_TAGS` become tags, and the first
//! mogrifier (`USE_DOG_STATSD_MOGRIFIERS`) whose pattern matches a name
//! rewrites it and adds its tags, with `$n` replaced by the pattern's
//! groups.

use super::Metrics;
use super::statsd_names::{RESPONSE_TIME, Tags, split_tags};
use crate::metrics::ReloadStats;
use regex::Regex;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Largest UDP payload: fits one Ethernet frame with room for headers.
pub(crate) const MAX_UDP_PACKET: usize = 1432;
/// Largest single TCP write.
pub(crate) const MAX_TCP_WRITE: usize = 64 * 1024;
/// Most timer lines sent one observation per line in one flush.
pub(crate) const MAX_TIMER_LINES: usize = 2_000;
/// Longest wait for one connect, resolve or send.
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// Transport to statsd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP (the reference's default).
    Tcp,
    /// UDP.
    Udp,
}

/// A DogStatsD name rewrite (`DOG_STATSD_MOGRIFIER_<N>_*`).
#[derive(Debug, Clone)]
pub struct Mogrifier {
    /// `_PATTERN`: a regex over the stat name.
    pub pattern: Regex,
    /// `_NAME`: the new name, `$n` replaced by group n.
    pub name: String,
    /// `_TAGS`: tags to add, values with `$n`.
    pub tags: Vec<(String, String)>,
}

/// Line format.
#[derive(Debug, Clone)]
pub enum Format {
    /// Plain statsd, tags inside the name (`.__k=v`).
    Statsd,
    /// DogStatsD, tags as `|#k:v`, names rewritten by the mogrifiers.
    DogStatsd(Vec<Mogrifier>),
}

/// Where and how to send stats.
#[derive(Debug, Clone)]
pub struct StatsdOptions {
    /// `STATSD_HOST`.
    pub host: String,
    /// `STATSD_PORT`.
    pub port: u16,
    /// `STATSD_PROTOCOL`.
    pub protocol: Protocol,
    /// `STATS_FLUSH_INTERVAL`.
    pub flush_interval: Duration,
    /// Plain or DogStatsD lines.
    pub format: Format,
    /// `EXTRA_TAGS`.
    pub tags: Tags,
}

static DOLLAR_N: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"\$\d+").expect("a valid constant regex")
});

impl Mogrifier {
    /// Replaces `$n` in `template` with group n of `groups` (kept as is when
    /// there is no such group), as the reference does.
    fn fill(template: &str, groups: &regex::Captures<'_>) -> String {
        DOLLAR_N
            .replace_all(template, |c: &regex::Captures<'_>| {
                let text = c.get(0).map_or("", |m| m.as_str());
                text.get(1..)
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| groups.get(n))
                    .map_or_else(|| text.to_owned(), |m| m.as_str().to_owned())
            })
            .into_owned()
    }
}

/// The name and DogStatsD tags of a stat: tags split off the name, then the
/// first matching mogrifier applied.
fn dog_name(name: &str, mogrifiers: &[Mogrifier]) -> (String, Vec<String>) {
    let (short, extra) = split_tags(name);
    let mut tags: Vec<String> = extra.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    for m in mogrifiers {
        if let Some(groups) = m.pattern.captures(short) {
            tags.extend(
                m.tags
                    .iter()
                    .map(|(k, v)| format!("{k}:{}", Mogrifier::fill(v, &groups))),
            );
            return (Mogrifier::fill(&m.name, &groups), tags);
        }
    }
    (short.to_owned(), tags)
}

/// One statsd line.
fn line(format: &Format, name: &str, value: u64, kind: &str, sample: Option<f64>) -> String {
    let (name, tags) = match format {
        Format::Statsd => (name.to_owned(), Vec::new()),
        Format::DogStatsd(mogrifiers) => dog_name(name, mogrifiers),
    };
    let mut out = format!("{name}:{value}|{kind}");
    if let Some(rate) = sample {
        let _ = write!(out, "|@{rate}");
    }
    if !tags.is_empty() {
        let _ = write!(out, "|#{}", tags.join(","));
    }
    out
}

/// What was reported at the previous flush, to send changes only.
#[derive(Debug, Default)]
pub(crate) struct Flusher {
    counters: HashMap<String, u64>,
    times: HashMap<u64, u64>,
}

impl Flusher {
    /// The lines of one flush: counters that moved since the previous one,
    /// and the response times observed since.
    pub(crate) fn lines(
        &mut self,
        metrics: &Metrics,
        reloads: Option<&ReloadStats>,
        options: &StatsdOptions,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for stat in metrics.reference_stats(reloads, &options.tags) {
            let previous = self.counters.insert(stat.name.clone(), stat.value);
            let delta = stat.value.saturating_sub(previous.unwrap_or(0));
            if delta > 0 {
                lines.push(line(&options.format, &stat.name, delta, "c", None));
            }
        }
        let timer = options.tags.apply(RESPONSE_TIME);
        let mut budget = MAX_TIMER_LINES;
        for (ms, total) in metrics.response_times_ms() {
            let previous = self.times.insert(ms, total).unwrap_or(0);
            let new = total.saturating_sub(previous);
            if new == 0 {
                continue;
            }
            let one_by_one = usize::try_from(new).unwrap_or(usize::MAX);
            if one_by_one <= budget {
                budget -= one_by_one;
                for _ in 0..new {
                    lines.push(line(&options.format, &timer, ms, "ms", None));
                }
            } else {
                #[allow(clippy::cast_precision_loss)] // a sample rate
                let rate = 1.0 / new as f64;
                lines.push(line(&options.format, &timer, ms, "ms", Some(rate)));
            }
        }
        lines
    }
}

/// Lines joined by `\n` into payloads of at most `max` bytes (a longer line
/// goes alone).
pub(crate) fn packets(lines: &[String], max: usize) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut current = String::new();
    let mut count = 0;
    for line in lines {
        if !current.is_empty() && current.len() + line.len() + 1 > max {
            out.push((std::mem::take(&mut current), count));
            count = 0;
        }
        current.push_str(line);
        current.push('\n');
        count += 1;
    }
    if count > 0 {
        out.push((current, count));
    }
    out
}

/// The connection state of the sink.
#[derive(Debug)]
struct Sink {
    options: StatsdOptions,
    tcp: Option<TcpStream>,
    udp: Option<UdpSocket>,
    failing: bool,
    /// Whether statsd ever took a flush: until it has, a failure is most
    /// likely the reference's default (`USE_STATSD=true`) with no statsd
    /// running, not an outage.
    delivered: bool,
}

#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("cannot resolve the statsd address")]
    Resolve,
    #[error("statsd did not answer in time")]
    Timeout,
    #[error("statsd i/o failed")]
    Io(#[source] std::io::Error),
}

/// `io` within [`IO_TIMEOUT`].
async fn timed<T>(io: impl Future<Output = std::io::Result<T>>) -> Result<T, SendError> {
    tokio::time::timeout(IO_TIMEOUT, io)
        .await
        .map_err(|_| SendError::Timeout)?
        .map_err(SendError::Io)
}

impl Sink {
    async fn resolve(&self) -> Result<SocketAddr, SendError> {
        let target = (self.options.host.as_str(), self.options.port);
        let mut addrs = timed(tokio::net::lookup_host(target)).await?;
        addrs.next().ok_or(SendError::Resolve)
    }

    /// Sends the packets; returns the first failure and how many lines
    /// were not delivered. Over TCP a failure drops the connection and the
    /// rest of the flush; over UDP only the packet that failed is lost.
    async fn send_all(&mut self, packets: &[(String, u64)]) -> Result<(), (SendError, u64)> {
        let total: u64 = packets.iter().map(|(_, n)| n).sum();
        match self.options.protocol {
            Protocol::Tcp => {
                let mut stream = match self.tcp.take() {
                    Some(stream) => stream,
                    None => {
                        let addr = self.resolve().await.map_err(|e| (e, total))?;
                        timed(TcpStream::connect(addr))
                            .await
                            .map_err(|e| (e, total))?
                    }
                };
                let mut sent = 0;
                for (payload, count) in packets {
                    timed(stream.write_all(payload.as_bytes()))
                        .await
                        .map_err(|e| (e, total - sent))?;
                    sent += count;
                }
                self.tcp = Some(stream);
                Ok(())
            }
            Protocol::Udp => {
                let addr = self.resolve().await.map_err(|e| (e, total))?;
                let socket = match self.udp.take() {
                    Some(socket) => socket,
                    None => {
                        let local: SocketAddr = if addr.is_ipv4() {
                            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
                        } else {
                            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                        };
                        timed(UdpSocket::bind(local))
                            .await
                            .map_err(|e| (e, total))?
                    }
                };
                let mut failure = None;
                let mut lost = 0;
                for (payload, count) in packets {
                    if let Err(err) = timed(socket.send_to(payload.as_bytes(), addr)).await {
                        lost += count;
                        failure.get_or_insert(err);
                    }
                }
                self.udp = Some(socket);
                failure.map_or(Ok(()), |err| Err((err, lost)))
            }
        }
    }

    /// Sends the lines; what cannot be delivered is counted as dropped, and
    /// an outage is logged once, when it starts.
    async fn deliver(&mut self, lines: &[String], metrics: &Metrics) {
        let max = match self.options.protocol {
            Protocol::Udp => MAX_UDP_PACKET,
            Protocol::Tcp => MAX_TCP_WRITE,
        };
        match self.send_all(&packets(lines, max)).await {
            Err((err, dropped)) => {
                metrics.record_statsd_dropped(dropped);
                if !self.failing && !self.delivered {
                    self.failing = true;
                    // One line, at start, saying what to set: not a warning
                    // on every start of a service that runs without statsd.
                    info!(
                        error = &err as &dyn std::error::Error,
                        statsd.host = %self.options.host,
                        statsd.port = self.options.port,
                        "no statsd answers; stats are dropped until one does (USE_STATSD=false turns statsd off)"
                    );
                } else if !self.failing {
                    self.failing = true;
                    warn!(
                        error = &err as &dyn std::error::Error,
                        statsd.host = %self.options.host,
                        statsd.port = self.options.port,
                        dropped,
                        "statsd unreachable; dropping stats until it answers"
                    );
                }
            }
            Ok(()) if self.failing => {
                self.failing = false;
                self.delivered = true;
                info!(statsd.host = %self.options.host, statsd.port = self.options.port, "statsd reachable again");
            }
            Ok(()) => self.delivered = true,
        }
    }
}

/// Flushes every `options.flush_interval` until `shutdown`, then once more.
pub(crate) async fn run(
    metrics: Arc<Metrics>,
    reloads: Option<Arc<ReloadStats>>,
    options: StatsdOptions,
    shutdown: CancellationToken,
) {
    let interval = options.flush_interval.max(Duration::from_millis(10));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flusher = Flusher::default();
    let mut sink = Sink {
        options,
        tcp: None,
        udp: None,
        failing: false,
        delivered: false,
    };
    loop {
        let last = tokio::select! {
            () = shutdown.cancelled() => true,
            _ = ticks.tick() => false,
        };
        let lines = flusher.lines(&metrics, reloads.as_deref(), &sink.options);
        if !lines.is_empty() {
            sink.deliver(&lines, &metrics).await;
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RuleHit;

    fn options(format: Format, tags: &str) -> StatsdOptions {
        StatsdOptions {
            host: "127.0.0.1".to_owned(),
            port: 1,
            protocol: Protocol::Udp,
            flush_interval: Duration::from_secs(10),
            format,
            tags: Tags::parse(tags).unwrap(),
        }
    }

    fn hit(hits: u64, after: u64) -> RuleHit {
        RuleHit {
            hits,
            limit: 10,
            before: after - hits,
            after,
            over_limit: false,
            local_cache: false,
            shadow_mode: false,
        }
    }

    #[test]
    fn counters_are_sent_as_changes_and_timers_one_per_observation() {
        let m = Metrics::new(0.8, 100);
        let o = options(Format::Statsd, "");
        let mut f = Flusher::default();
        assert!(f.lines(&m, None, &o).is_empty());
        m.record_rule("edge.user", hit(2, 2));
        m.response_time_ms.observe(Duration::from_millis(1));
        m.response_time_ms.observe(Duration::from_millis(1));
        assert_eq!(
            f.lines(&m, None, &o),
            [
                "ratelimit.service.rate_limit.edge.user.total_hits:2|c",
                "ratelimit.service.rate_limit.edge.user.within_limit:2|c",
                "ratelimit_server.ShouldRateLimit.response_time:1|ms",
                "ratelimit_server.ShouldRateLimit.response_time:1|ms",
            ]
        );
        m.record_rule("edge.user", hit(1, 3));
        assert_eq!(
            f.lines(&m, None, &o),
            [
                "ratelimit.service.rate_limit.edge.user.total_hits:1|c",
                "ratelimit.service.rate_limit.edge.user.within_limit:1|c",
            ]
        );
        assert!(f.lines(&m, None, &o).is_empty());
        for _ in 0..MAX_TIMER_LINES + 2 {
            m.response_time_ms.observe(Duration::from_millis(4));
        }
        let sampled = format!(
            "ratelimit_server.ShouldRateLimit.response_time:4|ms|@{}",
            1.0 / (MAX_TIMER_LINES + 2) as f64
        );
        assert_eq!(f.lines(&m, None, &o), [sampled]);
    }

    #[test]
    fn tags_follow_the_reference_in_both_formats() {
        let m = Metrics::new(0.8, 100);
        m.record_rule("mongo_cps.database_users", hit(1, 1));
        let plain = options(Format::Statsd, "env:prod");
        assert_eq!(
            Flusher::default().lines(&m, None, &plain)[0],
            "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits.__env=prod:1|c"
        );
        let mogrifier = Mogrifier {
            pattern: Regex::new(r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$").unwrap(),
            name: "ratelimit.service.rate_limit.$3".to_owned(),
            tags: vec![
                ("descriptor".to_owned(), "$2".to_owned()),
                ("domain".to_owned(), "$1".to_owned()),
                ("missing".to_owned(), "$7".to_owned()),
            ],
        };
        let dog = options(Format::DogStatsd(vec![mogrifier]), "env:prod");
        let lines = Flusher::default().lines(&m, None, &dog);
        assert_eq!(
            lines[0],
            "ratelimit.service.rate_limit.total_hits:1|c|#env:prod,descriptor:database_users,domain:mongo_cps,missing:$7"
        );
        let bare = options(Format::DogStatsd(Vec::new()), "");
        assert_eq!(
            Flusher::default().lines(&m, None, &bare)[0],
            "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits:1|c"
        );
    }

    proptest::proptest! {
        /// However hits and flushes interleave, the counts sent add up to
        /// the totals, and one timer line goes per observation.
        #[test]
        fn sent_changes_add_up_to_the_totals(
            steps in proptest::collection::vec((0_u64..4, proptest::bool::ANY), 1..40),
        ) {
            let m = Metrics::new(0.8, 100);
            let o = options(Format::Statsd, "");
            let mut f = Flusher::default();
            let (mut sent_hits, mut sent_timers, mut total) = (0, 0, 0);
            let mut tally = |lines: Vec<String>| {
                for line in lines {
                    if let Some(n) = line
                        .strip_prefix("ratelimit.service.rate_limit.d.k.total_hits:")
                        .and_then(|rest| rest.strip_suffix("|c"))
                    {
                        sent_hits += n.parse::<u64>().unwrap();
                    } else if line.starts_with(RESPONSE_TIME) {
                        sent_timers += 1;
                    }
                }
            };
            for (hits, flush) in steps {
                if hits > 0 {
                    total += hits;
                    m.record_rule("d.k", hit(hits, total));
                    m.response_time_ms.observe(Duration::from_millis(hits));
                }
                if flush {
                    tally(f.lines(&m, None, &o));
                }
            }
            tally(f.lines(&m, None, &o));
            proptest::prop_assert_eq!(sent_hits, total);
            let observations: u64 = m.response_times_ms().iter().map(|(_, n)| n).sum();
            proptest::prop_assert_eq!(sent_timers, observations);
        }
    }

    #[test]
    fn packets_stay_under_the_size() {
        let lines: Vec<String> = (0..300).map(|i| format!("a.stat.{i}:1|c")).collect();
        let packets = packets(&lines, MAX_UDP_PACKET);
        assert!(packets.len() > 1);
        assert!(packets.iter().all(|(p, _)| p.len() <= MAX_UDP_PACKET));
        assert_eq!(packets.iter().map(|(_, n)| n).sum::<u64>(), 300);
        let joined: String = packets.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(joined.lines().count(), 300);
    }
}
