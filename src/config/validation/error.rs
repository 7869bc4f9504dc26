//! The problems a load reports: one [`ConfigIssue`] per problem, rendered
//! as one line, and the [`ConfigError`] that carries them all.

use super::*;
use std::fmt;
use std::path::PathBuf;

/// One problem in the rule files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The whole problem on one line, as [`Display`](fmt::Display) prints it.
    pub rendered: String,
    file: String,
    location: Option<(usize, usize)>,
    path: String,
    message: String,
}

impl ConfigIssue {
    pub(super) fn new(
        file: &str,
        location: Option<(usize, usize)>,
        path: &str,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let mut rendered = file.to_owned();
        if let Some((line, column)) = location {
            // Writing to a String cannot fail.
            let _ = write!(rendered, ":{line}:{column}");
        }
        rendered.push_str(": ");
        if !path.is_empty() {
            rendered.push_str(path);
            rendered.push_str(": ");
        }
        rendered.push_str(&message);
        Self {
            rendered,
            file: file.to_owned(),
            location,
            path: path.to_owned(),
            message,
        }
    }

    /// Name of the rule file.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// 1-based `(line, column)`, when the YAML parser reported one.
    pub fn location(&self) -> Option<(usize, usize)> {
        self.location
    }

    /// Path of the YAML node at fault (see the module docs); empty for
    /// file-level problems.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong, in the reference's wording where it has one.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rendered)
    }
}

/// Why the rule files did not produce an [`Index`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The rule directory itself could not be listed.
    #[error("cannot read rule directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The files hold problems; all of them, in file then document order.
    /// Print each with its `Display` — this error's own text is a summary.
    #[error("{} in rule files", count_errors(.0))]
    Invalid(Vec<ConfigIssue>),
}

impl ConfigError {
    /// The problems found; empty for [`ConfigError::ReadDir`].
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            Self::ReadDir { .. } => &[],
            Self::Invalid(issues) => issues,
        }
    }
}

fn count_errors(issues: &[ConfigIssue]) -> String {
    match issues.len() {
        1 => "1 error".to_owned(),
        n => format!("{n} errors"),
    }
}
