//! A gRPC client that writes HTTP/2 frames itself: for what the `http`
//! crate and h2's client cannot send (an `:authority` they refuse, a
//! `grpc-timeout` the caller does not enforce itself), over any connection.

use std::collections::HashMap;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADERS: u8 = 0x1;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A gRPC call's HEADERS and DATA frames on `stream`.
pub fn call(stream: u32, path: &str, authority: &str, message: &[u8]) -> Vec<u8> {
    call_with(stream, path, authority, &[], message)
}

/// [`call`] with `extra` headers (`grpc-timeout`, say).
pub fn call_with(
    stream: u32,
    path: &str,
    authority: &str,
    extra: &[(&str, &str)],
    message: &[u8],
) -> Vec<u8> {
    let mut encoder = loona_hpack::Encoder::new();
    let mut headers = vec![
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", authority.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    headers.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let block = encoder.encode(headers);
    let mut out = frame(HEADERS, END_HEADERS, stream, &block);
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    out.extend(frame(0x0, END_STREAM, stream, &body));
    out
}

/// What came back on one stream: its header blocks' headers and its
/// DATA bytes, and when its last frame was read.
#[derive(Default, Debug)]
pub struct Answer {
    pub headers: Vec<(String, String)>,
    pub data: Vec<u8>,
    pub ended: bool,
    pub ended_at: Option<std::time::Instant>,
}

impl Answer {
    /// Takes a frame's `flags`: ended (now) if END_STREAM is set.
    fn end(&mut self, flags: u8) {
        if flags & END_STREAM != 0 && !self.ended {
            self.ended = true;
            self.ended_at = Some(std::time::Instant::now());
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The gRPC message the stream carried.
    pub fn message(&self) -> &[u8] {
        &self.data[5..]
    }
}

/// Sends `calls` (each a stream's frames) on `conn`, a new connection, and
/// reads until every stream in `streams` has ended (10 s at most).
pub async fn exchange<IO: AsyncRead + AsyncWrite + Unpin>(
    conn: IO,
    streams: &[u32],
    calls: Vec<u8>,
) -> HashMap<u32, Answer> {
    exchange_within(conn, streams, calls, Duration::from_secs(10)).await
}

/// [`exchange`], every stream answered within `limit`.
pub async fn exchange_within<IO: AsyncRead + AsyncWrite + Unpin>(
    mut conn: IO,
    streams: &[u32],
    calls: Vec<u8>,
    limit: Duration,
) -> HashMap<u32, Answer> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(calls);
    conn.write_all(&out).await.unwrap();
    let mut answers: HashMap<u32, Answer> = HashMap::new();
    let mut decoder = loona_hpack::Decoder::new();
    let read = async {
        while !streams
            .iter()
            .all(|s| answers.get(s).is_some_and(|a| a.ended))
        {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            match kind {
                // SETTINGS from the server: acknowledged.
                0x4 if flags & 0x1 == 0 => conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
                // RST_STREAM: the stream refused, as it was before.
                0x3 => panic!("stream {stream} reset (error {payload:?})"),
                HEADERS => {
                    assert_ne!(flags & END_HEADERS, 0, "a header block in pieces");
                    let answer = answers.entry(stream).or_default();
                    for (n, v) in decoder.decode(&payload).unwrap() {
                        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
                        answer.headers.push((text(n), text(v)));
                    }
                    answer.end(flags);
                }
                0x0 => {
                    let answer = answers.entry(stream).or_default();
                    answer.data.extend_from_slice(&payload);
                    answer.end(flags);
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| panic!("every stream answered within {limit:?}"));
    answers
}
