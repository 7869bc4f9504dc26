//! Rule files in, a validated [`Index`] or the complete list of problems out.
//!
//! Owns: reading the rule directory, the unknown-key check, every validation
//! rule with the reference's wording (REFERENCE.md §1.3) and the rendering of
//! problems. Must not touch: matching (`index`) or anything request-time.
//!
//! Every problem is collected — across descriptors and across files — and
//! none stops the load early, so one `check-config` run shows them all. Each
//! renders as one line:
//!
//! ```text
//! <file>[:<line>:<col>]: [<path> [(key=<k>, value=<v>)]: ]<message>
//! edge.yaml: descriptors[2] (key=remote_address): invalid rate limit unit 'minutes'
//! ```
//!
//! The path names the YAML node at fault: `descriptors[0].descriptors[1]` for
//! a descriptor (the fields of its `rate_limit` are reported on it), with
//! `.rate_limit`, `.rate_limits[i]` or `.rate_limit.replaces[j]` appended
//! where that is more precise. The parenthesis shows the innermost
//! descriptor's `key`/`value` so the line can be found without counting. Only
//! YAML syntax and type errors know their line and column: the YAML crate
//! keeps no positions for the tree the other checks walk.

mod error;
mod keys;
mod rate_limit;
mod store;
mod table;
#[cfg(test)]
mod tests;
mod tree;

pub use super::rule::StoreInfo;
pub use error::ConfigError;
pub(crate) use error::ConfigIssue;
use keys::{MapKind, check_keys};
use rate_limit::{check_rate_limit, check_rate_limits};
use table::check_table;
use tree::{BuildDomain, BuildLevel, add_descriptors, freeze};

use super::index::{
    Algorithm, DomainIndex, Index, Level, Limit, Node, PathStep, Policy, Rule, TableUse,
};
use super::model::{self, DESCRIPTOR_KEYS, RATE_LIMIT_KEYS, REPLACES_KEYS, ROOT_KEYS};
use crate::algorithm::MAX_LIMITS;
use crate::descriptor::Unit;
use serde_yaml_ng::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;

/// How a set of rule files is combined (process settings, not rule files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// `MERGE_DOMAIN_CONFIG`: several files may declare the same domain; their
    /// descriptors are merged (a duplicate composite key is still an error).
    pub merge_domains: bool,
    /// `RUNTIME_IGNOREDOTFILES`: skip files whose name starts with `.`.
    pub ignore_dotfiles: bool,
    /// The store counts fixed windows only (memcached): a rule with
    /// another algorithm is an error naming it.
    pub fixed_windows_only: bool,
    /// The stores rules may name (`store:`) besides `default`: each name
    /// with its place among the process's stores and what it can count.
    pub stores: Vec<StoreInfo>,
}

/// A named rule file's contents.
#[derive(Debug, Clone)]
pub struct Source {
    /// File name as shown in errors (not a path).
    pub name: String,
    /// YAML text.
    pub text: String,
}

/// Loads every regular file directly in `dir`, in file-name order.
///
/// Symlinks are followed; subdirectories and other non-regular entries are
/// skipped (which also keeps a Kubernetes ConfigMap mount's `..data`
/// directory out). With [`LoadOptions::ignore_dotfiles`], names starting
/// with `.` are skipped. An empty directory gives an empty index, as the
/// reference serves with no domains. A file that cannot be read is reported
/// as an issue like any other problem.
///
/// # Errors
/// [`ConfigError::ReadDir`] when `dir` cannot be listed;
/// [`ConfigError::Invalid`] with every problem otherwise.
pub fn load_dir(dir: &Path, options: &LoadOptions) -> Result<Index, ConfigError> {
    let read_dir_error = |source| ConfigError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        names.push(entry.map_err(read_dir_error)?.file_name());
    }
    names.sort();

    let mut loader = Loader::new(options);
    for name in names {
        let file = name.to_string_lossy();
        if options.ignore_dotfiles && file.starts_with('.') {
            continue;
        }
        let path = dir.join(&name);
        // `metadata` follows symlinks; a dangling one is reported below.
        let metadata = std::fs::metadata(&path);
        if metadata.as_ref().is_ok_and(|meta| !meta.is_file()) {
            continue;
        }
        match metadata.and_then(|_| std::fs::read_to_string(&path)) {
            Ok(text) => loader.load(&file, &text),
            Err(err) => loader.issue(&file, None, "", format!("cannot read rule file: {err}")),
        }
    }
    loader.finish()
}

/// Loads in-memory rule files, in the given order (errors follow it).
///
/// # Errors
/// [`ConfigError::Invalid`] with every problem found.
pub fn load_sources(sources: &[Source], options: &LoadOptions) -> Result<Index, ConfigError> {
    let mut loader = Loader::new(options);
    for source in sources {
        loader.load(&source.name, &source.text);
    }
    loader.finish()
}

/// Validates rules already in the model's shape (from xDS), each named as
/// its errors show it, exactly as rule files are validated: the same
/// checks, the same wording, `merge_domains` alike.
///
/// # Errors
/// [`ConfigError::Invalid`] with every problem found.
pub(crate) fn load_models(
    files: &[(String, model::File)],
    options: &LoadOptions,
) -> Result<Index, ConfigError> {
    let mut loader = Loader::new(options);
    for (name, file) in files {
        loader.add_file(name, file, None);
    }
    loader.finish()
}

/// Checks limits a table entry lays over a rule's exactly as the rule's
/// own `rate_limit` (`several` false) or `rate_limits` are checked: the
/// same checks, the same wording, every problem as
/// `entry[.rate_limits[i]]: message`.
///
/// # Errors
/// Every problem found.
pub(crate) fn check_limits(
    items: &[model::RateLimit],
    several: bool,
    stores: &[StoreInfo],
) -> Result<Policy, Vec<String>> {
    let mut issues = Vec::new();
    let mut check = FileCheck {
        file: "",
        domain: "",
        issues: &mut issues,
        fixed_windows_only: false,
        stores,
    };
    let place = Place {
        at: "entry".to_owned(),
        key: None,
        value: None,
    };
    let checked = match items {
        [one] if !several => check_rate_limit(&mut check, one, &place, ".rate_limit"),
        _ => check_rate_limits(&mut check, items, &place),
    };
    match checked {
        Some((policy, _)) if issues.is_empty() => Ok(policy),
        _ => Err(issues
            .iter()
            .map(|issue| format!("{}: {}", issue.path(), issue.message()))
            .collect()),
    }
}

/// Accumulates domains and issues over all files.
#[derive(Debug)]
struct Loader<'o> {
    options: &'o LoadOptions,
    issues: Vec<ConfigIssue>,
    domains: Vec<BuildDomain>,
    by_name: HashMap<String, usize>,
}

/// Where in the tree a check is: for issue paths and reference keys.
#[derive(Debug, Clone)]
struct Place<'a> {
    /// Dotted node path, e.g. `descriptors[0].descriptors[1]`.
    at: String,
    /// Innermost descriptor's key and value, for the parenthesis.
    key: Option<&'a str>,
    value: Option<&'a str>,
}

impl Place<'_> {
    fn render(&self, suffix: &str) -> String {
        let mut out = format!("{}{suffix}", self.at);
        let key = self.key.filter(|key| !key.is_empty());
        let value = self.value.filter(|value| !value.is_empty());
        match (key, value) {
            (Some(key), Some(value)) => {
                let _ = write!(out, " (key={key}, value={value})");
            }
            (Some(key), None) => {
                let _ = write!(out, " (key={key})");
            }
            (None, Some(value)) => {
                let _ = write!(out, " (value={value})");
            }
            (None, None) => {}
        }
        out
    }
}

/// Per-file context of the descriptor walk.
#[derive(Debug)]
struct FileCheck<'a> {
    file: &'a str,
    domain: &'a str,
    issues: &'a mut Vec<ConfigIssue>,
    /// [`LoadOptions::fixed_windows_only`].
    fixed_windows_only: bool,
    /// The stores rules may name besides `default`
    /// ([`LoadOptions::stores`]).
    stores: &'a [StoreInfo],
}

impl FileCheck<'_> {
    fn issue(&mut self, path: &str, message: impl Into<String>) {
        self.issues
            .push(ConfigIssue::new(self.file, None, path, message));
    }

    /// The store a rule names: its place and whether it counts fixed
    /// windows only; `None` when no store has that name.
    fn store(&self, name: Option<&str>) -> Option<(u8, bool)> {
        match name {
            None | Some("default") => Some((0, self.fixed_windows_only)),
            Some(name) => self
                .stores
                .iter()
                .find(|s| s.name == name)
                .map(|s| (s.index, s.fixed_windows_only)),
        }
    }

    /// Whether the store at `index` counts fixed windows only.
    fn fixed_only_at(&self, index: u8) -> bool {
        if index == 0 {
            return self.fixed_windows_only;
        }
        self.stores
            .iter()
            .find(|s| s.index == index)
            .is_some_and(|s| s.fixed_windows_only)
    }

    /// The names rules may give, for an error naming an unknown one.
    fn store_names(&self) -> String {
        let mut names = vec!["default"];
        names.extend(self.stores.iter().map(|s| s.name.as_str()));
        names.join(", ")
    }
}

impl<'o> Loader<'o> {
    fn new(options: &'o LoadOptions) -> Self {
        Self {
            options,
            issues: Vec::new(),
            domains: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    fn issue(&mut self, file: &str, location: Option<(usize, usize)>, path: &str, message: String) {
        self.issues
            .push(ConfigIssue::new(file, location, path, message));
    }

    fn load(&mut self, file: &str, text: &str) {
        let document = match model::parse_tree(text) {
            Ok(document) => document,
            Err(err) => {
                let message = format!("error loading config file: {}", err.message);
                return self.issue(file, err.location, "", message);
            }
        };
        let tree = &document.tree;
        let parsed = match model::parse_file(text, &document) {
            Ok(parsed) => parsed,
            Err(err) => {
                // A wrong key or a list of scalars usually causes the type
                // error; report those, in the reference's words, instead.
                let before = self.issues.len();
                let mut check = FileCheck {
                    file,
                    domain: "",
                    issues: &mut self.issues,
                    fixed_windows_only: self.options.fixed_windows_only,
                    stores: &self.options.stores,
                };
                check_keys(&mut check, tree, MapKind::Root, &Place::root(), "", true);
                if self.issues.len() == before {
                    let message = format!("error loading config file: {}", err.message);
                    self.issue(file, err.location, "", message);
                }
                return;
            }
        };

        self.add_file(file, &parsed, Some(tree));
    }

    /// Validates one parsed rule file into the domains. `tree` is its raw
    /// YAML, for the unknown-key check; `None` for rules that did not come
    /// from YAML (xDS), whose shape admits no unknown key.
    fn add_file(&mut self, file: &str, parsed: &model::File, tree: Option<&Value>) {
        let domain = parsed.domain.as_deref().unwrap_or_default();
        let mut check = FileCheck {
            file,
            domain,
            issues: &mut self.issues,
            fixed_windows_only: self.options.fixed_windows_only,
            stores: &self.options.stores,
        };
        if let Some(tree) = tree {
            check_keys(&mut check, tree, MapKind::Root, &Place::root(), "", false);
        }

        // Descriptors of a rejected file are still checked (into a scratch
        // level) so that all their problems are reported too.
        let mut scratch = BuildLevel::default();
        let existing = self.by_name.get(domain).copied();
        let level = if domain.is_empty() {
            check.issue("", "config file cannot have empty domain");
            &mut scratch
        } else if existing.is_some() && !self.options.merge_domains {
            check.issue("", format!("duplicate domain '{domain}' in config file"));
            &mut scratch
        } else {
            let at = existing.unwrap_or_else(|| {
                self.by_name.insert(domain.to_owned(), self.domains.len());
                self.domains.push(BuildDomain {
                    name: domain.to_owned(),
                    root: BuildLevel::default(),
                });
                self.domains.len() - 1
            });
            match self.domains.get_mut(at) {
                Some(built) => &mut built.root,
                None => &mut scratch,
            }
        };
        let descriptors = parsed.descriptors.as_deref().unwrap_or_default();
        let mut ancestors = Vec::new();
        add_descriptors(
            &mut check,
            level,
            descriptors,
            tree.and_then(|tree| tree.get("descriptors")),
            &Place::root(),
            &format!("{domain}."),
            &mut ancestors,
        );
    }

    fn finish(self) -> Result<Index, ConfigError> {
        if !self.issues.is_empty() {
            return Err(ConfigError::Invalid(self.issues));
        }
        let domains = self
            .domains
            .into_iter()
            .map(|domain| {
                let mut rules = Vec::new();
                let mut node_count = 0;
                let mut secret_keys = Vec::new();
                let root = freeze(domain.root, &mut rules, &mut node_count, &mut secret_keys);
                DomainIndex {
                    name: domain.name,
                    root,
                    rules,
                    node_count,
                    secret_keys: secret_keys.into(),
                }
            })
            .collect();
        Ok(Index::from_domains(domains))
    }
}

impl Place<'static> {
    fn root() -> Self {
        Self {
            at: String::new(),
            key: None,
            value: None,
        }
    }
}
