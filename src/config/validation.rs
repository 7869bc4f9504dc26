//! CONTRACT STUB.

use super::Index;
use std::path::{Path, PathBuf};

/// Options.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// MERGE_DOMAIN_CONFIG.
    pub merge_domains: bool,
    /// RUNTIME_IGNOREDOTFILES.
    pub ignore_dotfiles: bool,
}

/// A named rule file's contents.
#[derive(Debug, Clone)]
pub struct Source {
    /// File name as shown in errors.
    pub name: String,
    /// YAML text.
    pub text: String,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Rendered line.
    pub rendered: String,
}

/// Error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Read.
    #[error("cannot read rule directory {path}")]
    ReadDir {
        /// path
        path: PathBuf,
        /// cause
        #[source]
        source: std::io::Error,
    },
    /// Invalid.
    #[error("invalid rule files")]
    Invalid(Vec<ConfigIssue>),
}

/// Load dir.
pub fn load_dir(_dir: &Path, _options: &LoadOptions) -> Result<Index, ConfigError> {
    Ok(Index::empty())
}

/// Load sources.
pub fn load_sources(_sources: &[Source], _options: &LoadOptions) -> Result<Index, ConfigError> {
    Ok(Index::empty())
}

impl std::fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rendered)
    }
}
