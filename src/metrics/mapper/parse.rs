//! Reading a mapping file: the YAML document as statsd_exporter's structs
//! spell it, and its checks, into [`Mapping`]s.

use super::*;
use regex::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::LazyLock;

// --- the document, as statsd_exporter's structs spell it ---------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Document {
    #[serde(default)]
    pub(super) defaults: Defaults,
    #[serde(default)]
    pub(super) mappings: Vec<MappingModel>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Defaults {
    pub(super) observer_type: Option<String>,
    pub(super) timer_type: Option<String>,
    pub(super) match_type: Option<String>,
    #[allow(dead_code)] // accepted, without effect: first match always wins
    pub(super) glob_disable_ordering: Option<bool>,
    #[allow(dead_code)] // accepted: series never expire here
    pub(super) ttl: Option<serde_yaml_ng::Value>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    pub(super) summary_options: Option<serde_yaml_ng::Value>,
    pub(super) histogram_options: Option<HistogramOptions>,
    pub(super) buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    pub(super) quantiles: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistogramOptions {
    pub(super) buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: native histograms are not exported
    pub(super) native_histogram_bucket_factor: Option<f64>,
    #[allow(dead_code)] // accepted: native histograms are not exported
    pub(super) native_histogram_max_buckets: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MappingModel {
    #[serde(rename = "match", default)]
    pub(super) pattern: String,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, serde_yaml_ng::Value>,
    #[allow(dead_code)] // accepted: stats carry no labels of their own here
    pub(super) honor_labels: Option<bool>,
    pub(super) observer_type: Option<String>,
    pub(super) timer_type: Option<String>,
    pub(super) buckets: Option<Vec<f64>>,
    #[allow(dead_code)] // accepted: summaries export only _sum and _count
    pub(super) quantiles: Option<serde_yaml_ng::Value>,
    pub(super) match_type: Option<String>,
    pub(super) help: Option<String>,
    pub(super) action: Option<String>,
    pub(super) match_metric_type: Option<String>,
    #[allow(dead_code)] // accepted: series never expire here
    pub(super) ttl: Option<serde_yaml_ng::Value>,
    pub(super) summary_options: Option<serde_yaml_ng::Value>,
    pub(super) histogram_options: Option<HistogramOptions>,
    pub(super) scale: Option<f64>,
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
pub(super) static TEMPLATE_REF: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"\$\{?([a-zA-Z0-9_\$]+)\}?").expect("a valid constant regex")
});

pub(super) fn parse_observer(text: Option<&str>) -> Result<Option<bool>, String> {
    // Some(true) = histogram, Some(false) = summary, None = not said.
    match text {
        None | Some("") => Ok(None),
        Some("histogram") => Ok(Some(true)),
        Some("summary") => Ok(Some(false)),
        Some(other) => Err(format!("invalid observer type '{other}'")),
    }
}

pub(super) fn mapping(
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
