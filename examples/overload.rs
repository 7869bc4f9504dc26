//! An open-loop gRPC load generator for `bench/overload.sh`: requests are
//! sent on a schedule whatever the answers (as traffic arrives at a
//! limiter in front of a busy service), each with `grpc-timeout` as
//! Envoy's rate-limit filter sends it, and every answer is sorted by what
//! it is worth to its caller:
//!
//! - goodput: a decision (grpc-status 0) within the deadline;
//! - shed: a `RESOURCE_EXHAUSTED` answer (floodgate's shed under
//!   `FAILURE_MODE=error`) within the deadline;
//! - late: any answer after the deadline, or none within it and a second;
//! - errors: anything else (a refused or reset stream, a stream past a
//!   GOAWAY, a closed connection, another status).
//!
//! Lateness counts from the request's scheduled time, so waiting for a
//! free stream or flow-control window on the client is the caller's wait
//! too.
//!
//! ```text
//! overload ADDR BODY_FILE RATE SECS [CONNS] [DEADLINE_MS]
//! ```
//!
//! `BODY_FILE` is a framed gRPC request (`grpc_body encode`). Prints one
//! line per second (with how far behind its schedule the generator issued
//! a request of that second at most: a stall of its own sends the stall's
//! requests at once, a burst for the server) and a total line:
//! `total sent=N goodput=N shed=N late=N errors=N seconds=S`; `sent` counts
//! the requests scheduled in each second. On stderr, how far behind its
//! schedule the generator itself issued requests (`issue lag`, its own
//! speed) and wrote them (`write lag`, which adds the waits for the
//! server's streams and windows).
//!
//! The client is cheap so that one core can send several times a server
//! core's capacity: one thread, one task per connection (none per
//! request), HTTP/2 frames written by hand. Each connection writes every
//! request due in a millisecond tick in one write; its header blocks are
//! indexed after the first request (7 bytes, as Envoy's are); the server's
//! header blocks are all decoded in order (`loona_hpack`) for `grpc-status`,
//! its DATA only counted for the receive window. The server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` and send windows are kept: a request
//! they hold back waits in the client, keeping its scheduled time. A
//! connection told GOAWAY is drained on its own task and replaced.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::TcpStream;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest window HTTP/2 allows, given to the server for every stream
/// and the connection.
const MAX_WINDOW: u32 = (1 << 31) - 1;
/// Received DATA after which the connection window is topped up again.
const REPLENISH: u64 = 1 << 30;
/// The largest frame the server may send (SETTINGS_MAX_FRAME_SIZE left at
/// its default).
const MAX_FRAME: usize = 16_384;
/// The read buffer: a whole frame always fits after the unread bytes are
/// moved to its front.
const READ_BUFFER: usize = 256 * 1024;
/// Reads per readiness before the task lets the others run.
const READS_PER_WAKE: usize = 16;
/// Lag histograms: 10 µs buckets up to a second (the last counts beyond).
const LAG_BUCKET_NS: u64 = 10_000;
const LAG_BUCKETS: usize = 100_001;

/// What an answer was worth; the index in a tally row.
#[derive(Clone, Copy)]
enum Fate {
    Goodput = 1,
    Shed = 2,
    Late = 3,
    Error = 4,
}

/// A `grpc-status` as far as the fates tell them apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Exhausted,
    Other,
}

/// What every connection shares (one thread: cells).
struct Shared {
    addr: String,
    body: Vec<u8>,
    /// Header blocks: the first on a connection adds its fields to the
    /// server's table, the later ones name them by index.
    first_block: Vec<u8>,
    indexed_block: Vec<u8>,
    /// For a server whose table cannot hold the fields.
    literal_block: Vec<u8>,
    /// Room the fields take in the server's decoding table (RFC 7541 4.1).
    table_bytes: usize,
    /// Set once every connection is open.
    start: OnceLock<Instant>,
    rate: u64,
    total: u64,
    conns: u64,
    deadline_ns: u64,
    /// The deadline and a second: no answer by then is late and forgotten.
    grace_ns: u64,
    /// When every answer is in or late.
    end_ns: AtomicU64,
    /// Per scheduled second: sent, goodput, shed, late, errors.
    tally: Vec<[AtomicU64; 5]>,
    /// Per scheduled second: how far behind its schedule the generator
    /// issued a request at most (ns). A stall of its own sends the
    /// requests of the stall at once, a burst the server sees.
    issue_max: Vec<AtomicU64>,
    issue_lag: Lag,
    write_lag: Lag,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.get().map_or(0, |start| {
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
        })
    }

    /// Request `i`'s scheduled time, in nanoseconds from the start.
    fn scheduled_ns(&self, i: u64) -> u64 {
        u64::try_from(u128::from(i) * 1_000_000_000 / u128::from(self.rate)).unwrap_or(u64::MAX)
    }

    /// Requests scheduled by `now_ns`.
    fn due(&self, now_ns: u64) -> u64 {
        let due = u128::from(now_ns) * u128::from(self.rate) / 1_000_000_000 + 1;
        u64::try_from(due).unwrap_or(u64::MAX).min(self.total)
    }

    fn count(&self, second: u32, column: usize) {
        if let Some(row) = self.tally.get(second as usize) {
            row[column].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sorts one answer (or its absence, `status` None: a reset, a closed
    /// connection, a stream ended without a status) that came at `now_ns`.
    fn fate(&self, request: Request, status: Option<Status>, now_ns: u64) {
        let fate = if now_ns.saturating_sub(request.scheduled_ns) > self.deadline_ns {
            Fate::Late
        } else {
            match status {
                Some(Status::Ok) => Fate::Goodput,
                Some(Status::Exhausted) => Fate::Shed,
                _ => Fate::Error,
            }
        };
        self.count(request.second, fate as usize);
    }
}

/// A histogram of how far behind its schedule a request went.
struct Lag {
    buckets: Vec<AtomicU64>,
    max_ns: AtomicU64,
}

impl Lag {
    fn new() -> Self {
        Self {
            buckets: (0..LAG_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_ns: AtomicU64::new(0),
        }
    }

    fn record(&self, lag_ns: u64) {
        let bucket = usize::try_from(lag_ns / LAG_BUCKET_NS).unwrap_or(usize::MAX);
        let last = self.buckets.len() - 1;
        self.buckets[bucket.min(last)].fetch_add(1, Ordering::Relaxed);
        self.max_ns.fetch_max(lag_ns, Ordering::Relaxed);
    }

    /// `p50=… p99=… p99.9=… max=…` in microseconds (a bucket's upper end),
    /// and the share over a millisecond.
    fn summary(&self) -> String {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let n: u64 = buckets.iter().sum();
        if n == 0 {
            return "none".to_owned();
        }
        let quantile = |q: f64| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let rank = ((n as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, count) in buckets.iter().enumerate() {
                seen += count;
                if seen >= rank {
                    return (i as u64 + 1) * LAG_BUCKET_NS / 1000;
                }
            }
            u64::MAX
        };
        let over_ms: u64 = buckets[(1_000_000 / LAG_BUCKET_NS) as usize..].iter().sum();
        #[allow(clippy::cast_precision_loss)]
        let share = over_ms as f64 / n as f64;
        format!(
            "p50={}us p99={}us p99.9={}us max={}us over_1ms={share:.4}",
            quantile(0.5),
            quantile(0.99),
            quantile(0.999),
            self.max_ns.load(Ordering::Relaxed) / 1000
        )
    }
}

/// A request: when it was due and the second it counts in.
#[derive(Clone, Copy)]
struct Request {
    scheduled_ns: u64,
    second: u32,
}

/// A stream this client opened.
#[derive(Clone, Copy)]
struct Stream {
    request: Request,
    /// Its fate is counted (answered, failed, or late and forgotten).
    fated: bool,
    /// Closed on the server's side too: no longer held against its
    /// stream limit.
    closed: bool,
}

/// One HTTP/2 connection's state.
struct Conn {
    shared: Arc<Shared>,
    tcp: TcpStream,
    read: Box<[u8]>,
    read_from: usize,
    read_to: usize,
    write: Vec<u8>,
    written: usize,
    decoder: loona_hpack::Decoder<'static>,
    /// The first header block (and a table size update, if needed) was
    /// sent: later blocks are indexed.
    indexed: bool,
    /// The server's decoding table cannot hold the fields: every block is
    /// literal, not indexed.
    literal: bool,
    /// A table size update the next block starts with.
    table_update: Option<usize>,
    next_id: u32,
    // The server's settings.
    got_settings: bool,
    max_streams: u32,
    initial_window: i64,
    max_frame: usize,
    /// The connection's send window.
    send_window: i64,
    /// DATA received since the connection window was last topped up.
    received: u64,
    /// Streams opened and not yet closed by the server.
    open: u32,
    /// Every stream not yet closed (and those after it), by id: the
    /// front's id is `first_id`, ids go up by two.
    streams: VecDeque<Stream>,
    first_id: u32,
    /// Streams below this id were checked for lateness.
    expired_to: u32,
    /// A header block waiting for CONTINUATION frames: stream, END_STREAM,
    /// the block so far.
    continuing: Option<(u32, bool)>,
    block: Vec<u8>,
    /// The server's GOAWAY: its last stream.
    goaway: Option<u32>,
    /// Unusable (closed by the server, a write or protocol error).
    closed: bool,
}

impl Conn {
    /// Connects, writes the preface and settings, and waits for the
    /// server's settings.
    async fn open(shared: &Arc<Shared>) -> io::Result<Self> {
        let tcp = TcpStream::connect(&shared.addr).await?;
        tcp.set_nodelay(true)?;
        let mut conn = Self {
            shared: shared.clone(),
            tcp,
            read: vec![0; READ_BUFFER].into_boxed_slice(),
            read_from: 0,
            read_to: 0,
            write: Vec::with_capacity(64 * 1024),
            written: 0,
            decoder: loona_hpack::Decoder::new(),
            indexed: false,
            literal: false,
            table_update: None,
            next_id: 1,
            got_settings: false,
            max_streams: u32::MAX,
            initial_window: 65_535,
            max_frame: MAX_FRAME,
            send_window: 65_535,
            received: 0,
            open: 0,
            streams: VecDeque::new(),
            first_id: 1,
            expired_to: 1,
            continuing: None,
            block: Vec::new(),
            goaway: None,
            closed: false,
        };
        conn.write.extend_from_slice(PREFACE);
        let mut settings = Vec::with_capacity(12);
        settings.extend_from_slice(&2u16.to_be_bytes()); // ENABLE_PUSH
        settings.extend_from_slice(&0u32.to_be_bytes());
        settings.extend_from_slice(&4u16.to_be_bytes()); // INITIAL_WINDOW_SIZE
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        conn.frame(SETTINGS, 0, 0, &settings);
        conn.frame(WINDOW_UPDATE, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes());
        let handshake = async {
            while !conn.got_settings {
                if conn.closed {
                    return Err(io::Error::other("connection closed in the handshake"));
                }
                std::future::poll_fn(|cx| {
                    if conn.poll_ready(cx) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
                conn.on_ready();
            }
            Ok(())
        };
        tokio::time::timeout(Duration::from_secs(5), handshake)
            .await
            .map_err(|_| io::Error::other("no SETTINGS from the server within 5 s"))??;
        Ok(conn)
    }

    /// Whether the socket may be read (or written, with bytes waiting);
    /// if not, `cx` is woken when it may.
    fn poll_ready(&self, cx: &mut Context<'_>) -> bool {
        if self.closed {
            return false;
        }
        let readable = self.tcp.poll_read_ready(cx).is_ready();
        readable || (self.written < self.write.len() && self.tcp.poll_write_ready(cx).is_ready())
    }

    /// Takes requests from `queue` while the server's stream limit and
    /// windows allow.
    fn send(&mut self, queue: &mut VecDeque<Request>, now_ns: u64) {
        let body = self.shared.body.len();
        let body_window = i64::try_from(body).unwrap_or(i64::MAX);
        while let Some(&request) = queue.front() {
            if self.closed
                || self.goaway.is_some()
                || !self.got_settings
                || self.open >= self.max_streams
                || self.send_window < body_window
                || self.initial_window < body_window
                || self.next_id > MAX_WINDOW
            {
                return;
            }
            queue.pop_front();
            let id = self.next_id;
            self.next_id += 2;
            self.headers(id);
            let shared = self.shared.clone();
            let mut chunks = shared.body.chunks(self.max_frame.max(1)).peekable();
            if chunks.peek().is_none() {
                self.frame(DATA, END_STREAM, id, &[]);
            }
            while let Some(chunk) = chunks.next() {
                let flags = if chunks.peek().is_none() {
                    END_STREAM
                } else {
                    0
                };
                self.frame(DATA, flags, id, chunk);
            }
            self.send_window -= body_window;
            self.open += 1;
            if self.streams.is_empty() {
                self.first_id = id;
            }
            self.streams.push_back(Stream {
                request,
                fated: false,
                closed: false,
            });
            shared
                .write_lag
                .record(now_ns.saturating_sub(request.scheduled_ns));
        }
    }

    /// A request's HEADERS frame.
    fn headers(&mut self, id: u32) {
        let shared = self.shared.clone();
        let mut block = Vec::new();
        let block: &[u8] = if self.literal {
            &shared.literal_block
        } else if self.indexed {
            &shared.indexed_block
        } else {
            if let Some(size) = self.table_update.take() {
                loona_hpack::encoder::encode_integer_into(size, 5, 0x20, &mut block).unwrap();
            }
            block.extend_from_slice(&shared.first_block);
            self.indexed = true;
            &block
        };
        // A header block is far below the smallest frame size allowed.
        self.frame(HEADERS, END_HEADERS, id, block);
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes();
        self.write.extend_from_slice(&len[1..]);
        self.write.push(kind);
        self.write.push(flags);
        self.write.extend_from_slice(&stream.to_be_bytes());
        self.write.extend_from_slice(payload);
    }

    /// Writes what it can without blocking.
    fn flush(&mut self) {
        while self.written < self.write.len() && !self.closed {
            match self.tcp.try_write(&self.write[self.written..]) {
                Ok(0) => self.close(),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.close(),
            }
        }
        self.write.clear();
        self.written = 0;
    }

    /// Reads and handles what arrived, then writes what that asks for.
    fn on_ready(&mut self) {
        for _ in 0..READS_PER_WAKE {
            if self.closed {
                break;
            }
            if self.read_from > 0 {
                self.read.copy_within(self.read_from..self.read_to, 0);
                self.read_to -= self.read_from;
                self.read_from = 0;
            }
            match self.tcp.try_read(&mut self.read[self.read_to..]) {
                Ok(0) => self.close(),
                Ok(n) => {
                    let short = self.read_to + n < self.read.len();
                    self.read_to += n;
                    self.frames();
                    if short {
                        // Drained: readiness cleared without another
                        // read to be told so (the next arrival sets it).
                        let _ = self.tcp.try_io(Interest::READABLE, || {
                            Err::<(), _>(io::ErrorKind::WouldBlock.into())
                        });
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.close(),
            }
        }
        self.flush();
    }

    /// Handles every whole frame read.
    fn frames(&mut self) {
        let now_ns = self.shared.now_ns();
        let read = std::mem::take(&mut self.read);
        while self.read_to - self.read_from >= 9 && !self.closed {
            let head = &read[self.read_from..self.read_from + 9];
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
            if len > MAX_FRAME {
                self.close();
                break;
            }
            if self.read_to - self.read_from < 9 + len {
                break;
            }
            let payload = &read[self.read_from + 9..self.read_from + 9 + len];
            self.read_from += 9 + len;
            self.on_frame(kind, flags, id, payload, now_ns);
        }
        self.read = read;
        if self.read_from == self.read_to {
            self.read_from = 0;
            self.read_to = 0;
        }
    }

    fn on_frame(&mut self, kind: u8, flags: u8, id: u32, payload: &[u8], now_ns: u64) {
        if let Some((stream, end)) = self.continuing {
            if kind != CONTINUATION || id != stream {
                self.close();
                return;
            }
            self.block.extend_from_slice(payload);
            if flags & END_HEADERS != 0 {
                self.continuing = None;
                let block = std::mem::take(&mut self.block);
                self.on_block(id, &block, end, now_ns);
                self.block = block;
                self.block.clear();
            }
            return;
        }
        match kind {
            DATA => {
                self.received += payload.len() as u64;
                if self.received >= REPLENISH {
                    let increment = u32::try_from(self.received).unwrap_or(MAX_WINDOW);
                    self.frame(WINDOW_UPDATE, 0, 0, &increment.to_be_bytes());
                    self.received = 0;
                }
                if flags & END_STREAM != 0 {
                    self.on_end(id, None, now_ns);
                }
            }
            HEADERS => {
                let Some(block) = unpad(payload, flags) else {
                    self.close();
                    return;
                };
                let block = if flags & PRIORITY != 0 {
                    block.get(5..).unwrap_or_default()
                } else {
                    block
                };
                let end = flags & END_STREAM != 0;
                if flags & END_HEADERS != 0 {
                    self.on_block(id, block, end, now_ns);
                } else {
                    self.block.clear();
                    self.block.extend_from_slice(block);
                    self.continuing = Some((id, end));
                }
            }
            RST_STREAM => self.on_end(id, None, now_ns),
            SETTINGS if flags & ACK == 0 => {
                for setting in payload.chunks_exact(6) {
                    let value =
                        u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
                    match u16::from_be_bytes([setting[0], setting[1]]) {
                        1 => self.table_size(value as usize),
                        3 => self.max_streams = value,
                        4 => self.initial_window = i64::from(value),
                        5 => self.max_frame = value as usize,
                        _ => {}
                    }
                }
                self.got_settings = true;
                self.frame(SETTINGS, ACK, 0, &[]);
            }
            PING if flags & ACK == 0 => self.frame(PING, ACK, 0, payload),
            GOAWAY => {
                let last = payload.get(..4).map_or(0, |b| {
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & MAX_WINDOW
                });
                self.goaway = Some(self.goaway.map_or(last, |before| before.min(last)));
                self.fail_from(last.saturating_add(1), now_ns);
            }
            WINDOW_UPDATE if id == 0 => {
                if let Some(b) = payload.get(..4) {
                    let increment = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & MAX_WINDOW;
                    self.send_window += i64::from(increment);
                }
            }
            // Push was turned off.
            PUSH_PROMISE => self.close(),
            _ => {}
        }
    }

    /// The server's decoding table size: the first block sets it lower if
    /// the default is too big, and is not indexed if the fields do not fit.
    fn table_size(&mut self, size: usize) {
        if self.indexed {
            // Only the first SETTINGS is read for this: the fields are in
            // the server's table already.
            return;
        }
        if size < 4096 {
            self.table_update = Some(size);
        }
        self.literal = size < self.shared.table_bytes;
    }

    fn stream(&mut self, id: u32) -> Option<&mut Stream> {
        if id < self.first_id || id.is_multiple_of(2) {
            return None;
        }
        self.streams
            .get_mut(usize::try_from((id - self.first_id) / 2).ok()?)
    }

    /// A header block from the server, decoded whatever stream it is for
    /// (the table must see every block).
    fn on_block(&mut self, id: u32, block: &[u8], end: bool, now_ns: u64) {
        let mut status = None;
        let decoded = self.decoder.decode_with_cb(block, |name, value| {
            if &*name == b"grpc-status" {
                status = Some(match &*value {
                    b"0" => Status::Ok,
                    b"8" => Status::Exhausted,
                    _ => Status::Other,
                });
            }
        });
        if decoded.is_err() {
            self.close();
            return;
        }
        if status.is_some() {
            let shared = self.shared.clone();
            if let Some(stream) = self.stream(id)
                && !stream.fated
            {
                stream.fated = true;
                shared.fate(stream.request, status, now_ns);
            }
        }
        if end {
            self.on_end(id, status, now_ns);
        }
    }

    /// A stream ended (END_STREAM or RST_STREAM): its answer if it had
    /// none yet, and its slot freed.
    fn on_end(&mut self, id: u32, status: Option<Status>, now_ns: u64) {
        let shared = self.shared.clone();
        let Some(stream) = self.stream(id) else {
            return;
        };
        if !stream.fated {
            stream.fated = true;
            shared.fate(stream.request, status, now_ns);
        }
        if !stream.closed {
            stream.closed = true;
            self.open -= 1;
        }
        while self.streams.front().is_some_and(|s| s.closed) {
            self.streams.pop_front();
            self.first_id += 2;
        }
    }

    /// Streams from `id` on will not be answered: errors (or late).
    fn fail_from(&mut self, id: u32, now_ns: u64) {
        let shared = self.shared.clone();
        let mut stream_id = self.first_id;
        for stream in &mut self.streams {
            if stream_id >= id && !stream.closed {
                if !stream.fated {
                    stream.fated = true;
                    shared.fate(stream.request, None, now_ns);
                }
                stream.closed = true;
                self.open -= 1;
            }
            stream_id += 2;
        }
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let now_ns = self.shared.now_ns();
            self.fail_from(0, now_ns);
        }
    }

    /// Streams unanswered a second past their deadline: late, and
    /// forgotten (their slot stays until the server closes them).
    fn expire(&mut self, now_ns: u64) {
        let shared = self.shared.clone();
        let from = self.expired_to.max(self.first_id);
        let Ok(skip) = usize::try_from((from - self.first_id) / 2) else {
            return;
        };
        let mut id = from;
        for stream in self.streams.iter_mut().skip(skip) {
            if now_ns.saturating_sub(stream.request.scheduled_ns) <= shared.grace_ns {
                break;
            }
            if !stream.fated {
                stream.fated = true;
                shared.count(stream.request.second, Fate::Late as usize);
            }
            id += 2;
        }
        self.expired_to = id;
    }

    /// Streams still owed an answer.
    fn waiting(&self) -> bool {
        self.streams.iter().any(|s| !s.fated)
    }
}

/// `payload` without its padding.
fn unpad(payload: &[u8], flags: u8) -> Option<&[u8]> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let pad = usize::from(*payload.first()?);
    payload.get(1..payload.len().checked_sub(pad)?)
}

/// The request's fields, in order.
fn fields<'a>(addr: &'a str, timeout: &'a str) -> [(&'a [u8], &'a [u8]); 7] {
    [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", PATH.as_bytes()),
        (b":authority", addr.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"grpc-timeout", timeout.as_bytes()),
    ]
}

/// A literal string (no Huffman coding).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    loona_hpack::encoder::encode_integer_into(s.len(), 7, 0, out).unwrap();
    out.extend_from_slice(s);
}

/// The header blocks: the first (`:method` and `:scheme` from the static
/// table, the rest literals added to the table), the later ones (all
/// indexed: the last field added is 62), and the room the added fields
/// take.
fn blocks(addr: &str, timeout: &str) -> (Vec<u8>, Vec<u8>, usize) {
    // Static table indexes of the names (RFC 7541 Appendix A), 0: none.
    let names = [0usize, 0, 4, 1, 31, 0, 0];
    let mut first = vec![0x83, 0x86]; // :method POST, :scheme http
    let mut bytes = 0;
    let mut added = 0;
    for ((name, value), index) in fields(addr, timeout).into_iter().zip(names).skip(2) {
        if index == 0 {
            first.push(0x40);
            string(&mut first, name);
        } else {
            loona_hpack::encoder::encode_integer_into(index, 6, 0x40, &mut first).unwrap();
        }
        string(&mut first, value);
        bytes += name.len() + value.len() + 32;
        added += 1;
    }
    let mut indexed = vec![0x83, 0x86];
    for age in (0..added).rev() {
        loona_hpack::encoder::encode_integer_into(62 + age, 7, 0x80, &mut indexed).unwrap();
    }
    (first, indexed, bytes)
}

/// A block adding nothing to the server's table (literals without
/// indexing), for a server whose table cannot hold the fields.
fn literal_block(addr: &str, timeout: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86];
    for (name, value) in fields(addr, timeout).into_iter().skip(2) {
        block.push(0x00);
        string(&mut block, name);
        string(&mut block, value);
    }
    block
}

/// The blocks decode to the request's fields, first to last.
fn check_blocks(shared: &Shared, timeout: &str) {
    let want: Vec<(Vec<u8>, Vec<u8>)> = fields(&shared.addr, timeout)
        .iter()
        .map(|&(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    let mut decoder = loona_hpack::Decoder::new();
    for block in [
        &shared.first_block,
        &shared.indexed_block,
        &shared.indexed_block,
    ] {
        assert_eq!(decoder.decode(block).unwrap(), want);
    }
    let mut decoder = loona_hpack::Decoder::new();
    for _ in 0..2 {
        assert_eq!(decoder.decode(&shared.literal_block).unwrap(), want);
    }
}

/// A connection slot: the requests `c`, `c + CONNS`, … go on its
/// connection (replaced when closed or told GOAWAY).
struct Slot {
    conn: Option<Conn>,
    /// Requests due and not yet sent, oldest first.
    queue: VecDeque<Request>,
    /// Its next request.
    next: u64,
    /// No new connection before this (the last try failed).
    retry_ns: u64,
}

impl Slot {
    /// Requests due by `now_ns` join the queue; those waiting a second
    /// past their deadline are late; the queue goes out as far as the
    /// connection allows.
    fn tick(&mut self, shared: &Shared, now_ns: u64) {
        let due = shared.due(now_ns);
        while self.next < due {
            let request = Request {
                scheduled_ns: shared.scheduled_ns(self.next),
                second: u32::try_from(self.next / shared.rate).unwrap_or(u32::MAX),
            };
            shared.count(request.second, 0);
            let lag = now_ns.saturating_sub(request.scheduled_ns);
            shared.issue_lag.record(lag);
            if let Some(max) = shared.issue_max.get(request.second as usize) {
                max.fetch_max(lag, Ordering::Relaxed);
            }
            self.queue.push_back(request);
            self.next += shared.conns;
        }
        while let Some(request) = self
            .queue
            .pop_front_if(|r| now_ns.saturating_sub(r.scheduled_ns) > shared.grace_ns)
        {
            shared.count(request.second, Fate::Late as usize);
        }
        if let Some(conn) = self.conn.as_mut() {
            conn.expire(now_ns);
            conn.send(&mut self.queue, now_ns);
            conn.flush();
        }
    }

    /// The connection is closed or told GOAWAY while requests remain.
    fn needs_conn(&self, shared: &Shared, now_ns: u64) -> bool {
        let unusable = self
            .conn
            .as_ref()
            .is_none_or(|c| c.closed || c.goaway.is_some());
        unusable && (self.next < shared.total || !self.queue.is_empty()) && now_ns >= self.retry_ns
    }
}

/// What woke the loop: the tick, or connections with I/O ready.
enum Event {
    Tick,
    Ready,
}

/// Sends the schedule and reads the answers, every connection in one
/// loop: a tick a millisecond, and reads whenever answers arrive.
async fn run(shared: Arc<Shared>, conns: Vec<Conn>) {
    let mut slots: Vec<Slot> = conns
        .into_iter()
        .zip(0..)
        .map(|(conn, c)| Slot {
            conn: Some(conn),
            queue: VecDeque::new(),
            next: c,
            retry_ns: 0,
        })
        .collect();
    // Connections told GOAWAY, read until their streams are answered or
    // late.
    let mut drains: Vec<Conn> = Vec::new();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(*shared.start.get().unwrap()),
        Duration::from_millis(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // Ready connections: slots' first, then drains' (index past the slots).
    let mut ready: Vec<usize> = Vec::with_capacity(slots.len());
    loop {
        let event = std::future::poll_fn(|cx| {
            if tick.poll_tick(cx).is_ready() {
                return Poll::Ready(Event::Tick);
            }
            let conns = slots
                .iter()
                .map(|s| s.conn.as_ref())
                .chain(drains.iter().map(Some));
            for (i, conn) in conns.enumerate() {
                if conn.is_some_and(|conn| conn.poll_ready(cx)) {
                    ready.push(i);
                }
            }
            if ready.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(Event::Ready)
            }
        })
        .await;
        match event {
            Event::Tick => {
                let now_ns = shared.now_ns();
                for slot in &mut slots {
                    slot.tick(&shared, now_ns);
                }
                for conn in &mut drains {
                    conn.expire(now_ns);
                    conn.flush();
                }
                if now_ns >= shared.end_ns.load(Ordering::Relaxed) {
                    break;
                }
                for slot in &mut slots {
                    if slot.needs_conn(&shared, now_ns) {
                        reconnect(&shared, slot, &mut drains).await;
                    }
                }
            }
            Event::Ready => {
                for &i in &ready {
                    let (conn, queue) = match slots.get_mut(i) {
                        Some(slot) => (slot.conn.as_mut(), Some(&mut slot.queue)),
                        None => (drains.get_mut(i - slots.len()), None),
                    };
                    let Some(conn) = conn else {
                        continue;
                    };
                    conn.on_ready();
                    // Streams that ended may let waiting requests go.
                    if let Some(queue) = queue.filter(|q| !q.is_empty()) {
                        let now_ns = shared.now_ns();
                        conn.send(queue, now_ns);
                        conn.flush();
                    }
                }
                ready.clear();
                drains.retain_mut(|conn| {
                    let done = conn.closed || !conn.waiting();
                    if done {
                        finish(&shared, Some(conn), VecDeque::new());
                    }
                    !done
                });
            }
        }
    }
    for slot in &mut slots {
        finish(&shared, slot.conn.as_mut(), std::mem::take(&mut slot.queue));
    }
    for conn in &mut drains {
        finish(&shared, Some(conn), VecDeque::new());
    }
}

/// At the end: what is still unanswered is late.
fn finish(shared: &Shared, conn: Option<&mut Conn>, queue: VecDeque<Request>) {
    for request in queue {
        shared.count(request.second, Fate::Late as usize);
    }
    if let Some(conn) = conn {
        for stream in &mut conn.streams {
            if !stream.fated {
                stream.fated = true;
                shared.count(stream.request.second, Fate::Late as usize);
            }
        }
    }
}

/// A new connection for `slot`; its old one, if told GOAWAY with streams
/// still to be answered, is drained.
async fn reconnect(shared: &Arc<Shared>, slot: &mut Slot, drains: &mut Vec<Conn>) {
    if let Some(old) = slot.conn.take()
        && !old.closed
        && old.waiting()
    {
        drains.push(old);
    }
    slot.conn = Conn::open(shared).await.ok();
    if slot.conn.is_none() {
        // The server is gone: the requests waiting fail; another try in
        // 100 ms.
        let now_ns = shared.now_ns();
        for request in slot.queue.drain(..) {
            shared.fate(request, None, now_ns);
        }
        slot.retry_ns = now_ns + 100_000_000;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: overload ADDR BODY_FILE RATE SECS [CONNS] [DEADLINE_MS]");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let body = std::fs::read(&args[2]).unwrap();
    let rate: u64 = args[3].parse().unwrap();
    let secs: u64 = args[4].parse().unwrap();
    let conns: u64 = args.get(5).map_or(64, |c| c.parse().unwrap());
    let deadline_ms: u64 = args.get(6).map_or(20, |d| d.parse().unwrap());
    assert!(rate > 0 && conns > 0, "RATE and CONNS must be positive");
    let timeout = format!("{deadline_ms}m");
    let (first_block, indexed_block, table_bytes) = blocks(&addr, &timeout);
    let deadline_ns = deadline_ms * 1_000_000;
    let grace_ns = deadline_ns + 1_000_000_000;
    let total = rate * secs;

    let shared = Arc::new(Shared {
        literal_block: literal_block(&addr, &timeout),
        addr,
        body,
        first_block,
        indexed_block,
        table_bytes,
        start: OnceLock::new(),
        rate,
        total,
        conns,
        deadline_ns,
        grace_ns,
        end_ns: AtomicU64::new(0),
        tally: (0..secs)
            .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
            .collect(),
        issue_max: (0..secs).map(|_| AtomicU64::new(0)).collect(),
        issue_lag: Lag::new(),
        write_lag: Lag::new(),
    });
    check_blocks(&shared, &timeout);
    // The schedule starts once every connection has the server's settings.
    let mut opened = Vec::new();
    for _ in 0..conns {
        opened.push(Conn::open(&shared).await.unwrap());
    }
    shared.start.set(Instant::now()).unwrap();
    // Every answer is in, or late, a second after the last deadline.
    shared
        .end_ns
        .store(shared.scheduled_ns(total) + grace_ns, Ordering::Relaxed);
    run(shared.clone(), opened).await;

    let mut sum = [0u64; 5];
    println!("second\tsent\tgoodput\tshed\tlate\terrors\tmax_issue_lag_us");
    for ((s, row), max) in shared.tally.iter().enumerate().zip(&shared.issue_max) {
        let row: Vec<u64> = row.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        for (total, n) in sum.iter_mut().zip(&row) {
            *total += n;
        }
        println!(
            "{s}\t{}\t{}\t{}\t{}\t{}\t{}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            max.load(Ordering::Relaxed) / 1_000
        );
    }
    println!(
        "total sent={} goodput={} shed={} late={} errors={} seconds={secs}",
        sum[0], sum[1], sum[2], sum[3], sum[4]
    );
    eprintln!("issue lag: {}", shared.issue_lag.summary());
    eprintln!("write lag: {}", shared.write_lag.summary());
}
