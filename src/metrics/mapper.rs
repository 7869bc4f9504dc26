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

use regex::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Prometheus' default histogram buckets (client_golang `DefBuckets`).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The reference's built-in mapping (`src/stats/prom/default_mapper.yaml`),
/// used when `PROMETHEUS_MAPPER_YAML` is not set.
pub const REFERENCE_DEFAULT_MAPPING: &str = include_str!("default_mapping.yaml");

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

// --- the document, as statsd_exporter's structs spell it ---------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    mappings: Vec<MappingModel>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    observer_type: Option<String>,
    timer_type: Option<String>,
    match_type: Option<String>,
    #[allow(dead_code)] // accepted, without effect: first match always wins
    glob_disable_ordering: Option<bool>,
    #[allow(dead_code)] // accepted: series never expire here
    ttl: Option<serde_yaml_ng::Value>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    summary_options: Option<serde_yaml_ng::Value>,
    histogram_options: Option<HistogramOptions>,
    buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    quantiles: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistogramOptions {
    buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: native histograms are not exported
    native_histogram_bucket_factor: Option<f64>,
    #[allow(dead_code)] // accepted: native histograms are not exported
    native_histogram_max_buckets: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MappingModel {
    #[serde(rename = "match", default)]
    pattern: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, serde_yaml_ng::Value>,
    #[allow(dead_code)] // accepted: stats carry no labels of their own here
    honor_labels: Option<bool>,
    observer_type: Option<String>,
    timer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    quantiles: Option<serde_yaml_ng::Value>,
    match_type: Option<String>,
    help: Option<String>,
    action: Option<String>,
    match_metric_type: Option<String>,
    #[allow(dead_code)] // accepted: series never expire here
    ttl: Option<serde_yaml_ng::Value>,
    summary_options: Option<serde_yaml_ng::Value>,
    histogram_options: Option<HistogramOptions>,
    scale: Option<f64>,
}

/// statsd_exporter's `metricLineRE`: what a glob `match` may look like.
static GLOB_LINE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^(\*|[a-zA-Z_][a-zA-Z0-9_\-]*)(\.\*|\.[a-zA-Z0-9_][a-zA-Z0-9_\-]*)*$")
        .expect("a valid constant regex")
});
/// statsd_exporter's `metricNameRE`: a metric name with `$n` templates.
static METRIC_NAME: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^([a-zA-Z_]|(\$\{?\d+\}?))([a-zA-Z0-9_]|(\$\{?\d+\}?))*$")
        .expect("a valid constant regex")
});
/// statsd_exporter's `labelNameRE` (at least two characters, as there).
static LABEL_NAME: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_]+$").expect("a valid constant regex")
});
/// A glob template reference: `$1`, `${1}` (and anything name-like, which
/// expands to nothing, as in statsd_exporter's formatter).
static TEMPLATE_REF: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"\$\{?([a-zA-Z0-9_\$]+)\}?").expect("a valid constant regex")
});

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
    /// stat is then exported under its escaped name, see [`escape_name`]).
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

fn parse_observer(text: Option<&str>) -> Result<Option<bool>, String> {
    // Some(true) = histogram, Some(false) = summary, None = not said.
    match text {
        None | Some("") => Ok(None),
        Some("histogram") => Ok(Some(true)),
        Some("summary") => Ok(Some(false)),
        Some(other) => Err(format!("invalid observer type '{other}'")),
    }
}

fn mapping(
    model: MappingModel,
    default_regex: bool,
    default_observer: Option<bool>,
    default_buckets: &[f64],
) -> Result<Mapping, String> {
    let mut labels = Vec::with_capacity(model.labels.len());
    for (label, value) in model.labels {
        if !LABEL_NAME.is_match(&label) {
            return Err(format!("invalid label key: {label}"));
        }
        let value = match value {
            serde_yaml_ng::Value::String(s) => s,
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            serde_yaml_ng::Value::Bool(b) => b.to_string(),
            _ => return Err(format!("label '{label}' must be a string")),
        };
        labels.push((label, value));
    }
    if model.name.is_empty() {
        return Err("metric mapping didn't set a metric name".to_owned());
    }
    if !METRIC_NAME.is_match(&model.name) {
        return Err(format!(
            "metric name '{}' is not a metric name (letters, digits, '_' and $n)",
            model.name
        ));
    }
    let regex = match model.match_type.as_deref() {
        None | Some("") => default_regex,
        Some("glob") => false,
        Some("regex") => true,
        Some(other) => return Err(format!("invalid match type \"{other}\"")),
    };
    let matcher = if regex {
        Matcher::Regex(
            Regex::new(&model.pattern)
                .map_err(|err| format!("invalid regex {} in mapping: {err}", model.pattern))?,
        )
    } else {
        if !GLOB_LINE.is_match(&model.pattern) {
            return Err(format!("invalid match: {}", model.pattern));
        }
        Matcher::Glob(
            model
                .pattern
                .split('.')
                .map(|f| (f != "*").then(|| f.to_owned()))
                .collect(),
        )
    };
    let action = match model.action.as_deref() {
        None | Some("" | "map") => Action::Map,
        Some("drop") => Action::Drop,
        Some(other) => return Err(format!("invalid action type \"{other}\"")),
    };
    let kind = match model.match_metric_type.as_deref() {
        None | Some("") => None,
        Some("counter") => Some(MetricType::Counter),
        Some("gauge") => Some(MetricType::Gauge),
        Some("observer") => Some(MetricType::Observer),
        Some(other) => return Err(format!("invalid metric type '{other}'")),
    };
    let histogram = parse_observer(
        model
            .observer_type
            .as_deref()
            .or(model.timer_type.as_deref()),
    )?
    .or(default_observer)
    .unwrap_or(false);
    let observer = if histogram {
        if model.summary_options.is_some() {
            return Err(
                "cannot use histogram observer and summary options at the same time".to_owned(),
            );
        }
        Observer::Histogram(
            model
                .histogram_options
                .and_then(|h| h.buckets)
                .or(model.buckets)
                .filter(|b| !b.is_empty())
                .unwrap_or_else(|| default_buckets.to_vec()),
        )
    } else {
        if model.histogram_options.is_some() {
            return Err(
                "cannot use summary observer and histogram options at the same time".to_owned(),
            );
        }
        Observer::Summary
    };
    Ok(Mapping {
        matcher,
        name: model.name,
        labels,
        kind,
        action,
        observer,
        scale: model.scale.unwrap_or(1.0),
        help: model.help,
    })
}

/// statsd_exporter's `EscapeMetricName`: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (a run of `-` becomes one `_`), and a leading
/// digit gets a `_` prefix.
pub fn escape_name(name: &str) -> String {
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
mod tests {
    use super::*;

    fn labels<'a>(mapped: &'a Mapped<'a>) -> Vec<(&'a str, &'a str)> {
        mapped
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn globs_capture_whole_fields_and_fill_labels() {
        let mapper = Mapper::reference_default(false);
        let m = mapper
            .map(
                "ratelimit.service.rate_limit.edge.user.total_hits",
                MetricType::Counter,
            )
            .unwrap();
        assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(labels(&m), [("domain", "edge"), ("key1", "user")]);
        // An empty field is a capture too.
        let m = mapper
            .map(
                "ratelimit.service.rate_limit.edge..near_limit",
                MetricType::Counter,
            )
            .unwrap();
        assert_eq!(labels(&m), [("domain", "edge"), ("key1", "")]);
    }

    #[test]
    fn regexes_apply_when_no_glob_matches_and_are_not_anchored() {
        let mapper = Mapper::reference_default(false);
        let m = mapper
            .map(
                "ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.path_api.over_limit",
                MetricType::Counter,
            )
            .unwrap();
        assert_eq!(m.name, "ratelimit_service_rate_limit_over_limit");
        assert_eq!(
            labels(&m),
            [
                ("domain", "edge"),
                ("key1", "remote_address_10_0_0_1"),
                ("key2", "path_api")
            ]
        );
        // Deeper keys: the optional group takes the rest, key2 is the third field.
        let m = mapper
            .map(
                "ratelimit.service.rate_limit.d.a.b.c.total_hits",
                MetricType::Counter,
            )
            .unwrap();
        assert_eq!(labels(&m), [("domain", "d"), ("key1", "a"), ("key2", "b")]);
        // A stat no mapping knows stays unmapped.
        assert!(
            mapper
                .map(
                    "ratelimit.service.rate_limit.d.k.over_limit_with_local_cache",
                    MetricType::Counter
                )
                .is_none()
        );
        assert_eq!(
            escape_name("ratelimit.service.rate_limit.d.k.over_limit_with_local_cache"),
            "ratelimit_service_rate_limit_d_k_over_limit_with_local_cache"
        );
    }

    #[test]
    fn metric_type_restricts_and_timers_are_scaled_histograms() {
        let mapper = Mapper::reference_default(false);
        let m = mapper
            .map(
                "ratelimit_server.ShouldRateLimit.total_requests",
                MetricType::Counter,
            )
            .unwrap();
        assert_eq!(m.name, "ratelimit_service_total_requests");
        assert_eq!(labels(&m), [("grpc_method", "ShouldRateLimit")]);
        assert!(
            mapper
                .map(
                    "ratelimit_server.ShouldRateLimit.total_requests",
                    MetricType::Gauge
                )
                .is_none()
        );
        let m = mapper
            .map(
                "ratelimit_server.ShouldRateLimit.response_time",
                MetricType::Observer,
            )
            .unwrap();
        assert_eq!(m.name, "ratelimit_service_response_time_seconds");
        assert_eq!(m.mapping.scale, 0.001);
        assert_eq!(
            m.mapping.observer,
            Observer::Histogram(DEFAULT_BUCKETS.to_vec())
        );
        let ms = Mapper::reference_default(true);
        let m = ms
            .map(
                "ratelimit_server.ShouldRateLimit.response_time",
                MetricType::Observer,
            )
            .unwrap();
        assert_eq!(m.mapping.scale, 1.0);
    }

    #[test]
    fn first_matching_glob_wins_and_drop_drops() {
        let mapper = Mapper::from_yaml(
            r#"
defaults:
  observer_type: histogram
  buckets: [1, 2]
mappings:
  - match: "a.*.c"
    name: "first_$1"
    help: "first"
  - match: "a.b.*"
    name: "second"
  - match: "x.*"
    name: "dropped"
    action: drop
  - match: 'y\.(\w+)\.(?P<tail>\w+)'
    match_type: regex
    name: "y_${2}_${1}"
    labels:
      tail: "$tail"
      one: "$1"
      whole: "pre_$1_post"
      num: 7
"#,
        )
        .unwrap();
        let m = mapper.map("a.b.c", MetricType::Counter).unwrap();
        assert_eq!(m.name, "first_b");
        assert_eq!(m.mapping.help.as_deref(), Some("first"));
        assert_eq!(m.mapping.observer, Observer::Histogram(vec![1.0, 2.0]));
        assert_eq!(
            mapper.map("a.b.d", MetricType::Counter).unwrap().name,
            "second"
        );
        assert_eq!(
            mapper.map("x.y", MetricType::Gauge).unwrap().mapping.action,
            Action::Drop
        );
        let m = mapper.map("pre.y.one.two", MetricType::Counter).unwrap();
        assert_eq!(m.name, "y_two_one");
        // `$1_post` names group "1_post", which does not exist: Go's rule.
        assert_eq!(
            labels(&m),
            [
                ("num", "7"),
                ("one", "one"),
                ("tail", "two"),
                ("whole", "pre_")
            ]
        );
    }

    #[test]
    fn defaults_set_the_match_type_and_observer() {
        let mapper = Mapper::from_yaml(
            "defaults:\n  match_type: regex\n  timer_type: histogram\n  histogram_options: {buckets: [5]}\nmappings:\n  - match: 'a\\.(\\w+)$'\n    name: t_$1\n",
        )
        .unwrap();
        let m = mapper.map("x.a.b", MetricType::Observer).unwrap();
        assert_eq!(m.name, "t_b");
        assert_eq!(m.mapping.observer, Observer::Histogram(vec![5.0]));
    }

    #[test]
    fn glob_templates_expand_like_statsd_exporter() {
        // statsd_exporter's reference pattern also takes `_` and `$`: `$1_$`
        // is one (non-numeric) reference and expands to nothing, as there.
        assert_eq!(expand_glob("a_$1_${2}_$3", &["x", "y"]), "a_{2}_");
        assert_eq!(expand_glob("${1}_x.$2", &["x", "y"]), "x_x.y");
        assert_eq!(expand_glob("$0$x", &["x"]), "");
        assert_eq!(expand_glob("plain", &[]), "plain");
    }

    #[test]
    fn broken_files_are_clear_errors() {
        let err = Mapper::from_yaml("mappings:\n  - match: a.b\n    name: n\n    lables: {}\n")
            .unwrap_err();
        let text = crate::telemetry::error_chain(&err);
        assert!(text.contains("unknown field `lables`"), "{text}");
        assert!(text.contains("line 4"), "{text}");
        let cases = [
            (
                "mappings:\n  - match: a.b\n",
                "mappings[0]: metric mapping didn't set a metric name",
            ),
            (
                "mappings:\n  - match: a.b\n    name: x\n  - match: 'a.b*'\n    name: y\n",
                "mappings[1]: invalid match: a.b*",
            ),
            (
                "mappings:\n  - match: '('\n    match_type: regex\n    name: x\n",
                "mappings[0]: invalid regex (",
            ),
            (
                "mappings:\n  - match: a\n    name: x\n    match_type: fuzzy\n",
                "mappings[0]: invalid match type \"fuzzy\"",
            ),
            (
                "mappings:\n  - match: a\n    name: x\n    labels: {'bad-label': v}\n",
                "mappings[0]: invalid label key: bad-label",
            ),
            (
                "mappings:\n  - match: a\n    name: 'a.b'\n",
                "mappings[0]: metric name 'a.b'",
            ),
            (
                "mappings:\n  - match: a\n    name: x\n    action: keep\n",
                "invalid action type \"keep\"",
            ),
            (
                "mappings:\n  - match: a\n    name: x\n    timer_type: gauge\n",
                "invalid observer type 'gauge'",
            ),
            (
                "defaults:\n  match_type: fuzzy\n",
                "defaults: invalid match type \"fuzzy\"",
            ),
            (
                "defaults:\n  observer_type: x\n",
                "defaults: invalid observer type 'x'",
            ),
        ];
        for (text, want) in cases {
            let err = Mapper::from_yaml(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(matches!(
            Mapper::from_yaml("mappings: 3"),
            Err(MapperError::Parse(_))
        ));
    }

    proptest::proptest! {
        /// A glob matches exactly what statsd_exporter's own regex reading
        /// of it matches (`*` as `([^.]*)`, anchored), with the same captures.
        #[test]
        fn globs_match_like_their_regex(
            fields in proptest::collection::vec("[ab]{0,2}", 1..5),
            pattern in proptest::collection::vec(proptest::prop_oneof!["\\*", "[ab]{1,2}"], 1..5),
        ) {
            let name = fields.join(".");
            let glob: Vec<Option<String>> =
                pattern.iter().map(|f| (f != "*").then(|| f.clone())).collect();
            let parts: Vec<String> = pattern
                .iter()
                .map(|f| if f == "*" { "([^.]*)".to_owned() } else { regex::escape(f) })
                .collect();
            let regex = Regex::new(&format!("^{}$", parts.join("\\."))).unwrap();
            let split: Vec<&str> = name.split('.').collect();
            let ours = glob_captures(&glob, &split);
            let theirs = regex.captures(&name).map(|c| {
                c.iter().skip(1).map(|m| m.map_or("", |m| m.as_str())).collect::<Vec<_>>()
            });
            proptest::prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn escaping_follows_statsd_exporter() {
        assert_eq!(escape_name("a.b-c--d/e"), "a_b_c_d_e");
        assert_eq!(escape_name("1abc"), "_1abc");
        assert_eq!(escape_name("ok_name"), "ok_name");
    }
}
