//! Secret descriptor values: which entries are secret (a rule node's
//! `redact: true`, per domain, or `REDACT_DESCRIPTOR_KEYS` for every
//! domain) and the one display function every surface calls
//! ([`Redactor::show`]): a secret value leaves the process only as its tag,
//! `~` and the first 16 hex digits of HMAC-SHA256(key, value). Counting
//! uses the clear value, unless `REDACT_STORE_KEYS` puts the tag in the
//! store's keys too ([`Redactor::store_value`]).

use ring::hmac;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Shortest key accepted from `REDACT_KEY_FILE`: HMAC-SHA256's block-sized
/// keys are 64 bytes, and anything under 32 could be guessed from tags.
const MIN_KEY_BYTES: usize = 32;

/// Hex digits of the HMAC a tag keeps: 64 bits, enough to tell values
/// apart on every view, too few to confirm a guess offline without the key.
const TAG_HEX: usize = 16;

/// What turns secret values into tags.
#[derive(Debug)]
pub struct Redactor {
    key: hmac::Key,
    /// `REDACT_DESCRIPTOR_KEYS`: secret in every domain.
    keys: Box<[Box<str>]>,
    /// `REDACT_STORE_KEYS`: the store's keys hold tags too.
    store_keys: bool,
}

/// Why the redaction key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// The key file cannot be read.
    #[error("cannot read redaction key file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key file holds too few bytes.
    #[error("redaction key file {} holds {bytes} bytes, fewer than 32", path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes it holds (trailing whitespace left out).
        bytes: usize,
    },
    /// No random key could be drawn.
    #[error("cannot draw a random redaction key")]
    Random,
}

impl Redactor {
    /// A redactor keyed by the file at `key_file` (its bytes, trailing
    /// whitespace left out), or by a random key of this process when
    /// `None`; `keys` are secret in every domain.
    ///
    /// # Errors
    ///
    /// [`RedactError`]: the file cannot be read or is too short.
    pub fn new(
        key_file: Option<&Path>,
        keys: Vec<String>,
        store_keys: bool,
    ) -> Result<Self, RedactError> {
        let key = match key_file {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|source| RedactError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let bytes = bytes.trim_ascii_end();
                if bytes.len() < MIN_KEY_BYTES {
                    return Err(RedactError::Short {
                        path: path.to_owned(),
                        bytes: bytes.len(),
                    });
                }
                hmac::Key::new(hmac::HMAC_SHA256, bytes)
            }
            None => hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
                .map_err(|_| RedactError::Random)?,
        };
        Ok(Self {
            key,
            keys: keys.into_iter().map(Box::from).collect(),
            store_keys,
        })
    }

    /// A random key and no secret key but the rules' own.
    ///
    /// # Panics
    ///
    /// When the system's random source fails (the process could not run).
    #[allow(clippy::expect_used)]
    pub fn random() -> Self {
        Self::new(None, Vec::new(), false).expect("the system random source works")
    }

    /// The tag of `value`: `~` and the first 16 hex digits of its HMAC.
    pub fn tag(&self, value: &str) -> String {
        let mac = hmac::sign(&self.key, value.as_bytes());
        let mut tag = String::with_capacity(TAG_HEX + 1);
        tag.push('~');
        for byte in mac.as_ref().iter().take(TAG_HEX / 2) {
            // Writing to a String cannot fail.
            let _ = write!(tag, "{byte:02x}");
        }
        tag
    }

    /// Whether the values of `key` are secret, `domain_keys` being the
    /// secret keys of the domain's rules ([`super::Index::secret_keys`]).
    pub fn is_secret(&self, domain_keys: &[Box<str>], key: &str) -> bool {
        domain_keys.iter().chain(&self.keys).any(|k| &**k == key)
    }

    /// Whether the store's keys hold tags (`REDACT_STORE_KEYS`).
    pub fn stores_tags(&self) -> bool {
        self.store_keys
    }

    /// Whether any key of the domain is secret.
    pub fn is_active(&self, domain_keys: &[Box<str>]) -> bool {
        !domain_keys.is_empty() || !self.keys.is_empty()
    }

    /// The display function: `value` of entry `key` as every surface
    /// outside the counting shows it (views, logs, spans, metric names,
    /// errors): its tag when secret, else itself.
    pub fn show<'v>(&self, domain_keys: &[Box<str>], key: &str, value: &'v str) -> Cow<'v, str> {
        if self.is_secret(domain_keys, key) {
            Cow::Owned(self.tag(value))
        } else {
            Cow::Borrowed(value)
        }
    }

    /// `value` as the store's keys hold it: [`Redactor::show`] with
    /// `REDACT_STORE_KEYS`, else the value itself.
    pub fn store_value<'v>(
        &self,
        domain_keys: &[Box<str>],
        key: &str,
        value: &'v str,
    ) -> Cow<'v, str> {
        if self.store_keys {
            self.show(domain_keys, key, value)
        } else {
            Cow::Borrowed(value)
        }
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::random()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_hmac_sha256_cut_to_16_hex_digits() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, format!("{}\n", "k".repeat(32))).unwrap();
        let redactor = Redactor::new(Some(&file), vec!["api_key".into()], false).unwrap();
        // HMAC-SHA256("kkkk…k" (32), "secret"), computed apart with
        // `printf secret | openssl dgst -sha256 -hmac kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk`.
        let tag = redactor.tag("secret");
        assert_eq!(tag.len(), 17);
        assert!(tag.starts_with('~'));
        assert_eq!(tag, EXPECTED_TAG);
        assert_eq!(redactor.show(&[], "api_key", "secret"), EXPECTED_TAG);
        assert_eq!(redactor.show(&[], "user", "secret"), "secret");
        let rule_keys: Vec<Box<str>> = vec!["user".into()];
        assert_eq!(redactor.show(&rule_keys, "user", "secret"), EXPECTED_TAG);
        assert_eq!(redactor.store_value(&rule_keys, "user", "secret"), "secret");
    }

    #[test]
    fn a_short_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "short\n").unwrap();
        let err = Redactor::new(Some(&file), Vec::new(), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "redaction key file {} holds 5 bytes, fewer than 32",
                file.display()
            )
        );
    }

    #[test]
    fn random_keys_differ() {
        assert_ne!(Redactor::random().tag("v"), Redactor::random().tag("v"));
    }

    const EXPECTED_TAG: &str = "~ead256ccb47a97d5";
}
