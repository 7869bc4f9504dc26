//! What admission reads of a connection: the client's frames, passed to h2
//! as they are, but for the streams shed on arrival (their frames never
//! reach h2) and the flow control those take part in.
//!
//! Every header block is decoded here with the client's HPACK table, which
//! costs little when the client indexes its headers (Envoy's, after its
//! first call, are a few indexed bytes). A shed block h2 never sees: when
//! it changed the client's table, h2's table no longer follows it, and
//! from then on every block the connection passes to h2 is written again
//! as literals that enter no table (as the unix-socket listener writes
//! them, see `uds.rs`). A block this decoder cannot read leaves the
//! connection to h2 alone: everything passes, nothing is shed.

use super::RLS_PATH;
use super::answer::{
    CONTINUATION, DATA, END_HEADERS, END_STREAM, FRAME_HEAD, HEADERS, MAX_FRAME, RST_STREAM,
    SETTINGS, WINDOW_UPDATE, fragment, frame_head, window_update, write_block,
};
use super::hpack::{Kind, Table, huffman_encode};
use super::sink::{Processed, Sinks};
use super::{Admit, parse_grpc_timeout};
use std::sync::OnceLock;
use std::time::Duration;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// A header block larger than this is left to h2 (which refuses it far
/// below this size, by `GRPC_MAX_HEADER_LIST_BYTES`).
const MAX_BLOCK: usize = 1 << 20;
/// Shed streams whose request has not ended yet (their DATA still to drop):
/// past this many, nothing more is shed on the connection until they end.
const MAX_SHED_OPEN: usize = 256;
/// The dynamic table h2 lets a client's encoder use (its default
/// SETTINGS_HEADER_TABLE_SIZE, which floodgate does not change).
const TABLE_SIZE: usize = 4_096;
const MAX_SAID: usize = 512; // the longest block remembered (`Reader::said`)
/// Connection window kept back from the client's WINDOW_UPDATEs to send
/// shed answers' messages in (under `FAILURE_MODE` `allow` and `deny`).
const RESERVE: u32 = 4_096;

#[derive(Debug, Clone, Copy)]
enum State {
    /// This many bytes of the preface still to pass.
    Preface(usize),
    /// At a frame's start.
    Head,
    /// This many bytes of a frame to pass to h2.
    Pass(usize),
    /// This many bytes of a shed stream's frame to drop.
    Drop(usize),
}

/// A header block split over CONTINUATION frames, being gathered.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    new: bool,
    /// The frames as read, for h2 when the block passes as it is.
    frames: Vec<u8>,
    fragment: Vec<u8>,
}

/// The read side of one connection's admission.
pub(super) struct Reader {
    state: State,
    block: Option<Block>,
    table: Table,
    /// h2's table no longer follows the client's: blocks go as literals.
    diverged: bool,
    /// A block did not decode here: everything passes from then on.
    blind: bool,
    /// The highest stream the client opened, and the highest h2 saw.
    last_stream: u32,
    h2_last: u32,
    /// Shed streams whose request has not ended.
    shed_open: Vec<u32>,
    /// DATA bytes dropped, not yet given back to the client's window.
    owed: u32,
    /// Connection window kept back for shed answers' messages.
    reserve: u32,
    /// The client's initial stream window (its SETTINGS).
    client_window: u32,
    /// `ShouldRateLimit` calls passed to h2 by the last
    /// [`Reader::process_in_place`]: they join the queue when h2 hands
    /// them to the service.
    pub(super) admitted: usize,
    /// The last block that left the table as it was and what it said (a
    /// `ShouldRateLimit` call, its timeout): with a warm table a client
    /// sends the same bytes each call, compared rather than walked again.
    last_block: Vec<u8>,
    said: Option<(bool, Option<Duration>)>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("state", &self.state)
            .field("diverged", &self.diverged)
            .field("blind", &self.blind)
            .finish_non_exhaustive()
    }
}

impl Default for Reader {
    fn default() -> Self {
        Self {
            state: State::Preface(PREFACE_LEN),
            block: None,
            table: Table::new(TABLE_SIZE),
            diverged: false,
            blind: false,
            last_stream: 0,
            h2_last: 0,
            shed_open: Vec::new(),
            owed: 0,
            reserve: 0,
            client_window: 65_535,
            admitted: 0,
            last_block: Vec::new(),
            said: None,
        }
    }
}

impl Reader {
    /// Processes `input` as far as whole frames allow (header blocks,
    /// SETTINGS and WINDOW_UPDATE frames are read whole): bytes for h2 to
    /// `out`, frames for the client to `inject`; the rest of `input` comes
    /// again with more. While everything read passes to h2 as it is (the
    /// common case), nothing is copied: then `in_place` says the `used`
    /// bytes of `input` are h2's as they stand, and `out` was not written.
    pub(super) fn process_in_place(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        inject: &mut Vec<u8>,
        admit: &dyn Admit,
    ) -> Processed {
        self.admitted = 0;
        let mut to = Sinks {
            out,
            inject,
            admit,
            input,
            at: 0,
            in_place: true,
        };
        let mut at = 0;
        while let Some(rest) = input.get(at..).filter(|r| !r.is_empty()) {
            to.at = at;
            if self.blind {
                to.pass(rest);
                at = input.len();
                break;
            }
            match self.state {
                State::Preface(left) | State::Pass(left) | State::Drop(left) => {
                    let n = left.min(rest.len());
                    if matches!(self.state, State::Drop(_)) {
                        to.rewrite();
                    } else {
                        to.pass(rest.get(..n).unwrap_or_default());
                    }
                    at += n;
                    let left = left - n;
                    self.state = match self.state {
                        _ if left == 0 => State::Head,
                        State::Preface(_) => State::Preface(left),
                        State::Pass(_) => State::Pass(left),
                        State::Drop(_) | State::Head => State::Drop(left),
                    };
                }
                State::Head => {
                    let Some(head) = rest.first_chunk::<FRAME_HEAD>() else {
                        break;
                    };
                    let (len, kind, flags, stream) = frame_head(*head);
                    match self.frame_start(kind, flags, stream, len) {
                        Start::Pass => {
                            to.pass(head);
                            at += FRAME_HEAD;
                            self.state = State::Pass(len);
                        }
                        Start::Drop => {
                            to.rewrite();
                            at += FRAME_HEAD;
                            self.state = State::Drop(len);
                        }
                        Start::Whole => {
                            let Some(frame) = rest.get(..FRAME_HEAD + len) else {
                                break;
                            };
                            let frame = Frame {
                                kind,
                                flags,
                                stream,
                                bytes: frame,
                            };
                            self.whole_frame(frame, &mut to);
                            at += FRAME_HEAD + len;
                        }
                    }
                }
            }
        }
        if self.owed > 0 {
            window_update(to.inject, 0, self.owed);
            self.owed = 0;
        }
        Processed {
            used: at,
            in_place: to.in_place,
        }
    }

    /// How a frame is handled, from its head alone.
    fn frame_start(&mut self, kind: u8, flags: u8, stream: u32, len: usize) -> Start {
        match kind {
            HEADERS | CONTINUATION if len <= MAX_BLOCK => Start::Whole,
            HEADERS | CONTINUATION => {
                // Left to h2, which refuses it; nothing read here any more.
                self.blind = true;
                Start::Pass
            }
            SETTINGS if stream == 0 && flags & 0x1 == 0 && len <= MAX_FRAME => Start::Whole,
            WINDOW_UPDATE if stream == 0 && len == 4 => Start::Whole,
            _ if stream == 0 => Start::Pass,
            _ => {
                if let Some(i) = self.shed_open.iter().position(|&s| s == stream) {
                    if kind == DATA {
                        self.owed = self
                            .owed
                            .saturating_add(u32::try_from(len).unwrap_or(u32::MAX));
                    }
                    if kind == RST_STREAM || (kind == DATA && flags & END_STREAM != 0) {
                        self.shed_open.swap_remove(i);
                    }
                    Start::Drop
                } else if stream > self.h2_last && stream <= self.last_stream {
                    // A shed stream's late frame (a WINDOW_UPDATE after
                    // its answer): h2 never knew the stream.
                    Start::Drop
                } else {
                    Start::Pass
                }
            }
        }
    }

    /// A frame read whole: a header block's part, the client's SETTINGS
    /// (its stream window) or a connection WINDOW_UPDATE (the reserve).
    fn whole_frame(&mut self, frame: Frame<'_>, to: &mut Sinks<'_>) {
        let payload = frame.bytes.get(FRAME_HEAD..).unwrap_or_default();
        match frame.kind {
            SETTINGS => {
                for setting in payload.chunks_exact(6) {
                    if let [0, 4, a, b, c, d] = *setting {
                        self.client_window = u32::from_be_bytes([a, b, c, d]);
                    }
                }
                to.pass(frame.bytes);
            }
            WINDOW_UPDATE => {
                let increment = payload
                    .first_chunk::<4>()
                    .map_or(0, |b| u32::from_be_bytes(*b) & 0x7fff_ffff);
                let keep = if to.admit.answer_data() > 0 && increment > 0 {
                    (RESERVE - self.reserve.min(RESERVE)).min(increment)
                } else {
                    0
                };
                self.reserve += keep;
                if keep == 0 {
                    to.pass(frame.bytes);
                } else if increment > keep {
                    window_update(to.rewrite(), 0, increment - keep);
                } else {
                    to.rewrite();
                }
            }
            HEADERS => self.headers(frame, payload, to),
            _ => self.continuation(frame, payload, to),
        }
    }

    fn headers(&mut self, frame: Frame<'_>, payload: &[u8], to: &mut Sinks<'_>) {
        let Some(fragment) = fragment(frame.flags, payload).filter(|_| self.block.is_none()) else {
            // Malformed: h2 answers it, and this connection is h2's alone.
            self.blind = true;
            to.pass(frame.bytes);
            return;
        };
        let stream = frame.stream;
        let new = stream % 2 == 1 && stream > self.last_stream;
        if new {
            self.last_stream = stream;
        }
        let block = Block {
            stream,
            end_stream: frame.flags & END_STREAM != 0,
            new,
            frames: Vec::new(),
            fragment: Vec::new(),
        };
        if frame.flags & END_HEADERS != 0 {
            self.block_done(&block, frame.bytes, fragment, to);
        } else {
            // Held back until the block ends (its frames go on together).
            to.rewrite();
            self.block = Some(Block {
                frames: frame.bytes.to_vec(),
                fragment: fragment.to_vec(),
                ..block
            });
        }
    }

    fn continuation(&mut self, frame: Frame<'_>, payload: &[u8], to: &mut Sinks<'_>) {
        // A block's later frames (rare) never pass in place: its first
        // frame was held back, maybe by an earlier read.
        to.rewrite();
        let Some(mut block) = self
            .block
            .take()
            .filter(|b| b.stream == frame.stream && b.fragment.len() + payload.len() <= MAX_BLOCK)
        else {
            self.blind = true;
            to.pass(frame.bytes);
            return;
        };
        block.frames.extend_from_slice(frame.bytes);
        block.fragment.extend_from_slice(payload);
        if frame.flags & END_HEADERS == 0 {
            self.block = Some(block);
            return;
        }
        self.block_done(&block, &block.frames, &block.fragment, to);
    }

    /// A whole header block (`frames` as read, `fragment` its HPACK):
    /// decoded, then shed, passed as it is, or passed written again as
    /// literals.
    fn block_done(&mut self, block: &Block, frames: &[u8], fragment: &[u8], to: &mut Sinks<'_>) {
        let mut literals = self.diverged.then(Vec::new);
        let said = self
            .said
            .filter(|_| self.last_block == fragment && !self.diverged);
        let (rls, timeout, changed) = match said {
            Some((rls, timeout)) => (rls, timeout, false),
            None => {
                let (mut rls, mut timeout) = (false, None);
                let coded = coded();
                let read = self
                    .table
                    .read(fragment, self.diverged, |kind, name, value| {
                        match kind {
                            Kind::Path => rls = value.is(RLS_PATH.as_bytes(), coded),
                            Kind::Timeout => {
                                timeout = value.decode().and_then(|v| parse_grpc_timeout(&v));
                            }
                            Kind::Other => {}
                        }
                        if let Some(literals) = literals.as_mut() {
                            // "Literal Header Field without Indexing, New Name".
                            literals.push(0);
                            name.write(literals);
                            value.write(literals);
                        }
                    });
                let Ok(changed) = read else {
                    self.blind = true;
                    to.pass(frames);
                    return;
                };
                self.said = None;
                if !changed && !self.diverged && fragment.len() <= MAX_SAID {
                    self.last_block.clear();
                    self.last_block.extend_from_slice(fragment);
                    self.said = Some((rls, timeout));
                }
                (rls, timeout, changed)
            }
        };
        let data = to.admit.answer_data();
        let shed = block.new
            && rls
            && (block.end_stream || self.shed_open.len() < MAX_SHED_OPEN)
            && (data == 0 || (self.reserve >= data && self.client_window >= data))
            && to.admit.sheds(timeout, self.admitted);
        if shed {
            to.rewrite();
            self.reserve -= data;
            self.diverged |= changed;
            to.admit.answer(block.stream, timeout, to.inject);
            if !block.end_stream {
                self.shed_open.push(block.stream);
            }
            return;
        }
        if block.stream > self.h2_last {
            self.h2_last = block.stream;
        }
        if block.new && rls {
            self.admitted += 1;
        }
        match literals {
            Some(literals) => write_block(to.rewrite(), block.stream, block.end_stream, &literals),
            None => to.pass(frames),
        }
    }
}

/// A frame read whole: its type, flags and stream, and its bytes (head
/// included).
#[derive(Clone, Copy)]
struct Frame<'a> {
    kind: u8,
    flags: u8,
    stream: u32,
    bytes: &'a [u8],
}

enum Start {
    Pass,
    Drop,
    Whole,
}

/// The Huffman code of [`RLS_PATH`].
fn coded() -> &'static [u8] {
    static CODED: OnceLock<Vec<u8>> = OnceLock::new();
    CODED.get_or_init(|| huffman_encode(RLS_PATH.as_bytes()))
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
