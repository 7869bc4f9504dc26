//! A connection under admission: reads go through the [`Reader`], and the
//! frames it writes for the client (shed answers, window updates) go to
//! the socket between h2's own frames, never inside one.

use super::answer::{FRAME_HEAD, frame_head, give, pass_rest};
use super::read::Reader;
use super::sink::Processed;
use super::{Admission, Arrival, Lane};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Reads from the socket per call of `poll_read`, at most, before the
/// task yields when everything read was shed (so a flood of shed calls
/// on one connection does not hold its thread).
const READS_PER_POLL: usize = 16;

/// A connection whose calls pass admission (see the module).
pub(crate) struct Admitted<IO> {
    io: IO,
    admission: Arc<Admission>,
    reader: Reader,
    /// This connection's calls in the queue.
    lane: Lane,
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
            reader: Reader::default(),
            lane: Lane::new(admission.queue.clone()),
            admission,
            raw: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            inject: Vec::new(),
            inject_at: 0,
            eof: false,
            h2_left: 0,
            head: [0; FRAME_HEAD],
            head_have: 0,
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
                let (len, ..) = frame_head(self.head);
                self.h2_left = len;
                self.head_have = 0;
            }
        }
    }

    /// Processes `input` (all of it, or what whole frames allow): how
    /// much was used, and whether it passes to h2 where it is in `input`
    /// (`in_place`, nothing for it in `out`) or is in `out`.
    fn process(&mut self, input: &[u8]) -> Processed {
        let mut processed =
            self.reader
                .process_in_place(input, &mut self.out, &mut self.inject, &*self.admission);
        self.lane.admit(self.reader.admitted);
        if processed.in_place && !self.out.is_empty() {
            // Bytes for h2 were waiting already: these go after them.
            self.out
                .extend_from_slice(input.get(..processed.used).unwrap_or_default());
            processed.in_place = false;
        }
        processed
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
                if pass_rest(&mut this.raw, &mut this.out) {
                    return Poll::Ready(Ok(()));
                }
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
                        let Processed { used, in_place } = this.process(input);
                        this.raw
                            .extend_from_slice(input.get(used..).unwrap_or_default());
                        if in_place {
                            // Passed as read (the common case): h2 reads
                            // it where it already is, copied nowhere.
                            buf.set_filled(start + used);
                            if used == 0 {
                                continue;
                            }
                            if let Poll::Ready(Err(err)) = this.poll_inject(cx) {
                                return Poll::Ready(Err(err));
                            }
                            return Poll::Ready(Ok(()));
                        }
                    } else {
                        let mut raw = std::mem::take(&mut this.raw);
                        raw.extend_from_slice(input);
                        let Processed { used, in_place } = this.process(&raw);
                        if in_place {
                            this.out
                                .extend_from_slice(raw.get(..used).unwrap_or_default());
                        }
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
        if this.h2_left == 0 && this.head_have == 0 && n == total {
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

/// tonic hands the connection's info to each of its requests: the lane,
/// for the handler to take its call out of the queue.
impl<IO> Connected for Admitted<IO> {
    type ConnectInfo = Arrival;

    fn connect_info(&self) -> Self::ConnectInfo {
        Arrival::new(self.lane.clone())
    }
}
