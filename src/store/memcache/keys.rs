//! memcached keys, written as the reference service writes them, and the
//! server each key lives on, picked as the reference's client picks it.
//!
//! Grammar (the reference's `CacheKeyGenerator`):
//!
//! ```text
//! key = prefix domain "_" *(entry_key "_" entry_value "_") [window_secs "s"] window_start_secs
//! ```
//!
//! The window's length is written only for lengths the reference cannot
//! have (`unit_multiplier` above 1): the reference's keys hold the start
//! alone, so two units of one descriptor share a counter at the start of
//! the longer one's window, in the reference as here. floodgate keeps one
//! enforced limit per descriptor on memcached for that reason.
//!
//! `share_threshold` entries carry their wildcard pattern as the value, as
//! in the reference. A shadow (candidate) limit, which the reference does
//! not have, writes `%shadow<n>_` after the entries. So one memcached can be
//! shared by the reference and floodgate during a migration: both count the
//! same window of the same descriptor on the same key of the same server.
//!
//! memcached refuses keys over 250 bytes or holding a space or a control
//! character; the reference then counts nothing (every such request is
//! admitted). floodgate writes such a key as `prefix "#" hash "_"
//! window_start_secs` instead (128-bit xxh3 of the whole key), so a value
//! with a space cannot escape its limit.

use crate::store::CounterId;
use std::fmt::Write as _;

/// Longest key memcached takes.
pub(crate) const MAX_KEY_BYTES: usize = 250;

/// Whether memcached takes `key` as it is (its ASCII protocol's rule).
pub(crate) fn is_legal(key: &str) -> bool {
    key.len() <= MAX_KEY_BYTES && key.bytes().all(|b| b > b' ' && b != 0x7f)
}

/// The window lengths of the reference's units (second to a 365-day year),
/// whose keys carry the window's start only.
const REFERENCE_WINDOWS: [u64; 7] = [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000];

/// The key of the fixed window of `window_secs` starting at `start_secs`.
pub(crate) fn fixed_window(
    prefix: &str,
    id: &CounterId,
    window_secs: u64,
    start_secs: u64,
) -> String {
    let parts = id.parts();
    let mut key = String::with_capacity(prefix.len() + id.as_str().len() + 24);
    key.push_str(prefix);
    key.push_str(&parts.domain);
    key.push('_');
    for (entry_key, value) in &parts.entries {
        key.push_str(entry_key);
        key.push('_');
        key.push_str(value);
        key.push('_');
    }
    if let Some(limit) = parts.shadow {
        // Infallible: writing to a String cannot fail.
        let _ = write!(key, "%shadow{limit}_");
    }
    if !REFERENCE_WINDOWS.contains(&window_secs) {
        // A window the reference cannot have (`unit_multiplier`): its
        // length is in the key, whose last part is then never all digits
        // as the reference's are.
        let _ = write!(key, "{window_secs}s");
    }
    let _ = write!(key, "{start_secs}");
    if is_legal(&key) {
        return key;
    }
    let hash = xxhash_rust::xxh3::xxh3_128(key.as_bytes());
    format!("{prefix}#{hash:032x}_{start_secs}")
}

/// The position in `servers` (in their configured order) of the server
/// holding `key`: the reference's client takes the IEEE CRC-32 of the key
/// modulo the number of servers.
pub(crate) fn server_of(key: &str, servers: usize) -> usize {
    if servers <= 1 {
        return 0;
    }
    let crc = crc32fast::hash(key.as_bytes());
    // A u32 always fits in usize on the 32- and 64-bit targets floodgate builds for.
    usize::try_from(crc).unwrap_or_default() % servers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_references() {
        // The reference writes `prefix + domain_key_value_..._start`.
        let id = CounterId::new("edge", [("user", "alice"), ("path", "/a")]);
        assert_eq!(
            fixed_window("", &id, 60, 1_700_000_040),
            "edge_user_alice_path_/a_1700000040"
        );
        assert_eq!(
            fixed_window("pfx:", &id, 60, 60),
            "pfx:edge_user_alice_path_/a_60"
        );
        let escaped = CounterId::new("d", [("k|=", "v%{}")]);
        assert_eq!(fixed_window("", &escaped, 1, 1), "d_k|=_v%{}_1");
        assert_eq!(
            fixed_window("", &id.candidate(1), 60, 60),
            "edge_user_alice_path_/a_%shadow1_60"
        );
    }

    #[test]
    fn windows_the_reference_cannot_have_carry_their_length() {
        let id = CounterId::new("d", [("k", "v")]);
        assert_eq!(fixed_window("", &id, 90, 180), "d_k_v_90s180");
        assert_eq!(fixed_window("", &id, 3_600, 0), "d_k_v_0");
        assert_eq!(fixed_window("", &id, 31_536_000, 0), "d_k_v_0");
    }

    #[test]
    fn keys_memcached_refuses_are_hashed_apart() {
        let spaced = CounterId::new("d", [("k", "a b")]);
        let other = CounterId::new("d", [("k", "a  b")]);
        let key = fixed_window("p:", &spaced, 60, 60);
        assert!(key.starts_with("p:#") && key.ends_with("_60"), "{key}");
        assert!(is_legal(&key));
        assert_ne!(key, fixed_window("p:", &other, 60, 60));
        assert_ne!(key, fixed_window("p:", &spaced, 60, 120));
        let long = CounterId::new("d", [("k", "v".repeat(300).as_str())]);
        assert!(is_legal(&fixed_window("", &long, 60, 60)));
        assert!(!is_legal(&format!("d_k_{}_60", "v".repeat(300))));
        assert!(!is_legal("a\u{7f}b"));
        assert!(is_legal("ключ_é"));
    }

    #[test]
    fn servers_are_picked_as_the_reference_client_picks_them() {
        // IEEE CRC-32 check value: crc32("123456789") = 0xCBF43926.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(server_of("123456789", 7), 0xCBF4_3926 % 7);
        assert_eq!(server_of("anything", 1), 0);
        assert_eq!(server_of("anything", 0), 0);
    }
}
