//! Why a request got no decision.

use crate::store::StoreError;

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// The domain is empty (reference wording).
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// There are no descriptors (reference wording).
    #[error("rate limit descriptor list must not be empty")]
    EmptyDescriptors,
    /// Too many descriptors.
    #[error("request has {count} descriptors, more than the limit of {max}")]
    TooManyDescriptors {
        /// Descriptors sent.
        count: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// Too many entries in one descriptor.
    #[error("descriptor {index} has {count} entries, more than the limit of {max}")]
    TooManyEntries {
        /// Position of the descriptor in the request.
        index: usize,
        /// Entries sent.
        count: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// One entry is too large.
    #[error("descriptor {index} entry {entry} is {bytes} bytes, more than the limit of {max}")]
    EntryTooLarge {
        /// Position of the descriptor in the request.
        index: usize,
        /// Position of the entry in the descriptor.
        entry: usize,
        /// Key plus value length.
        bytes: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// The domain is too long.
    #[error("domain is {bytes} bytes, more than the limit of {max}")]
    DomainTooLong {
        /// Domain length sent.
        bytes: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// A `hits_addend` is larger than the bound.
    #[error("{place} hits_addend {hits} is more than the limit of {max}")]
    TooManyHits {
        /// `request` or `descriptor <n>`.
        place: String,
        /// Hits sent.
        hits: u64,
        /// Allowed maximum.
        max: u64,
    },
    /// The store failed; no decision could be made.
    #[error("rate limit store failed")]
    Store(#[from] StoreError),
    /// The caller's deadline passed (or could not be met) before the request
    /// was served: shed under `FAILURE_MODE=error`, nothing counted.
    #[error(
        "rate limit service past capacity: the caller's deadline passed before the request was served; nothing was counted"
    )]
    Shed,
}

impl LimitError {
    /// Whether the caller's request was at fault (as opposed to the service).
    pub fn is_invalid_request(&self) -> bool {
        !matches!(self, Self::Store(_) | Self::Shed)
    }
}
