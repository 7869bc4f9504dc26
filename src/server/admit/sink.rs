//! Where admission's reader writes what it read: while every frame passes
//! to h2 as it was read (the common case), nothing is copied; the first
//! frame dropped or written differently copies what passed before it, and
//! from there on everything is copied (see `read.rs`).

use super::Admit;

/// Where processing writes: bytes for h2, frames for the client, and the
/// admission it asks.
pub(super) struct Sinks<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) inject: &'a mut Vec<u8>,
    pub(super) admit: &'a dyn Admit,
    /// What is being processed, and where the frame (or part) being read
    /// now begins in it.
    pub(super) input: &'a [u8],
    pub(super) at: usize,
    /// Everything before `at` passes to h2 as it was read, and none of it
    /// is in `out` yet.
    pub(super) in_place: bool,
}

impl Sinks<'_> {
    /// `bytes`, the input being read now, pass to h2 as they are.
    pub(super) fn pass(&mut self, bytes: &[u8]) {
        if !self.in_place {
            self.out.extend_from_slice(bytes);
        }
    }

    /// The input being read now is dropped or written differently: what
    /// passed before it goes to `out`, which is returned to write in.
    pub(super) fn rewrite(&mut self) -> &mut Vec<u8> {
        if self.in_place {
            self.in_place = false;
            self.out
                .extend_from_slice(self.input.get(..self.at).unwrap_or_default());
        }
        self.out
    }
}

/// What [`Reader::process_in_place`](super::read::Reader::process_in_place) did with its input.
#[derive(Debug, Clone, Copy)]
pub(super) struct Processed {
    /// Bytes of the input processed.
    pub(super) used: usize,
    /// Those bytes pass to h2 as they are, and nothing was written for h2.
    pub(super) in_place: bool,
}
