//! Redis keys: the only place they are built.
//!
//! Grammar:
//!
//! ```text
//! key    = prefix "{" identity "}" suffix
//! suffix = "f" window_secs ":" window_start_secs      ; fixed window
//!        | "s" bucket_secs ":" bucket_start_secs      ; sliding window bucket (one series per bucket length)
//!        | "l"                                        ; sliding log (sorted set)
//!        | "g" interval_us ":" burst                  ; gcra TAT
//!        | "q"                                        ; RLQS demand registry (hash)
//!        | "c" ttl_ms                                 ; concurrency slots (sorted set)
//! ```
//!
//! `prefix` is `CACHE_KEY_PREFIX`, verbatim. `identity` is the escaped
//! [`CounterId`] (`domain|k1=v1|k2=v2`, every part percent-escaped), so it
//! holds no brace: the hash tag is exactly the descriptor identity, and every
//! key of one descriptor lands in one cluster slot. The window length is in
//! the key, so limits of different lengths on the same descriptor (e.g. a
//! SECOND and a MINUTE override) never share a counter.

use crate::store::CounterId;
use std::fmt::Write as _;

/// Builds keys with a fixed prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    fn tagged(&self, id: &CounterId) -> String {
        let mut key = String::with_capacity(self.prefix.len() + id.as_str().len() + 32);
        key.push_str(&self.prefix);
        key.push('{');
        key.push_str(id.as_str());
        key.push('}');
        key
    }

    /// The counter of the fixed window of `window_secs` starting at `start_secs`.
    pub(crate) fn fixed_window(&self, id: &CounterId, window_secs: u64, start_secs: u64) -> String {
        let mut key = self.tagged(id);
        key.push('f');
        push_pair(&mut key, window_secs, start_secs);
        key
    }

    /// The prefix of every bucket key of a sliding window; a bucket's key
    /// is this followed by `bucket_secs ":" bucket_start_secs`.
    pub(crate) fn sliding_base(&self, id: &CounterId) -> String {
        let mut key = self.tagged(id);
        key.push('s');
        key
    }

    /// The bucket of `bucket_secs` starting at `start_secs`, given the
    /// sliding base of its descriptor (the Lua script builds the others the
    /// same way, from the base it is given).
    pub(crate) fn sliding_bucket(base: &str, bucket_secs: u64, start_secs: u64) -> String {
        let mut key = String::with_capacity(base.len() + 24);
        key.push_str(base);
        push_pair(&mut key, bucket_secs, start_secs);
        key
    }

    /// The sorted set of a sliding log.
    pub(crate) fn sliding_log(&self, id: &CounterId) -> String {
        let mut key = self.tagged(id);
        key.push('l');
        key
    }

    /// The slots of a concurrency limit whose slots live `ttl_ms`.
    pub(crate) fn concurrency(&self, id: &CounterId, ttl_ms: u64) -> String {
        let mut key = self.tagged(id);
        key.push('c');
        key.push_str(itoa::Buffer::new().format(ttl_ms));
        key
    }

    /// The RLQS demand registry of a bucket (a hash of its members).
    pub(crate) fn demand_registry(&self, id: &CounterId) -> String {
        let mut key = self.tagged(id);
        key.push('q');
        key
    }

    /// A lease fetch's fence: what the fetch `token` took, or that it may
    /// no longer take anything (see `fence.rs`).
    pub(crate) fn fence(&self, id: &CounterId, token: u64) -> String {
        let mut key = self.tagged(id);
        // Infallible: writing to a String cannot fail.
        let _ = write!(key, "F{token:016x}");
        key
    }

    /// A lease give-back's fence: its reply, kept so that the give-back
    /// `token`, sent again, changes nothing (see `give_back.lua`).
    pub(crate) fn returned(&self, id: &CounterId, token: u64) -> String {
        let mut key = self.tagged(id);
        // Infallible: writing to a String cannot fail.
        let _ = write!(key, "R{token:016x}");
        key
    }

    /// The theoretical arrival time of a GCRA limit.
    pub(crate) fn gcra(&self, id: &CounterId, interval_us: u64, burst: u64) -> String {
        let mut key = self.tagged(id);
        key.push('g');
        push_pair(&mut key, interval_us, burst);
        key
    }
}

/// Appends `a ":" b` in decimal: keys are built for every operation sent to
/// Redis, and `itoa` writes a number for a fraction of what `core::fmt`
/// costs.
fn push_pair(key: &mut String, a: u64, b: u64) {
    let mut digits = itoa::Buffer::new();
    key.push_str(digits.format(a));
    key.push(':');
    key.push_str(digits.format(b));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_keys() {
        let keys = Keys::new("");
        let id = CounterId::new("edge", [("user", "alice")]);
        assert_eq!(
            keys.fixed_window(&id, 60, 1_200),
            "{edge|user=alice}f60:1200"
        );
        let prefixed = Keys::new("prefix:");
        assert_eq!(
            prefixed.fixed_window(&id, 1, 1_234),
            "prefix:{edge|user=alice}f1:1234"
        );
    }

    #[test]
    fn every_algorithm_shares_the_descriptor_hash_tag() {
        let keys = Keys::new("p:");
        let id = CounterId::new("d", [("k", "v")]);
        assert_eq!(keys.sliding_base(&id), "p:{d|k=v}s");
        assert_eq!(keys.sliding_log(&id), "p:{d|k=v}l");
        assert_eq!(keys.gcra(&id, 100_000, 5), "p:{d|k=v}g100000:5");
        assert_eq!(keys.demand_registry(&id), "p:{d|k=v}q");
        assert_eq!(keys.fence(&id, 0xab), "p:{d|k=v}F00000000000000ab");
    }

    proptest::proptest! {
        /// The numbers in a key read as `format!` writes them.
        #[test]
        fn numbers_are_written_as_format_writes_them(a: u64, b: u64) {
            let keys = Keys::new("p:");
            let id = CounterId::new("d", [("k", "v")]);
            proptest::prop_assert_eq!(keys.fixed_window(&id, a, b), format!("p:{{d|k=v}}f{a}:{b}"));
            proptest::prop_assert_eq!(Keys::sliding_bucket("x", a, b), format!("x{a}:{b}"));
            proptest::prop_assert_eq!(keys.gcra(&id, a, b), format!("p:{{d|k=v}}g{a}:{b}"));
            proptest::prop_assert_eq!(keys.concurrency(&id, a), format!("p:{{d|k=v}}c{a}"));
        }
    }

    #[test]
    fn hostile_values_cannot_move_the_hash_tag() {
        let keys = Keys::new("");
        let id = CounterId::new("d}", [("k{", "}v|=%\n")]);
        let key = keys.fixed_window(&id, 60, 0);
        assert_eq!(key, "{d%7D|k%7B=%7Dv%7C%3D%25\n}f60:0");
        // Redis hashes the bytes between the first '{' and the next '}':
        // that is the whole escaped identity.
        let open = key.find('{').unwrap();
        let close = key[open..].find('}').unwrap() + open;
        assert_eq!(&key[open + 1..close], id.as_str());
    }
}
