//! Escaped counter identities: `<domain>|<k1>=<v1>|<k2>=<v2>…`.
//!
//! Grammar: every part is percent-escaped so `%`, `{`, `}`, `|` and `=` never
//! appear raw inside a part. The separators `|` and `=` are then unambiguous,
//! so two different (domain, entries) lists can never produce the same
//! identity, and no part can contain a brace that would move a Redis hash tag
//! once the identity is wrapped in `{…}`.

use std::fmt::{self, Write as _};

/// The escaped identity of one counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterId(String, bool);

impl CounterId {
    /// Builds the identity of `domain` with `entries` in order.
    pub fn new<'a>(domain: &str, entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut out = String::with_capacity(domain.len() + 32);
        escape_into(&mut out, domain);
        for (key, value) in entries {
            out.push('|');
            escape_into(&mut out, key);
            out.push('=');
            escape_into(&mut out, value);
        }
        Self(out, false)
    }

    /// An identity read back from a snapshot of the embedded store: its
    /// escaped text and whether it is a candidate's ([`CounterId::as_str`],
    /// [`CounterId::is_candidate`]).
    pub(crate) fn from_snapshot(text: String, candidate: bool) -> Self {
        Self(text, candidate)
    }

    /// The identity of the counters of a rule's shadow (candidate) limit at
    /// position `limit` of its limits: apart from the enforced ones, so a
    /// candidate of the same window length never shares their counter.
    /// Escaping only writes `%` before two hex digits, so `%s` can never
    /// come out of any (domain, entries).
    pub fn candidate(&self, limit: usize) -> Self {
        let mut out = String::with_capacity(self.0.len() + 12);
        out.push_str(&self.0);
        // Infallible: writing to a String cannot fail.
        let _ = write!(out, "|%shadow{limit}");
        Self(out, true)
    }

    /// Whether this counts a shadow (candidate) limit: such an operation
    /// never refuses a request under `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// and is never refused with one; it counts as if it were alone.
    pub fn is_candidate(&self) -> bool {
        self.1
    }

    /// The escaped text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The identity's parts read back: the domain, the entries as
    /// `(key, value)` in order, and the shadow limit's position for a
    /// candidate. For stores whose keys are written from the parts
    /// (memcached keys in the reference's format).
    pub(crate) fn parts(&self) -> Parts {
        let mut pieces = self.0.split('|');
        let domain = unescape(pieces.next().unwrap_or_default());
        let mut parts = Parts {
            domain,
            entries: Vec::new(),
            shadow: None,
        };
        for piece in pieces {
            if let Some(limit) = piece.strip_prefix("%shadow") {
                parts.shadow = limit.parse().ok();
                continue;
            }
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            parts.entries.push((unescape(key), unescape(value)));
        }
        parts
    }
}

/// A [`CounterId`] read back ([`CounterId::parts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parts {
    /// The domain.
    pub(crate) domain: String,
    /// The descriptor's entries, `(key, value)`, in order.
    pub(crate) entries: Vec<(String, String)>,
    /// For a candidate, the position of its shadow limit.
    pub(crate) shadow: Option<usize>,
}

/// Undoes [`escape_into`]: `%` and two hex digits become that byte.
fn unescape(part: &str) -> String {
    if !part.contains('%') {
        return part.to_owned();
    }
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (byte, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Display for CounterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes `part` with `%`, `{`, `}`, `|` and `=` as `%XX`. Every escaped
/// character is one ASCII byte, so a byte scan finds them and the text
/// between is copied whole (a request's values rarely hold any).
fn escape_into(out: &mut String, part: &str) {
    let mut rest = part;
    while let Some(at) = rest
        .bytes()
        .position(|b| matches!(b, b'%' | b'{' | b'}' | b'|' | b'='))
    {
        // At an ASCII byte: always a character boundary.
        let Some((plain, tail)) = rest.split_at_checked(at) else {
            break;
        };
        out.push_str(plain);
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            // Infallible: writing to a String cannot fail.
            let _ = write!(out, "%{:02X}", u32::from(c));
        }
        rest = chars.as_str();
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_identities() {
        assert_eq!(
            CounterId::new("rl", [("foo", "bar")]).as_str(),
            "rl|foo=bar"
        );
        assert_eq!(
            CounterId::new("d", [("a_b", "c"), ("k", "")]).as_str(),
            "d|a_b=c|k="
        );
        assert_eq!(
            CounterId::new("d{x}", [("k|=", "v%{}")]).as_str(),
            "d%7Bx%7D|k%7C%3D=v%25%7B%7D"
        );
        assert_eq!(CounterId::new("d", []).as_str(), "d");
    }

    #[test]
    fn candidates_have_counters_of_their_own() {
        let id = CounterId::new("d", [("k", "v")]);
        assert_eq!(id.candidate(1).as_str(), "d|k=v|%shadow1");
        assert_ne!(id.candidate(1), id.candidate(2));
        // No request can name the candidate's counter.
        assert_ne!(
            id.candidate(1),
            CounterId::new("d", [("k", "v"), ("%shadow1", "")])
        );
        assert_ne!(id.candidate(1), CounterId::new("d", [("k", "v|%shadow1")]));
    }

    #[test]
    fn underscore_joins_do_not_collide() {
        let a = CounterId::new("d", [("a_b", "c")]);
        let b = CounterId::new("d", [("a", "b_c")]);
        assert_ne!(a, b);
    }

    #[test]
    fn escaped_identity_has_no_braces() {
        let id = CounterId::new("{", [("}", "{}{")]);
        assert!(!id.as_str().contains(['{', '}']));
    }

    #[test]
    fn parts_read_back() {
        let id = CounterId::new("d{x}", [("k|=", "v%{}"), ("a_b", "")]);
        let parts = id.parts();
        assert_eq!(parts.domain, "d{x}");
        assert_eq!(
            parts.entries,
            [
                ("k|=".to_owned(), "v%{}".to_owned()),
                ("a_b".to_owned(), String::new())
            ]
        );
        assert_eq!(parts.shadow, None);
        assert_eq!(id.candidate(2).parts().shadow, Some(2));
        assert_eq!(id.candidate(2).parts().entries, parts.entries);
    }

    proptest! {
        /// Parts read back are the parts the identity was built from.
        #[test]
        fn parts_round_trip(
            d in "[a-z{}|=%_é]{0,4}",
            e in proptest::collection::vec(("[a-z{}|=%_:\n é]{0,4}", "[a-z{}|=%_:\n é]{0,4}"), 0..4),
        ) {
            let id = CounterId::new(&d, e.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let parts = id.parts();
            prop_assert_eq!(parts.domain, d);
            prop_assert_eq!(parts.entries, e);
        }

        /// Escaping is injective: different inputs give different identities.
        #[test]
        fn distinct_descriptors_never_collide(
            d1 in "[a-z{}|=%_]{0,4}", e1 in proptest::collection::vec(("[a-z{}|=%_:\n]{0,4}", "[a-z{}|=%_:\n]{0,4}"), 0..4),
            d2 in "[a-z{}|=%_]{0,4}", e2 in proptest::collection::vec(("[a-z{}|=%_:\n]{0,4}", "[a-z{}|=%_:\n]{0,4}"), 0..4),
        ) {
            let id1 = CounterId::new(&d1, e1.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let id2 = CounterId::new(&d2, e2.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            prop_assert_eq!(id1 == id2, d1 == d2 && e1 == e2);
        }
    }
}
