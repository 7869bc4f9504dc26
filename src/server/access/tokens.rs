//! The admin tokens file (`ADMIN_TOKENS_FILE`): `NAME:TOKEN` lines, with
//! `#` comments and an optional `:write` scope, read at start (a bad file
//! is a start error) and again whenever its bytes change (a bad file then
//! keeps the previous tokens). Tokens never leave this file's types: no
//! `Debug`, `Display` or error message prints one.

use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq as _;

/// Shortest token accepted: guessing 16 characters is out of reach.
pub(crate) const MIN_TOKEN_CHARS: usize = 16;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The operator views.
    Read,
    /// The views, and changes through the limit-table API.
    Write,
}

/// One named token.
pub(crate) struct Token {
    name: std::sync::Arc<str>,
    secret: Box<[u8]>,
    scope: Scope,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The tokens of one reading of the file.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    tokens: Vec<Token>,
}

/// Who a valid token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    /// The token's name (logged as `admin.user`).
    pub(crate) name: std::sync::Arc<str>,
    /// What it may do.
    pub(crate) scope: Scope,
}

impl Tokens {
    /// Whose token `presented` is: every token is compared in constant
    /// time, and all of them are, so neither the match nor its position
    /// shows in the time taken.
    pub(crate) fn user(&self, presented: &[u8]) -> Option<User> {
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.secret.as_ref().ct_eq(presented)) && found.is_none() {
                found = Some(User {
                    name: token.name.clone(),
                    scope: token.scope,
                });
            }
        }
        found
    }

    /// How many tokens the file holds.
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// What is wrong with a line of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// Not `NAME:TOKEN` or `NAME:TOKEN:write`.
    #[error("expected NAME:TOKEN or NAME:TOKEN:write")]
    Malformed,
    /// A token shorter than 16 characters.
    #[error("the token is shorter than 16 characters")]
    Short,
    /// A name given on an earlier line.
    #[error("the name is given twice")]
    DuplicateName,
    /// A third field other than `write`.
    #[error("unknown scope (only write is known)")]
    Scope,
}

/// Why the tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("cannot read admin tokens file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a valid token line.
    #[error("admin tokens file {}, line {line}: {problem}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong (never the token itself).
        problem: LineProblem,
    },
}

/// Reads and parses the file at `path`: its tokens and its bytes (to tell
/// a later change).
///
/// # Errors
///
/// [`TokensError`] naming the file, and the line when one is bad.
pub(crate) fn read(path: &Path) -> Result<(Tokens, Vec<u8>), TokensError> {
    let bytes = std::fs::read(path).map_err(|source| TokensError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok((parse_file(path, &bytes)?, bytes))
}

/// The tokens of the file at `path` whose content is `bytes`.
///
/// # Errors
///
/// [`TokensError::Line`] for the first bad line.
pub(crate) fn parse_file(path: &Path, bytes: &[u8]) -> Result<Tokens, TokensError> {
    parse(&String::from_utf8_lossy(bytes)).map_err(|(line, problem)| TokensError::Line {
        path: path.to_owned(),
        line,
        problem,
    })
}

/// The tokens of `text`, or the first bad line (1-based) and its problem.
fn parse(text: &str) -> Result<Tokens, (usize, LineProblem)> {
    let mut tokens: Vec<Token> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(':');
        let (Some(name), Some(secret)) = (fields.next(), fields.next()) else {
            return Err((number, LineProblem::Malformed));
        };
        let scope = match fields.next() {
            None => Scope::Read,
            Some("write") => Scope::Write,
            Some(_) => return Err((number, LineProblem::Scope)),
        };
        let valid_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
        if fields.next().is_some() || name.is_empty() || !name.chars().all(valid_name) {
            return Err((number, LineProblem::Malformed));
        }
        if secret.chars().count() < MIN_TOKEN_CHARS {
            return Err((number, LineProblem::Short));
        }
        if tokens.iter().any(|t| &*t.name == name) {
            return Err((number, LineProblem::DuplicateName));
        }
        tokens.push(Token {
            name: name.into(),
            secret: secret.as_bytes().into(),
            scope,
        });
    }
    Ok(Tokens { tokens })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_tokens_scopes_and_comments() {
        let tokens =
            parse("# operators\nalice:0123456789abcdef\n\n  bob:fedcba9876543210fe:write\n")
                .unwrap();
        assert_eq!(tokens.len(), 2);
        let alice = tokens.user(b"0123456789abcdef").unwrap();
        assert_eq!((&*alice.name, alice.scope), ("alice", Scope::Read));
        let bob = tokens.user(b"fedcba9876543210fe").unwrap();
        assert_eq!((&*bob.name, bob.scope), ("bob", Scope::Write));
        assert_eq!(tokens.user(b"0123456789abcde"), None);
        assert_eq!(tokens.user(b""), None);
    }

    #[test]
    fn names_the_line_of_a_bad_token_and_never_the_token() {
        for (text, line, problem) in [
            ("a:0123456789abcde", 1, LineProblem::Short),
            (
                "# x\na:0123456789abcdef\na:0123456789abcdeg",
                3,
                LineProblem::DuplicateName,
            ),
            ("just-a-name", 1, LineProblem::Malformed),
            (":0123456789abcdef", 1, LineProblem::Malformed),
            ("a:0123456789abcdef:admin", 1, LineProblem::Scope),
            ("a:0123456789abcdef:write:x", 1, LineProblem::Malformed),
        ] {
            assert_eq!(parse(text).unwrap_err(), (line, problem), "{text}");
        }
        let err = TokensError::Line {
            path: "/etc/tokens".into(),
            line: 1,
            problem: LineProblem::Short,
        };
        assert_eq!(
            err.to_string(),
            "admin tokens file /etc/tokens, line 1: the token is shorter than 16 characters"
        );
        let debug = format!("{:?}", parse("alice:0123456789abcdef").unwrap());
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
    }
}
