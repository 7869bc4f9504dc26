//! Redis keys: the only place they are built.
//!
//! Grammar:
//!
//! ```text
//! key    = prefix "{" identity "}" suffix
//! suffix = "f" window_secs ":" window_start_secs      ; fixed window
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

    /// The counter of the fixed window of `window_secs` starting at `start_secs`.
    pub(crate) fn fixed_window(&self, id: &CounterId, window_secs: u64, start_secs: u64) -> String {
        let mut key = String::with_capacity(self.prefix.len() + id.as_str().len() + 32);
        key.push_str(&self.prefix);
        key.push('{');
        key.push_str(id.as_str());
        key.push('}');
        // Infallible: writing to a String cannot fail.
        let _ = write!(key, "f{window_secs}:{start_secs}");
        key
    }
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
