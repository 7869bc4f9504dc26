//! A connection under admission: reads go through the [`Reader`], and the
//! frames it writes for the client (shed answers, window updates) go to
//! the socket between h2's own frames, never inside one.

use super::Admission;
use super::answer::{DATA, END_STREAM, FRAME_HEAD, HEADERS, frame_head, give};
use super::read::Reader;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Calls timed per connection at most (the oldest are forgotten).
const MAX_OPEN: usize = 4_096;
/// How far into the timed calls an answer is looked for.
const OPEN_SEARCH: usize = 16;
/// Reads from the socket per call of `poll_read`, at most, before the
/// task yields when everything read was shed (so a flood of shed calls
/// on one connection does not hold its thread).
const READS_PER_POLL: usize = 16;

/// A connection whose calls pass admission (see the module).
pub(crate) struct Admitted<IO> {
    io: IO,
    admission: Arc<Admission>,
    reader: Reader,
    /// Read from the socket, not yet processed (an incomplete frame).
    raw: Vec<u8>,
    /// Processed, for h2 to read from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
    /// Frames for the client, to write from `inject_at` on.
    inject: Vec<u8>,
    inject_at: usize,
    eof: bool,
    /// Bytes left of h2's frame being written, and its head so far when
    /// a write ended inside one: frames are injected only between h2's.
    h2_left: usize,
    head: [u8; FRAME_HEAD],
    head_have: usize,
    /// `ShouldRateLimit` streams passed to h2 and not answered yet, with
    /// when they were read: their answers' times are the backlog.
    open: VecDeque<(u32, Instant)>,
    /// Streams whose answer ended in what h2 last wrote.
    ended: Vec<u32>,
    /// Since when the next answer is timed (the last answer, or the read
    /// of the first call in flight after none were): `None` with none in
    /// flight, so idle time is never counted as the time an answer takes.
    answer_from: Option<Instant>,
}

impl<IO> std::fmt::Debug for Admitted<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("reader", &self.reader)
            .finish_non_exhaustive()
    }
}

impl<IO> Admitted<IO> {
    /// `io` under `admission`.
    pub(crate) fn new(io: IO, admission: Arc<Admission>) -> Self {
        Self {
            io,
            admission,
            reader: Reader::default(),
            raw: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            inject: Vec::new(),
            inject_at: 0,
            eof: false,
            h2_left: 0,
            head: [0; FRAME_HEAD],
            head_have: 0,
            open: VecDeque::new(),
            ended: Vec::new(),
            answer_from: None,
        }
    }

    /// Follows h2's frames through bytes it wrote.
    fn track(&mut self, mut written: &[u8]) {
        while !written.is_empty() {
            if self.h2_left > 0 {
                let n = self.h2_left.min(written.len());
                self.h2_left -= n;
                written = written.get(n..).unwrap_or_default();
                continue;
            }
            let n = (FRAME_HEAD - self.head_have).min(written.len());
            if let (Some(slot), Some(bytes)) = (
                self.head.get_mut(self.head_have..self.head_have + n),
                written.get(..n),
            ) {
                slot.copy_from_slice(bytes);
            }
            self.head_have += n;
            written = written.get(n..).unwrap_or_default();
            if self.head_have == FRAME_HEAD {
                let (len, kind, flags, stream) = frame_head(self.head);
                if flags & END_STREAM != 0
                    && (kind == HEADERS || kind == DATA)
                    && !self.open.is_empty()
                {
                    self.ended.push(stream);
                }
                self.h2_left = len;
                self.head_have = 0;
            }
        }
    }

    /// Times the answers h2 just wrote to calls admission let through: how
    /// long from read to answer is what admission weighs deadlines against.
    fn answered(&mut self) {
        if self.ended.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut answers = 0u32;
        for stream in self.ended.drain(..) {
            // Answers leave nearly in order: only the oldest few are looked at.
            let found = self
                .open
                .iter()
                .take(OPEN_SEARCH)
                .position(|(s, _)| *s == stream);
            if let Some((_, read)) = found.and_then(|i| self.open.remove(i)) {
                self.admission
                    .backlog
                    .observe(read, now.saturating_duration_since(read));
                answers += 1;
            }
        }
        // The time one answer takes on this connection, smoothed (an
        // eighth of each new measure).
        if let (Some(from), Some(per)) = (self.answer_from, (answers > 0).then_some(answers)) {
            let sample = now.saturating_duration_since(from) / per;
            let old = self.reader.per_answer;
            self.reader.per_answer = (old * 7 + sample) / 8;
        }
        if answers > 0 {
            self.answer_from = (!self.open.is_empty()).then_some(now);
        }
        self.reader.in_flight = self.open.len();
    }

    /// Starts timing the calls the last read let through.
    fn opened(&mut self) {
        if self.reader.admitted.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.open.is_empty() {
            self.answer_from = Some(now);
        }
        for stream in self.reader.admitted.drain(..) {
            if self.open.len() == MAX_OPEN {
                self.open.pop_front();
            }
            self.open.push_back((stream, now));
        }
        self.reader.in_flight = self.open.len();
    }

    /// Processes `input` (all of it, or what whole frames allow).
    fn process(&mut self, input: &[u8]) -> usize {
        self.reader
            .process(input, &mut self.out, &mut self.inject, &*self.admission)
    }
}

impl<IO: AsyncWrite + Unpin> Admitted<IO> {
    /// Writes the injected frames, when h2 is between frames. Ready once
    /// nothing is left to inject now.
    fn poll_inject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.h2_left > 0 || self.head_have > 0 {
            return Poll::Ready(Ok(()));
        }
        while let Some(rest) = self.inject.get(self.inject_at..).filter(|r| !r.is_empty()) {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.inject_at += n;
        }
        self.inject.clear();
        self.inject_at = 0;
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Admitted<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        for _ in 0..READS_PER_POLL {
            if give(&mut this.out, &mut this.out_at, buf) {
                // Answers for shed calls leave now if h2 is between
                // frames; otherwise after h2's frame (see poll_write).
                if let Poll::Ready(Err(err)) = this.poll_inject(cx) {
                    return Poll::Ready(Err(err));
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // What a closed connection left unprocessed goes as it is:
                // h2 reports the truncated frame.
                if this.raw.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.out.append(&mut this.raw);
                continue;
            }
            // Read straight into h2's buffer (no buffer of our own to
            // clear), then taken back out to be processed.
            let start = buf.filled().len();
            match Pin::new(&mut this.io).poll_read(cx, buf) {
                Poll::Pending => {
                    if let Poll::Ready(Err(err)) = this.poll_inject(cx) {
                        return Poll::Ready(Err(err));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Ready(Ok(())) => {
                    let input = buf.filled().get(start..).unwrap_or_default();
                    if input.is_empty() {
                        this.eof = true;
                    } else if this.raw.is_empty() {
                        let before = this.out.len();
                        let used = this.reader.process(
                            input,
                            &mut this.out,
                            &mut this.inject,
                            &*this.admission,
                        );
                        this.opened();
                        if before == 0
                            && used == input.len()
                            && this.out.len() == used
                            && this.reader.untouched()
                        {
                            // Passed as read (the common case): h2 reads
                            // it where it already is.
                            this.out.clear();
                            if let Poll::Ready(Err(err)) = this.poll_inject(cx) {
                                return Poll::Ready(Err(err));
                            }
                            return Poll::Ready(Ok(()));
                        }
                        this.raw
                            .extend_from_slice(input.get(used..).unwrap_or_default());
                    } else {
                        let mut raw = std::mem::take(&mut this.raw);
                        raw.extend_from_slice(input);
                        let used = this.process(&raw);
                        this.opened();
                        raw.drain(..used.min(raw.len()));
                        this.raw = raw;
                    }
                    buf.set_filled(start);
                }
            }
        }
        // Everything read was shed: answer those, and let other tasks run.
        if let Poll::Ready(Err(err)) = this.poll_inject(cx) {
            return Poll::Ready(Err(err));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Admitted<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.track(buf.get(..n).unwrap_or_default());
        this.answered();
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        // h2 hands over its buffer and the DATA payload after it, whole
        // frames: all of it written from a boundary ends at one. (A
        // single slice written may end at a DATA frame's head: tracked.)
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.h2_left == 0 && this.head_have == 0 && n == total && this.open.is_empty() {
            return Poll::Ready(Ok(n));
        }
        let mut left = n;
        for slice in bufs {
            let k = left.min(slice.len());
            this.track(slice.get(..k).unwrap_or_default());
            left -= k;
            if left == 0 {
                break;
            }
        }
        this.answered();
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Admitted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
