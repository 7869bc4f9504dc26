//! statsd_exporter mapping files (`PROMETHEUS_MAPPER_YAML`): the rules that
//! turn the reference's statsd-style stat names
//! (`ratelimit.service.rate_limit.edge.user.total_hits`) into Prometheus
//! names and labels (`ratelimit_service_rate_limit_total_hits{domain="edge",key1="user"}`).
//!
//! The semantics are statsd_exporter's (v0.26, the version the reference
//! embeds), for the subset such files use:
//! - `match` is a glob by default: the name is split on `.`, every field of
//!   the pattern is a literal or `*`, and `*` captures one whole field (empty
//!   included). The first glob mapping in file order that matches wins.
//! - `match_type: regex` mappings are tried, in file order, only when no glob
//!   matched. The regex is not anchored; `$1`, `${1}` and `$name` in `name`
//!   and `labels` expand as Go's `Regexp.Expand` does.
//! - `labels` values take `$n` (glob captures, 1-based; an out-of-range or
//!   non-numeric reference expands to nothing).
//! - `match_metric_type` (`counter`, `gauge`, `observer`) limits a mapping
//!   to one kind; `action: drop` drops what it matches.
//! - Observers (timers) become histograms (`observer_type`/`timer_type:
//!   histogram`, buckets from `histogram_options.buckets`, the legacy
//!   `buckets`, the defaults, else Prometheus' default buckets) or summaries
//!   (the default; rendered with `_sum` and `_count` only); `scale`
//!   multiplies observed values.
//! - Every other key statsd_exporter knows (`help`, `ttl`, `honor_labels`,
//!   `summary_options`, `quantiles`, `defaults.glob_disable_ordering`, …) is
//!   accepted; an unknown key is an error, as statsd_exporter's strict
//!   parsing makes it.
//!
//! This file reads its own YAML format (not rule files), so it parses YAML
//! itself.

mod parse;

use parse::{Defaults, Document, TEMPLATE_REF, mapping, parse_observer};
use regex::Regex;
use std::path::{Path, PathBuf};

/// Prometheus' default histogram buckets (client_golang `DefBuckets`).
pub(crate) const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The reference's built-in mapping (`src/stats/prom/default_mapper.yaml`),
/// used when `PROMETHEUS_MAPPER_YAML` is not set.
pub(crate) const REFERENCE_DEFAULT_MAPPING: &str = include_str!("default_mapping.yaml");

/// The kind of a stat, as statsd_exporter's `match_metric_type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A counter (`|c`).
    Counter,
    /// A gauge (`|g`).
    Gauge,
    /// A timer or other observation (`|ms`).
    Observer,
}

/// How observations of a mapped timer are exported.
#[derive(Debug, Clone, PartialEq)]
pub enum Observer {
    /// A histogram with these upper bounds.
    Histogram(Vec<f64>),
    /// A summary (rendered with `_sum` and `_count`).
    Summary,
}

/// What a mapping does with the stats it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Export under the mapped name and labels.
    Map,
    /// Do not export.
    Drop,
}

/// One validated mapping.
#[derive(Debug)]
pub struct Mapping {
    matcher: Matcher,
    name: String,
    labels: Vec<(String, String)>,
    /// `match_metric_type`: the only kind this mapping applies to.
    kind: Option<MetricType>,
    /// `action`.
    pub action: Action,
    /// How observations are exported.
    pub observer: Observer,
    /// `scale`: factor applied to observed values.
    pub scale: f64,
    /// `help`: the HELP line, if set.
    pub help: Option<String>,
}

#[derive(Debug)]
enum Matcher {
    /// Fields of a glob: `None` is `*`.
    Glob(Vec<Option<String>>),
    Regex(Regex),
}

/// A stat name mapped by a [`Mapping`].
#[derive(Debug, Clone)]
pub struct Mapped<'a> {
    /// The mapping that matched (its action, observer type, scale, help).
    pub mapping: &'a Mapping,
    /// The Prometheus name, escaped to the metric-name alphabet.
    pub name: String,
    /// Label pairs, sorted by name.
    pub labels: Vec<(String, String)>,
}

/// A set of mappings, in file order.
#[derive(Debug)]
pub struct Mapper {
    mappings: Vec<Mapping>,
}

/// Why a mapping file was refused.
#[derive(Debug, thiserror::Error)]
pub enum MapperError {
    /// The file could not be read.
    #[error("cannot read the mapping file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a statsd_exporter mapping document.
    #[error("the mapping file is not a valid statsd_exporter mapping")]
    Parse(#[source] serde_yaml_ng::Error),
    /// The `defaults` section is invalid.
    #[error("defaults: {0}")]
    Defaults(String),
    /// A mapping is invalid.
    #[error("mappings[{index}]: {reason}")]
    Invalid {
        /// Position in `mappings` (0-based).
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Mapper {
    /// The reference's built-in mapping; with `response_time_as_ms`
    /// (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`) the response time is not
    /// scaled to seconds, as the reference does.
    pub fn reference_default(response_time_as_ms: bool) -> Self {
        let text = if response_time_as_ms {
            REFERENCE_DEFAULT_MAPPING.replacen("    scale: 0.001\n", "", 1)
        } else {
            REFERENCE_DEFAULT_MAPPING.to_owned()
        };
        #[allow(clippy::expect_used)]
        Self::from_yaml(&text).expect("the built-in mapping is valid (unit-tested)")
    }

    /// Reads and validates a mapping file.
    ///
    /// # Errors
    ///
    /// [`MapperError`] naming the file, the YAML position or the mapping.
    pub fn from_file(path: &Path) -> Result<Self, MapperError> {
        let text = std::fs::read_to_string(path).map_err(|source| MapperError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    /// Parses and validates a mapping document.
    ///
    /// # Errors
    ///
    /// [`MapperError`] for YAML that is not a mapping document, an unknown
    /// key, or an invalid mapping.
    pub fn from_yaml(text: &str) -> Result<Self, MapperError> {
        let doc: Document = if text.trim().is_empty() {
            Document {
                defaults: Defaults::default(),
                mappings: Vec::new(),
            }
        } else {
            serde_yaml_ng::from_str(text).map_err(MapperError::Parse)?
        };
        let defaults = &doc.defaults;
        let default_observer = parse_observer(
            defaults
                .observer_type
                .as_deref()
                .or(defaults.timer_type.as_deref()),
        )
        .map_err(MapperError::Defaults)?;
        let default_buckets = defaults
            .histogram_options
            .as_ref()
            .and_then(|h| h.buckets.clone())
            .or_else(|| defaults.buckets.clone())
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec());
        let default_regex = match defaults.match_type.as_deref() {
            None | Some("" | "glob") => false,
            Some("regex") => true,
            Some(other) => {
                return Err(MapperError::Defaults(format!(
                    "invalid match type \"{other}\""
                )));
            }
        };
        let mappings = doc
            .mappings
            .into_iter()
            .enumerate()
            .map(|(index, model)| {
                mapping(model, default_regex, default_observer, &default_buckets)
                    .map_err(|reason| MapperError::Invalid { index, reason })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { mappings })
    }

    /// The mapping of `stat` (a statsd name) of kind `kind`: the first glob
    /// that matches, else the first regex; `None` when nothing matches (the
    /// stat is then exported under its escaped name, see `escape_name`).
    pub fn map(&self, stat: &str, kind: MetricType) -> Option<Mapped<'_>> {
        let applies = |m: &Mapping| m.kind.is_none_or(|k| k == kind);
        let fields: Vec<&str> = stat.split('.').collect();
        for mapping in self.mappings.iter().filter(|m| applies(m)) {
            let Matcher::Glob(pattern) = &mapping.matcher else {
                continue;
            };
            if let Some(captures) = glob_captures(pattern, &fields) {
                let expand = |template: &str| expand_glob(template, &captures);
                return Some(mapped(mapping, expand));
            }
        }
        for mapping in self.mappings.iter().filter(|m| applies(m)) {
            let Matcher::Regex(regex) = &mapping.matcher else {
                continue;
            };
            if let Some(captures) = regex.captures(stat) {
                let expand = |template: &str| {
                    let mut out = String::new();
                    captures.expand(template, &mut out);
                    out
                };
                return Some(mapped(mapping, expand));
            }
        }
        None
    }
}

fn mapped(mapping: &Mapping, expand: impl Fn(&str) -> String) -> Mapped<'_> {
    Mapped {
        mapping,
        name: escape_name(&expand(&mapping.name)),
        labels: mapping
            .labels
            .iter()
            .map(|(label, template)| (label.clone(), expand(template)))
            .collect(),
    }
}

/// The captures of a glob over the fields of a name, or `None` when it does
/// not match (another field count, or a literal field differs).
fn glob_captures<'a>(pattern: &[Option<String>], fields: &[&'a str]) -> Option<Vec<&'a str>> {
    if pattern.len() != fields.len() {
        return None;
    }
    let mut captures = Vec::new();
    for (want, field) in pattern.iter().zip(fields) {
        match want {
            None => captures.push(*field),
            Some(literal) if literal == field => {}
            Some(_) => return None,
        }
    }
    Some(captures)
}

fn expand_glob(template: &str, captures: &[&str]) -> String {
    TEMPLATE_REF
        .replace_all(template, |c: &regex::Captures<'_>| {
            c.get(1)
                .and_then(|n| n.as_str().parse::<usize>().ok())
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| captures.get(i))
                .map_or_else(String::new, |s| (*s).to_owned())
        })
        .into_owned()
}

/// statsd_exporter's `EscapeMetricName`: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (a run of `-` becomes one `_`), and a leading
/// digit gets a `_` prefix.
pub(crate) fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    let mut previous = None;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if !(c == '-' && previous == Some('-')) {
            out.push('_');
        }
        previous = Some(c);
    }
    out
}

#[cfg(test)]
mod tests;
