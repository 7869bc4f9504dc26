//! Process-wide decision settings, and the bounds every request is checked
//! against before anything is counted.

use super::LimitError;
use super::answer::HeaderNames;
use crate::descriptor::Request;

/// Bounds on request size, so one caller cannot make the service do
/// unbounded work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_entries: usize,
    /// Most bytes in one entry (key plus value).
    pub max_entry_bytes: usize,
    /// Most bytes in the domain.
    pub max_domain_bytes: usize,
    /// Largest `hits_addend`, of the request and of each descriptor.
    pub max_hits_addend: u64,
}

impl Default for RequestBounds {
    fn default() -> Self {
        Self {
            max_descriptors: 64,
            max_entries: 32,
            max_entry_bytes: 4_096,
            max_domain_bytes: 256,
            max_hits_addend: 1_000_000_000,
        }
    }
}

/// What to answer when the store fails (`--on-store-error`, `FAILURE_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Fail the request (gRPC UNAVAILABLE), so Envoy's `failure_mode_deny`
    /// decides.
    #[default]
    Error,
    /// Answer OK, as if every counter were fresh (fail open).
    Allow,
    /// Answer OVER_LIMIT (fail closed).
    Deny,
}

/// Process-wide decision settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimiterOptions {
    /// `SHADOW_MODE`: an OVER_LIMIT overall code is answered as OK.
    pub global_shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor is treated as `quota_mode`.
    pub global_quota_mode: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: add `RateLimit-*` headers.
    pub response_headers: Option<HeaderNames>,
    /// `LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED` (the reference's pull request
    /// #1190): instead, a `ratelimit-limit-<unit>s` and
    /// `ratelimit-remaining-<unit>s` pair for every limited descriptor.
    pub all_descriptors_headers: bool,
    /// `LIMIT_REQUEST_HEADERS_ENABLED` (pull request #1168): the most
    /// constrained descriptor's headers added to the request sent upstream
    /// (`request_headers_to_add`), under these names.
    pub request_headers: Option<HeaderNames>,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request over the limit
    /// on any descriptor counts nothing on any of them.
    pub stop_when_over: bool,
    /// Request size bounds.
    pub bounds: RequestBounds,
    /// What to answer when the store fails.
    pub failure_mode: FailureMode,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: budget of the in-process over-limit
    /// cache; 0 turns it off.
    pub local_cache_bytes: usize,
    /// `RESPONSE_DYNAMIC_METADATA`: answer with the `metadata` of the rules
    /// whose descriptors passed ([`Response::dynamic_metadata`](super::Response)).
    pub dynamic_metadata: bool,
}

impl RequestBounds {
    /// Checks `request` against these bounds, before anything is counted.
    pub(super) fn check(&self, request: &Request) -> Result<(), LimitError> {
        let bounds = *self;
        if request.domain.is_empty() {
            return Err(LimitError::EmptyDomain);
        }
        if request.domain.len() > bounds.max_domain_bytes {
            return Err(LimitError::DomainTooLong {
                bytes: request.domain.len(),
                max: bounds.max_domain_bytes,
            });
        }
        if request.descriptors.is_empty() {
            return Err(LimitError::EmptyDescriptors);
        }
        if u64::from(request.hits_addend) > bounds.max_hits_addend {
            return Err(LimitError::TooManyHits {
                place: "request".to_owned(),
                hits: u64::from(request.hits_addend),
                max: bounds.max_hits_addend,
            });
        }
        if request.descriptors.len() > bounds.max_descriptors {
            return Err(LimitError::TooManyDescriptors {
                count: request.descriptors.len(),
                max: bounds.max_descriptors,
            });
        }
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            if let Some(hits) = descriptor
                .hits_addend
                .filter(|&h| h > bounds.max_hits_addend)
            {
                return Err(LimitError::TooManyHits {
                    place: format!("descriptor {index}"),
                    hits,
                    max: bounds.max_hits_addend,
                });
            }
            if descriptor.entries.len() > bounds.max_entries {
                return Err(LimitError::TooManyEntries {
                    index,
                    count: descriptor.entries.len(),
                    max: bounds.max_entries,
                });
            }
            for (entry_index, entry) in descriptor.entries.iter().enumerate() {
                let bytes = entry.key.len() + entry.value.len();
                if bytes > bounds.max_entry_bytes {
                    return Err(LimitError::EntryTooLarge {
                        index,
                        entry: entry_index,
                        bytes,
                        max: bounds.max_entry_bytes,
                    });
                }
            }
        }
        Ok(())
    }
}
