//! The unix-socket listener's connections (`GRPC_UDS`), as the server reads
//! them: every HTTP/2 header block re-encoded, so that any `:authority` a
//! gRPC client of any stack sends there is accepted.
//!
//! The gRPC core library (Python's grpcio, C++, Ruby, PHP) reaching
//! `unix:/tmp/x/rls.sock` sends `:authority: tmp%2Fx%2Frls.sock`, which the
//! `http` crate's authority parser refuses (a `%` outside userinfo, or an
//! empty authority): h2 answers such a stream with RST_STREAM
//! PROTOCOL_ERROR, and no setting of hyper, h2 or tonic lets it through.
//! grpc-go, the reference's server, serves any authority. On a unix socket
//! the authority names nothing (there is one server at the end of the
//! path), so an authority the parser refuses is replaced by `localhost`
//! before h2 reads the block.
//!
//! Replacing one header changes the block's HPACK encoding, and HPACK
//! blocks share a dynamic table across a connection: so every block of
//! the connection is read (with the client's table, as h2 would, by
//! admission's HPACK reader) and written again as literals that never
//! enter a table, each string coded as it came, which keeps h2's table
//! empty and in step. Frames other than HEADERS and CONTINUATION
//! pass through untouched, streamed. What the server writes back is not
//! touched. TCP connections never come here.

use super::admit::{
    CONTINUATION, END_HEADERS, END_STREAM, FRAME_HEAD, HEADERS, HpackTable, HpackText, fragment,
    frame_head, give, pass_rest, write_block,
};
use axum::http::uri::Authority;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// A header block (all its frames) larger than this closes the
/// connection: the server's own header list limit is far below it.
const MAX_BLOCK: usize = 1 << 20;
/// The dynamic table the server lets a client's encoder use (h2's default
/// SETTINGS_HEADER_TABLE_SIZE, which floodgate does not change).
const TABLE_SIZE: usize = 4_096;
/// What replaces an authority the `http` crate refuses.
const LOCALHOST: &[u8] = b"localhost";

/// Why a connection's header blocks cannot be read: the connection is
/// closed, as h2 closes one whose HPACK it cannot decode.
#[derive(Debug, thiserror::Error)]
enum BlockError {
    #[error("a header block's HPACK does not decode")]
    Decode,
    #[error("a header block is over 1 MiB")]
    TooLarge,
    #[error("a header frame is malformed (padding, or a CONTINUATION out of place)")]
    Malformed,
}

impl From<BlockError> for io::Error {
    fn from(err: BlockError) -> Self {
        Self::new(io::ErrorKind::InvalidData, err)
    }
}

/// Where the reader is in the client's byte stream.
#[derive(Debug, Clone, Copy)]
enum State {
    /// This many bytes of the preface still to pass.
    Preface(usize),
    /// At a frame's start.
    Head,
    /// This many bytes of a frame passed through still to pass.
    Pass(usize),
}

/// A header block being gathered from a HEADERS frame and its
/// CONTINUATIONs.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    fragment: Vec<u8>,
}

/// A unix-socket connection whose header blocks the server reads
/// re-encoded (see the module).
pub(crate) struct Rewritten<IO> {
    io: IO,
    /// Read from the connection, not yet processed.
    raw: Vec<u8>,
    /// Processed, for the server to read from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
    state: State,
    block: Option<Block>,
    /// The client's HPACK table.
    table: HpackTable,
    eof: bool,
}

impl<IO> std::fmt::Debug for Rewritten<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewritten")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<IO> Rewritten<IO> {
    /// `io`'s header blocks re-encoded as the server reads them.
    pub(crate) fn new(io: IO) -> Self {
        Self {
            io,
            raw: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            state: State::Preface(PREFACE_LEN),
            block: None,
            table: HpackTable::new(TABLE_SIZE),
            eof: false,
        }
    }

    /// Moves what `raw` holds, as far as whole frames allow, to `out`.
    fn process(&mut self) -> Result<(), BlockError> {
        // Taken out of `self` while frames are read from it, and put back
        // (less what was processed) whatever happens.
        let raw = std::mem::take(&mut self.raw);
        let mut at = 0;
        let result = self.process_from(&raw, &mut at);
        self.raw = raw;
        self.raw.drain(..at.min(self.raw.len()));
        result
    }

    /// [`Rewritten::process`] over `raw`, from `at` on (left where it
    /// stopped).
    fn process_from(&mut self, raw: &[u8], at: &mut usize) -> Result<(), BlockError> {
        loop {
            let rest = raw.get(*at..).unwrap_or_default();
            match self.state {
                State::Preface(left) | State::Pass(left) => {
                    let n = left.min(rest.len());
                    self.out
                        .extend_from_slice(rest.get(..n).unwrap_or_default());
                    *at += n;
                    let left = left - n;
                    self.state = match self.state {
                        _ if left == 0 => State::Head,
                        State::Preface(_) => State::Preface(left),
                        _ => State::Pass(left),
                    };
                    if left > 0 {
                        break;
                    }
                }
                State::Head => {
                    let Some(head) = rest.first_chunk::<FRAME_HEAD>() else {
                        break;
                    };
                    let (len, kind, flags, stream) = frame_head(*head);
                    if kind != HEADERS && kind != CONTINUATION {
                        self.out.extend_from_slice(head);
                        *at += FRAME_HEAD;
                        self.state = State::Pass(len);
                        continue;
                    }
                    if len > MAX_BLOCK {
                        return Err(BlockError::TooLarge);
                    }
                    let Some(payload) = rest.get(FRAME_HEAD..FRAME_HEAD + len) else {
                        break;
                    };
                    self.header_frame(kind, flags, stream, payload)?;
                    *at += FRAME_HEAD + len;
                }
            }
        }
        Ok(())
    }

    /// Gathers one HEADERS or CONTINUATION frame; at the block's end,
    /// writes it re-encoded.
    fn header_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> Result<(), BlockError> {
        let fragment = if kind == HEADERS {
            if self.block.is_some() {
                return Err(BlockError::Malformed);
            }
            // Padding and the priority fields (deprecated, RFC 9113
            // §5.3.2) are dropped.
            let fragment = fragment(flags, payload).ok_or(BlockError::Malformed)?;
            self.block = Some(Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                fragment: Vec::new(),
            });
            fragment
        } else {
            payload
        };
        let block = self.block.as_mut().ok_or(BlockError::Malformed)?;
        if block.stream != stream {
            return Err(BlockError::Malformed);
        }
        if block.fragment.len() + fragment.len() > MAX_BLOCK {
            return Err(BlockError::TooLarge);
        }
        block.fragment.extend_from_slice(fragment);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let Some(block) = self.block.take() else {
            return Err(BlockError::Malformed);
        };
        let encoded = self.reencode(&block.fragment)?;
        write_block(&mut self.out, block.stream, block.end_stream, &encoded);
        Ok(())
    }

    /// The block's headers as literals that enter no table, with an
    /// authority the `http` crate refuses replaced by `localhost`.
    fn reencode(&mut self, fragment: &[u8]) -> Result<Vec<u8>, BlockError> {
        let mut out = Vec::with_capacity(fragment.len() * 2);
        let mut failed = false;
        self.table
            .read(fragment, true, |_, name, value| {
                let value = match name.decode() {
                    Some(name) if &*name == b":authority" => match value.decode() {
                        Some(authority) if Authority::try_from(&*authority).is_ok() => value,
                        Some(_) => HpackText::Plain(LOCALHOST),
                        None => {
                            failed = true;
                            value
                        }
                    },
                    Some(_) => value,
                    None => {
                        failed = true;
                        value
                    }
                };
                // "Literal Header Field without Indexing, New Name"
                // (RFC 7541 §6.2.2): nothing enters h2's table.
                out.push(0);
                name.write(&mut out);
                value.write(&mut out);
            })
            .map_err(|_| BlockError::Decode)?;
        if failed {
            return Err(BlockError::Decode);
        }
        Ok(out)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewritten<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if give(&mut this.out, &mut this.out_at, buf) {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                if pass_rest(&mut this.raw, &mut this.out) {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut chunk = [0u8; 8_192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Ready(Ok(())) => {
                    if read.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.raw.extend_from_slice(read.filled());
                        this.process()?;
                    }
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewritten<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
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
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Rewritten<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::admit::{MAX_FRAME, PADDED, PRIORITY};

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Runs `input` through the rewriter, fed `step` bytes at a time.
    fn rewrite(input: &[u8], step: usize) -> Result<Vec<u8>, BlockError> {
        let mut r = Rewritten::new(());
        for piece in input.chunks(step) {
            r.raw.extend_from_slice(piece);
            r.process()?;
        }
        Ok(r.out)
    }

    /// The headers of every HEADERS block of `out`, decoded with a fresh
    /// decoder as h2 would (and the other frames' kinds).
    fn read_back(out: &[u8]) -> (Vec<Headers>, Vec<u8>) {
        assert_eq!(&out[..PREFACE_LEN], PREFACE);
        let mut decoder = loona_hpack::Decoder::new();
        let (mut blocks, mut kinds, mut block) = (Vec::new(), Vec::new(), Vec::new());
        let mut at = PREFACE_LEN;
        while at < out.len() {
            let len = usize::from(out[at]) << 16
                | usize::from(out[at + 1]) << 8
                | usize::from(out[at + 2]);
            let (kind, flags) = (out[at + 3], out[at + 4]);
            let payload = &out[at + 9..at + 9 + len];
            kinds.push(kind);
            if kind == HEADERS || kind == CONTINUATION {
                assert!(len <= MAX_FRAME);
                block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    blocks.push(decoder.decode(&block).unwrap());
                    block.clear();
                }
            }
            at += 9 + len;
        }
        (blocks, kinds)
    }

    /// A header block's headers, in order.
    type Headers = Vec<(Vec<u8>, Vec<u8>)>;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn an_authority_http_refuses_becomes_localhost_and_the_rest_is_kept() {
        // Encoded with a table, as gRPC core encodes: the second block
        // refers to entries the first one added.
        let mut encoder = loona_hpack::Encoder::new();
        let first = headers(&[
            (":method", "POST"),
            (":scheme", "http"),
            (
                ":path",
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            ),
            (":authority", "tmp%2Fx%2Frls.sock"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]);
        let second = headers(&[
            (":method", "POST"),
            (":authority", ""),
            (":path", "/grpc.health.v1.Health/Check"),
            ("content-type", "application/grpc"),
        ]);
        let third = headers(&[(":authority", "localhost:8081"), ("x", &"v".repeat(40_000))]);
        let encode = |encoder: &mut loona_hpack::Encoder<'_>, h: &Headers| {
            encoder.encode(h.iter().map(|(n, v)| (n.as_slice(), v.as_slice())))
        };
        let (b1, b2, b3) = (
            encode(&mut encoder, &first),
            encode(&mut encoder, &second),
            encode(&mut encoder, &third),
        );
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        // A padded HEADERS with priority, cut into a CONTINUATION.
        let mut padded = vec![3u8];
        padded.extend_from_slice(&[0, 0, 0, 0, 16]);
        padded.extend_from_slice(&b1[..10]);
        padded.extend_from_slice(&[0, 0, 0]);
        input.extend(frame(HEADERS, PADDED | PRIORITY, 1, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &b1[10..]));
        input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\x02ab"));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &b2));
        input.extend(frame(HEADERS, END_HEADERS, 5, &b3));
        for step in [1, 7, 4_096, input.len()] {
            let (blocks, kinds) = read_back(&rewrite(&input, step).unwrap());
            let mut want1 = first.clone();
            want1[3].1 = b"localhost".to_vec();
            let mut want2 = second.clone();
            want2[1].1 = b"localhost".to_vec();
            assert_eq!(
                blocks,
                vec![want1, want2, third.clone()],
                "fed {step} bytes at a time"
            );
            // SETTINGS, HEADERS+CONTINUATION, DATA, HEADERS, HEADERS and
            // the CONTINUATIONs of a 40 kB block.
            assert_eq!(
                kinds,
                vec![
                    0x4,
                    HEADERS,
                    0x0,
                    HEADERS,
                    HEADERS,
                    CONTINUATION,
                    CONTINUATION
                ]
            );
        }
    }

    #[test]
    fn huffman_coded_authorities_are_read_and_kept_coded() {
        use crate::server::admit::huffman_encode;
        // `:authority` (static name 1) as a literal never indexed, its
        // value Huffman-coded, as gRPC core and Envoy code strings.
        let literal = |value: &str| {
            let code = huffman_encode(value.as_bytes());
            let mut block = vec![0x82, 0x10 | 1, 0x80 | u8::try_from(code.len()).unwrap()];
            block.extend_from_slice(&code);
            block
        };
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &literal("tmp%2Fx%2Frls.sock"),
        ));
        input.extend(frame(HEADERS, END_HEADERS, 3, &literal("localhost:8081")));
        let out = rewrite(&input, 5).unwrap();
        let (blocks, _) = read_back(&out);
        assert_eq!(
            blocks,
            vec![
                headers(&[(":method", "GET"), (":authority", "localhost")]),
                headers(&[(":method", "GET"), (":authority", "localhost:8081")]),
            ]
        );
        // The kept authority went out as it came: coded.
        let code = huffman_encode(b"localhost:8081");
        assert!(out.windows(code.len()).any(|w| w == code));
    }

    #[test]
    fn malformed_blocks_close_the_connection() {
        let mut bad_hpack = PREFACE.to_vec();
        bad_hpack.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ));
        assert!(matches!(rewrite(&bad_hpack, 3), Err(BlockError::Decode)));
        let mut stray = PREFACE.to_vec();
        stray.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
        assert!(matches!(rewrite(&stray, 5), Err(BlockError::Malformed)));
        let mut padding = PREFACE.to_vec();
        padding.extend(frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82]));
        assert!(matches!(rewrite(&padding, 64), Err(BlockError::Malformed)));
        let mut huge = PREFACE.to_vec();
        huge.extend_from_slice(&[0x20, 0, 0, HEADERS, 0, 0, 0, 0, 1]);
        assert!(matches!(rewrite(&huge, 64), Err(BlockError::TooLarge)));
    }

    proptest::proptest! {
        /// Arbitrary bytes after the preface never panic the rewriter.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600), step in 1usize..64) {
            let mut input = PREFACE.to_vec();
            input.extend(bytes);
            let _ = rewrite(&input, step);
        }
    }
}
