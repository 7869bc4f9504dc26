//! The answers a shed stream gets at admission, written whole once and
//! copied with the stream's id: `FAILURE_MODE`'s answer, the same one the
//! handler gives a request whose deadline passed (see `Limiter::shed`),
//! without the per-descriptor statuses (the body is never read).
//!
//! The header blocks use only the static table and literals that enter no
//! table, so the client's decoder stays in step with h2's encoder, which
//! never learns of these frames.

use crate::limiter::FailureMode;

/// A frame's header: length (24 bits), type, flags, stream id.
pub(crate) const FRAME_HEAD: usize = 9;
pub(super) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const PADDED: u8 = 0x8;
pub(crate) const PRIORITY: u8 = 0x20;

/// Largest frame re-encoded blocks are cut to (SETTINGS_MAX_FRAME_SIZE's
/// least value).
pub(crate) const MAX_FRAME: usize = 16_384;

/// `:status: 200` (static index 8) and `content-type: application/grpc`
/// (a literal without indexing, name at static index 31).
const RESPONSE_HEADERS: &[u8] = b"\x88\x0f\x10\x10application/grpc";

/// One shed stream's answer, as frames whose stream id is patched in.
#[derive(Debug, Clone)]
pub(crate) struct ShedAnswer {
    frames: Vec<u8>,
    /// Where each frame's stream id starts in `frames`.
    ids: Vec<usize>,
    /// Flow-controlled bytes the answer sends (its DATA payload).
    data_len: u32,
}

impl ShedAnswer {
    /// The answer `FAILURE_MODE` gives: `error` is RESOURCE_EXHAUSTED
    /// (trailers only, with the handler's message), `allow` and `deny` a
    /// `RateLimitResponse` whose overall code is OK or OVER_LIMIT.
    pub(crate) fn new(mode: FailureMode, message: &str) -> Self {
        let mut answer = Self {
            frames: Vec::new(),
            ids: Vec::new(),
            data_len: 0,
        };
        let code = match mode {
            FailureMode::Error => {
                let mut block = RESPONSE_HEADERS.to_vec();
                literal(&mut block, b"grpc-status", b"8");
                // Printable ASCII goes unencoded in grpc-message (gRPC's
                // percent-encoding leaves 0x20-0x7E but '%' as it is).
                let message: Vec<u8> = message
                    .bytes()
                    .filter(|b| (0x20..0x7f).contains(b) && *b != b'%')
                    .collect();
                literal(&mut block, b"grpc-message", &message);
                answer.frame(HEADERS, END_HEADERS | END_STREAM, &block);
                return answer;
            }
            FailureMode::Allow => 1,
            FailureMode::Deny => 2,
        };
        answer.frame(HEADERS, END_HEADERS, RESPONSE_HEADERS);
        // gRPC's message prefix (uncompressed, 2 bytes), then field 1
        // (overall_code) as a varint.
        answer.frame(DATA, 0, &[0, 0, 0, 0, 2, 0x08, code]);
        answer.data_len = 7;
        let mut trailers = Vec::new();
        literal(&mut trailers, b"grpc-status", b"0");
        answer.frame(HEADERS, END_HEADERS | END_STREAM, &trailers);
        answer
    }

    fn frame(&mut self, kind: u8, flags: u8, payload: &[u8]) {
        push_frame(&mut self.frames, kind, flags, 0, payload);
        self.ids.push(self.frames.len() - payload.len() - 4);
    }

    /// The flow-controlled bytes one answer sends.
    pub(super) fn data_len(&self) -> u32 {
        self.data_len
    }

    /// Appends the answer on `stream` to `out`.
    pub(super) fn write(&self, stream: u32, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&self.frames);
        let id = stream.to_be_bytes();
        for &i in &self.ids {
            if let Some(slot) = out.get_mut(at + i..at + i + 4) {
                slot.copy_from_slice(&id);
            }
        }
    }
}

/// "Literal Header Field without Indexing, New Name" (RFC 7541 §6.2.2),
/// both strings shorter than 127 bytes (longer ones are cut).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        let s = s.get(..126).unwrap_or(s);
        out.push(u8::try_from(s.len()).unwrap_or(126));
        out.extend_from_slice(s);
    }
}

/// A frame's head read: (payload length, type, flags, stream).
pub(crate) fn frame_head(head: [u8; FRAME_HEAD]) -> (usize, u8, u8, u32) {
    let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = head;
    let len = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
    let stream = u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff;
    (len, kind, flags, stream)
}

/// Moves what `out` holds from `at` on into `buf`, as much as fits: true
/// when something moved. `out` is emptied once read whole.
pub(crate) fn give(out: &mut Vec<u8>, at: &mut usize, buf: &mut tokio::io::ReadBuf<'_>) -> bool {
    let ready = out.get(*at..).unwrap_or_default();
    if ready.is_empty() {
        return false;
    }
    let n = ready.len().min(buf.remaining());
    buf.put_slice(ready.get(..n).unwrap_or_default());
    *at += n;
    if *at == out.len() {
        out.clear();
        *at = 0;
    }
    true
}

/// At the end of a connection's input: what `raw` holds unprocessed joins
/// `out` as it is (h2 reports the truncated frame). True when nothing was
/// left.
pub(crate) fn pass_rest(raw: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
    if raw.is_empty() {
        return true;
    }
    out.append(raw);
    false
}

/// Appends one frame (payloads here are far below 2^24 bytes).
pub(crate) fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(0).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A connection-level WINDOW_UPDATE of `increment` (at most 2^31 - 1).
pub(super) fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    push_frame(
        out,
        WINDOW_UPDATE,
        0,
        stream,
        &(increment & 0x7fff_ffff).to_be_bytes(),
    );
}

/// A HEADERS frame's block fragment: padding and priority taken off.
pub(crate) fn fragment(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    let (pad, body) = if flags & PADDED != 0 {
        let (&pad, body) = payload.split_first()?;
        (usize::from(pad), body)
    } else {
        (0, payload)
    };
    let body = body.get(..body.len().checked_sub(pad)?)?;
    body.get(if flags & PRIORITY != 0 { 5 } else { 0 }..)
}

/// `block` as a HEADERS frame and as many CONTINUATION frames as
/// [`MAX_FRAME`] needs.
pub(crate) fn write_block(out: &mut Vec<u8>, stream: u32, end_stream: bool, block: &[u8]) {
    let mut chunks = block.chunks(MAX_FRAME).peekable();
    let mut first = true;
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let last = chunks.peek().is_none();
        let kind = if first { HEADERS } else { CONTINUATION };
        let mut flags = if first && end_stream { END_STREAM } else { 0 };
        if last {
            flags |= END_HEADERS;
        }
        push_frame(out, kind, flags, stream, chunk);
        first = false;
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(block: &[u8]) -> Vec<(String, String)> {
        let mut decoder = loona_hpack::Decoder::new();
        decoder
            .decode(block)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    /// (kind, flags, stream, payload) of each frame.
    fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut rest = bytes;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            out.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
            rest = &rest[9 + len..];
        }
        out
    }

    #[test]
    fn error_is_resource_exhausted_trailers_only_on_the_stream() {
        let answer = ShedAnswer::new(FailureMode::Error, "past capacity: the deadline 100%");
        let mut out = vec![7];
        answer.write(0x1234_5677, &mut out);
        let frames = frames(&out[1..]);
        assert_eq!(frames.len(), 1);
        let (kind, flags, stream, block) = &frames[0];
        assert_eq!(
            (*kind, *flags, *stream),
            (HEADERS, END_HEADERS | END_STREAM, 0x1234_5677)
        );
        let headers = decode(block);
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get(":status"), Some("200"));
        assert_eq!(get("content-type"), Some("application/grpc"));
        assert_eq!(get("grpc-status"), Some("8"));
        assert_eq!(get("grpc-message"), Some("past capacity: the deadline 100"));
        assert_eq!(answer.data_len(), 0);
    }

    #[test]
    fn allow_and_deny_answer_a_message_with_their_overall_code() {
        for (mode, code) in [(FailureMode::Allow, 1), (FailureMode::Deny, 2)] {
            let answer = ShedAnswer::new(mode, "unused");
            let mut out = Vec::new();
            answer.write(3, &mut out);
            answer.write(5, &mut out);
            let frames = frames(&out);
            assert_eq!(frames.len(), 6);
            for (i, stream) in [(0, 3), (3, 5)] {
                assert_eq!(frames[i].2, stream);
                assert_eq!(frames[i].1, END_HEADERS);
                assert_eq!(decode(&frames[i].3)[0].1, "200");
                assert_eq!((frames[i + 1].0, frames[i + 1].2), (DATA, stream));
                assert_eq!(frames[i + 1].3, vec![0, 0, 0, 0, 2, 8, code]);
                assert_eq!(frames[i + 2].1, END_HEADERS | END_STREAM);
                assert_eq!(
                    decode(&frames[i + 2].3),
                    vec![("grpc-status".to_owned(), "0".to_owned())]
                );
            }
            assert_eq!(answer.data_len(), 7);
        }
    }
}
