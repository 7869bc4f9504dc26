//! `GRPC_MAX_CONNECTION_AGE` and `_GRACE`, as the reference's gRPC server
//! has them: a connection older than the age is sent GOAWAY (tonic's
//! graceful shutdown of the connection, so calls in flight finish), and
//! one still open a grace later is closed. tonic closes at age + grace
//! *without* a GOAWAY at the age when both are set, so the grace is kept
//! here instead: every accepted connection's reads and writes fail once
//! its deadline passes, and hyper drops the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// A connection that stops working at its deadline.
#[derive(Debug)]
pub(crate) struct Aged<IO> {
    io: IO,
    deadline: Option<Pin<Box<Sleep>>>,
    /// The task the deadline wakes: while reads and writes come from it,
    /// the timer is only looked at, not polled (a poll registers the waker
    /// again and spends the task's cooperative budget, on every read and
    /// write of every call).
    waker: Option<Waker>,
}

impl<IO> Aged<IO> {
    /// `io`, closed `lifetime` from now; `None`: never.
    pub(crate) fn new(io: IO, lifetime: Option<Duration>) -> Self {
        Self {
            io,
            deadline: lifetime
                .map(|lifetime| Box::pin(tokio::time::sleep_until(Instant::now() + lifetime))),
            waker: None,
        }
    }

    /// An error once the deadline has passed (and a wake-up registered at
    /// it otherwise, so an idle connection is closed on time too).
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let deadline = self.deadline.as_mut()?;
        let registered = self
            .waker
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        let passed = if registered {
            deadline.is_elapsed()
        } else {
            self.waker = Some(cx.waker().clone());
            deadline.as_mut().poll(cx).is_ready()
        };
        passed.then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "connection older than its age and grace",
            )
        })
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Aged<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(err) = this.expired(cx) {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Aged<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(err) = this.expired(cx) {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(err) = this.expired(cx) {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Aged<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
