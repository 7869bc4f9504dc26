//! One state-of-the-world response -> the rule model -> a validated
//! [`Index`]. Each `RateLimitConfig` resource becomes one rule "file" named
//! after the resource, and the set goes through the same validation as rule
//! files (`validation::load_models`), so an error reads the same whichever
//! way the rules came. As in the reference, `value_to_metric`,
//! `share_threshold` and floodgate's extensions (`rate_limits`,
//! `algorithm`, …) cannot be expressed over xDS.

use crate::config::index::Index;
use crate::config::model;
use crate::config::validation::{ConfigError, LoadOptions, load_models};
use crate::proto::ratelimit::config::ratelimit::v3 as rls_conf;
use prost::Message as _;
use prost_types::value::Kind;

/// The resource type floodgate subscribes to, in every request.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Most resources (rule sets, about one per domain) one response may carry.
/// Their total size is bounded by the message size limit; this bounds the
/// count of tiny ones.
pub(crate) const MAX_RESOURCES: usize = 10_000;

/// Why a response's rules were rejected (and NACKed).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejection {
    /// More resources than [`MAX_RESOURCES`].
    #[error("response has {count} resources; at most {MAX_RESOURCES} are allowed")]
    TooManyResources {
        /// How many it had.
        count: usize,
    },
    /// A resource of another type.
    #[error("resources[{index}] has type '{type_url}', expected '{RATE_LIMIT_CONFIG_TYPE}'")]
    WrongType {
        /// Position in the response.
        index: usize,
        /// Its type.
        type_url: String,
    },
    /// A resource that does not decode as a `RateLimitConfig`.
    #[error("resources[{index}] is not a valid RateLimitConfig")]
    Decode {
        /// Position in the response.
        index: usize,
        /// The decoder's complaint.
        #[source]
        source: prost::DecodeError,
    },
    /// The rules themselves are invalid, as a rule file would be.
    #[error(transparent)]
    Invalid(ConfigError),
}

/// Longest NACK text: enough for dozens of problems, small enough that a
/// server never refuses the NACK for its size.
pub(crate) const MAX_DETAIL_BYTES: usize = 16 * 1024;

impl Rejection {
    /// The text sent back in the NACK's `error_detail`: every rule problem
    /// on its own line (as `check-config` prints them), or the error with
    /// its cause; at most [`MAX_DETAIL_BYTES`], saying how many problems
    /// did not fit.
    pub(crate) fn detail(&self) -> String {
        let mut text = match self {
            Self::Invalid(err) if !err.issues().is_empty() => {
                let issues = err.issues();
                let mut text = String::new();
                for (shown, issue) in issues.iter().enumerate() {
                    if shown > 0 && text.len() + 1 + issue.rendered.len() > MAX_DETAIL_BYTES {
                        text.push_str(&format!("\n… and {} more", issues.len() - shown));
                        break;
                    }
                    if shown > 0 {
                        text.push('\n');
                    }
                    text.push_str(&issue.rendered);
                }
                text
            }
            Self::Decode { source, .. } => format!("{self}: {source}"),
            other => other.to_string(),
        };
        if text.len() > MAX_DETAIL_BYTES {
            let mut end = MAX_DETAIL_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        text
    }
}

/// Decodes and validates the resources of one response into an index.
///
/// # Errors
/// [`Rejection`] naming the first resource that cannot be decoded, or every
/// rule problem.
pub(crate) fn index_of(
    resources: &[prost_types::Any],
    options: &LoadOptions,
) -> Result<Index, Rejection> {
    if resources.len() > MAX_RESOURCES {
        return Err(Rejection::TooManyResources {
            count: resources.len(),
        });
    }
    let mut files = Vec::with_capacity(resources.len());
    for (index, any) in resources.iter().enumerate() {
        if any.type_url != RATE_LIMIT_CONFIG_TYPE {
            return Err(Rejection::WrongType {
                index,
                type_url: any.type_url.clone(),
            });
        }
        let config = rls_conf::RateLimitConfig::decode(any.value.as_slice())
            .map_err(|source| Rejection::Decode { index, source })?;
        // The resource's name stands where a file name would; the
        // reference names errors the same way.
        let name = if config.name.is_empty() {
            format!("resources[{index}]")
        } else {
            config.name.clone()
        };
        files.push((name, file(config)));
    }
    load_models(&files, options).map_err(Rejection::Invalid)
}

/// A resource as the model of a rule file. Proto3 has no absent scalars:
/// `requests_per_unit` is always given (0 blocks, as in a file), and the
/// unit is always named (`UNKNOWN` is then rejected as an invalid unit, as
/// the reference rejects it).
fn file(config: rls_conf::RateLimitConfig) -> model::File {
    model::File {
        domain: Some(config.domain),
        descriptors: Some(descriptors(config.descriptors)),
    }
}

fn descriptors(nodes: Vec<rls_conf::RateLimitDescriptor>) -> Vec<model::Descriptor> {
    nodes
        .into_iter()
        .map(|d| model::Descriptor {
            key: Some(d.key),
            value: Some(d.value).filter(|value| !value.is_empty()),
            rate_limit: d.rate_limit.map(rate_limit),
            rate_limits: None,
            descriptors: Some(descriptors(d.descriptors)).filter(|list| !list.is_empty()),
            shadow_mode: Some(d.shadow_mode),
            quota_mode: Some(d.quota_mode),
            metadata: d.metadata.map(metadata),
            detailed_metric: Some(d.detailed_metric),
            value_to_metric: None,
            share_threshold: None,
            redact: None,
        })
        .collect()
}

fn rate_limit(policy: rls_conf::RateLimitPolicy) -> model::RateLimit {
    let unit = rls_conf::RateLimitUnit::try_from(policy.unit).map_or_else(
        |_| policy.unit.to_string(),
        |unit| unit.as_str_name().to_owned(),
    );
    model::RateLimit {
        unit: Some(unit),
        requests_per_unit: Some(policy.requests_per_unit),
        name: Some(policy.name).filter(|name| !name.is_empty()),
        unlimited: Some(policy.unlimited),
        replaces: Some(
            policy
                .replaces
                .into_iter()
                .map(|replace| model::Replaces {
                    name: Some(replace.name),
                })
                .collect(),
        ),
        unit_multiplier: None,
        algorithm: None,
        burst: None,
        count_rejected: None,
        // Candidate limits are a rule-file extension; the xDS resource
        // carries shadow mode per descriptor only.
        shadow_mode: None,
        calendar: None,
        time_zone: None,
        week_start: None,
        slot_key: None,
        release_key: None,
        lease: None,
        // The xDS resource has no table field: limit tables are a
        // rule-file extension.
        table: None,
        table_key: None,
        // Stores are a rule-file extension too: xDS rules count on the
        // process-wide store.
        store: None,
        partition_allowance: None,
    }
}

/// A protobuf `Struct` as the JSON map rule files hold metadata in.
fn metadata(value: prost_types::Struct) -> serde_json::Map<String, serde_json::Value> {
    value
        .fields
        .into_iter()
        .map(|(key, value)| (key, json(value)))
        .collect()
}

fn json(value: prost_types::Value) -> serde_json::Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(metadata(s)),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(json).collect())
        }
    }
}

/// Protobuf numbers are doubles; a whole one reads back as an integer (as
/// it would from YAML), anything else as a float, and NaN or infinity,
/// which JSON cannot hold, as null.
fn number(n: f64) -> serde_json::Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if n.fract() == 0.0 && n.abs() < EXACT {
        #[allow(clippy::cast_possible_truncation)] // whole and below 2^53
        return serde_json::Value::from(n as i64);
    }
    serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any(config: &rls_conf::RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    fn limited(
        key: &str,
        unit: rls_conf::RateLimitUnit,
        rpu: u32,
    ) -> rls_conf::RateLimitDescriptor {
        rls_conf::RateLimitDescriptor {
            key: key.to_owned(),
            rate_limit: Some(rls_conf::RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: rpu,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn config(
        name: &str,
        domain: &str,
        descriptors: Vec<rls_conf::RateLimitDescriptor>,
    ) -> rls_conf::RateLimitConfig {
        rls_conf::RateLimitConfig {
            name: name.to_owned(),
            domain: domain.to_owned(),
            descriptors,
        }
    }

    #[test]
    fn several_domains_load_into_one_index() {
        let index = index_of(
            &[
                any(&config(
                    "a",
                    "a",
                    vec![limited("k", rls_conf::RateLimitUnit::Minute, 3)],
                )),
                any(&config(
                    "b",
                    "b",
                    vec![limited("k", rls_conf::RateLimitUnit::Week, 0)],
                )),
            ],
            &LoadOptions::default(),
        )
        .unwrap();
        assert!(index.has_domain("a") && index.has_domain("b"));
        assert_eq!(index.summaries().len(), 2);
    }

    #[test]
    fn errors_read_as_for_rule_files_named_by_resource() {
        let mut bad = limited("k", rls_conf::RateLimitUnit::Unknown, 3);
        bad.descriptors = vec![limited("", rls_conf::RateLimitUnit::Second, 1)];
        let err = index_of(
            &[
                any(&config("edge-rules", "edge", vec![bad])),
                any(&config("", "", vec![])),
            ],
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.detail(),
            "edge-rules: descriptors[0] (key=k): invalid rate limit unit 'UNKNOWN'\n\
             edge-rules: descriptors[0].descriptors[0]: descriptor has empty key\n\
             resources[1]: config file cannot have empty domain"
        );
    }

    #[test]
    fn duplicate_domains_need_merge_as_for_files() {
        let resources = [
            any(&config(
                "one",
                "d",
                vec![limited("a", rls_conf::RateLimitUnit::Hour, 1)],
            )),
            any(&config(
                "two",
                "d",
                vec![limited("b", rls_conf::RateLimitUnit::Hour, 1)],
            )),
        ];
        let err = index_of(&resources, &LoadOptions::default()).unwrap_err();
        assert_eq!(err.detail(), "two: duplicate domain 'd' in config file");
        let merged = LoadOptions {
            merge_domains: true,
            ..LoadOptions::default()
        };
        let index = index_of(&resources, &merged).unwrap();
        assert_eq!(index.summaries()[0].rules, 2);
    }

    #[test]
    fn unlimited_without_unit_is_valid_and_with_one_is_not() {
        let mut unlimited = limited("u", rls_conf::RateLimitUnit::Unknown, 0);
        if let Some(policy) = unlimited.rate_limit.as_mut() {
            policy.unlimited = true;
        }
        assert!(
            index_of(
                &[any(&config("c", "d", vec![unlimited.clone()]))],
                &LoadOptions::default()
            )
            .is_ok()
        );
        if let Some(policy) = unlimited.rate_limit.as_mut() {
            policy.unit = rls_conf::RateLimitUnit::Second as i32;
        }
        let err = index_of(
            &[any(&config("c", "d", vec![unlimited]))],
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.detail(),
            "c: descriptors[0] (key=u): should not specify rate limit unit when unlimited"
        );
    }

    #[test]
    fn foreign_and_garbled_resources_are_rejected() {
        let mut wrong = any(&config("c", "d", vec![]));
        wrong.type_url = "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned();
        let err = index_of(&[wrong], &LoadOptions::default()).unwrap_err();
        assert!(
            matches!(err, Rejection::WrongType { index: 0, .. }),
            "{err}"
        );
        let garbled = prost_types::Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: vec![0xff, 0xff, 0xff],
        };
        let err = index_of(&[garbled], &LoadOptions::default()).unwrap_err();
        assert!(
            err.detail()
                .starts_with("resources[0] is not a valid RateLimitConfig: "),
            "{}",
            err.detail()
        );
    }

    #[test]
    fn nack_text_stays_bounded() {
        let empty_keys = (0..5_000)
            .map(|_| limited("", rls_conf::RateLimitUnit::Second, 1))
            .collect();
        let err = index_of(
            &[any(&config("c", "d", empty_keys))],
            &LoadOptions::default(),
        )
        .unwrap_err();
        let detail = err.detail();
        assert!(detail.len() <= MAX_DETAIL_BYTES + 64, "{}", detail.len());
        assert!(detail.starts_with("c: descriptors[0]: descriptor has empty key\n"));
        let shown = detail.lines().count() - 1;
        assert!(
            detail.ends_with(&format!("… and {} more", 5_000 - shown)),
            "{detail}"
        );

        let long_key = limited(
            &"k".repeat(MAX_DETAIL_BYTES * 2),
            rls_conf::RateLimitUnit::Unknown,
            1,
        );
        let err = index_of(
            &[any(&config("c", "d", vec![long_key]))],
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert!(err.detail().len() <= MAX_DETAIL_BYTES + '…'.len_utf8());
    }

    #[test]
    fn nesting_past_the_decoder_limit_is_rejected_not_recursed() {
        let mut node = limited("k", rls_conf::RateLimitUnit::Second, 1);
        for _ in 0..150 {
            let mut parent = limited("k", rls_conf::RateLimitUnit::Second, 1);
            parent.descriptors = vec![node];
            node = parent;
        }
        let err = index_of(
            &[any(&config("deep", "d", vec![node]))],
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, Rejection::Decode { index: 0, .. }), "{err}");
    }

    #[test]
    fn too_many_resources_are_refused_before_decoding() {
        let one = any(&config("c", "d", vec![]));
        let err = index_of(&vec![one; MAX_RESOURCES + 1], &LoadOptions::default()).unwrap_err();
        assert!(matches!(err, Rejection::TooManyResources { count } if count == MAX_RESOURCES + 1));
    }

    /// Writes `configs` as the rule files they stand for, one per
    /// resource, every field explicit as proto3 makes it.
    fn as_yaml(config: &rls_conf::RateLimitConfig) -> String {
        fn node(out: &mut String, d: &rls_conf::RateLimitDescriptor, indent: usize) {
            let pad = " ".repeat(indent);
            out.push_str(&format!("{pad}- key: \"{}\"\n", d.key));
            let pad = " ".repeat(indent + 2);
            if !d.value.is_empty() {
                out.push_str(&format!("{pad}value: \"{}\"\n", d.value));
            }
            if let Some(policy) = &d.rate_limit {
                let unit = rls_conf::RateLimitUnit::try_from(policy.unit).unwrap();
                out.push_str(&format!(
                    "{pad}rate_limit:\n{pad}  unit: {}\n{pad}  requests_per_unit: {}\n{pad}  unlimited: {}\n",
                    unit.as_str_name(),
                    policy.requests_per_unit,
                    policy.unlimited
                ));
                if !policy.name.is_empty() {
                    out.push_str(&format!("{pad}  name: \"{}\"\n", policy.name));
                }
                out.push_str(&format!("{pad}  replaces: ["));
                for replace in &policy.replaces {
                    out.push_str(&format!("{{name: \"{}\"}}, ", replace.name));
                }
                out.push_str("]\n");
            }
            out.push_str(&format!(
                "{pad}shadow_mode: {}\n{pad}quota_mode: {}\n{pad}detailed_metric: {}\n",
                d.shadow_mode, d.quota_mode, d.detailed_metric
            ));
            if !d.descriptors.is_empty() {
                out.push_str(&format!("{pad}descriptors:\n"));
                for child in &d.descriptors {
                    node(out, child, indent + 4);
                }
            }
        }
        let mut out = format!("domain: \"{}\"\ndescriptors:\n", config.domain);
        for d in &config.descriptors {
            node(&mut out, d, 2);
        }
        out
    }

    fn arb_descriptor() -> impl Strategy<Value = rls_conf::RateLimitDescriptor> {
        let name = prop_oneof![
            Just(String::new()),
            Just("n1".to_owned()),
            Just("n2".to_owned())
        ];
        let policy = (
            0i32..8,
            0u32..4,
            proptest::bool::weighted(0.15),
            name,
            proptest::collection::vec(prop_oneof![Just("n1"), Just("n2")], 0..2),
        )
            .prop_map(|(unit, requests_per_unit, unlimited, name, replaces)| {
                rls_conf::RateLimitPolicy {
                    unit,
                    requests_per_unit,
                    unlimited,
                    name,
                    replaces: replaces
                        .into_iter()
                        .map(|name| rls_conf::RateLimitReplace {
                            name: name.to_owned(),
                        })
                        .collect(),
                }
            });
        let leaf = (
            prop_oneof![4 => Just("k"), 4 => Just("j"), 1 => Just("")],
            prop_oneof![Just(""), Just("v"), Just("w*"), Just("x")],
            proptest::option::of(policy),
            proptest::arbitrary::any::<(bool, bool, bool)>(),
        )
            .prop_map(
                |(key, value, rate_limit, (shadow_mode, quota_mode, detailed_metric))| {
                    rls_conf::RateLimitDescriptor {
                        key: key.to_owned(),
                        value: value.to_owned(),
                        rate_limit,
                        shadow_mode,
                        quota_mode,
                        detailed_metric,
                        ..Default::default()
                    }
                },
            );
        leaf.prop_recursive(3, 12, 3, |inner| {
            (inner.clone(), proptest::collection::vec(inner, 0..3)).prop_map(|(mut d, children)| {
                d.descriptors = children;
                d
            })
        })
    }

    fn arb_configs() -> impl Strategy<Value = Vec<rls_conf::RateLimitConfig>> {
        proptest::collection::vec(
            (
                prop_oneof![4 => Just("a"), 4 => Just("b"), 1 => Just("")],
                proptest::collection::vec(arb_descriptor(), 0..3),
            ),
            0..3,
        )
        .prop_map(|configs| {
            configs
                .into_iter()
                .enumerate()
                .map(|(i, (domain, descriptors))| config(&format!("r{i}"), domain, descriptors))
                .collect()
        })
    }

    proptest! {
        /// xDS rules load exactly as the rule files they stand for: the
        /// same rules, or the same problems in the same words.
        #[test]
        fn xds_rules_validate_as_the_equivalent_rule_files(configs in arb_configs(), merge in proptest::arbitrary::any::<bool>()) {
            use crate::config::validation::{Source, load_sources};
            let options = LoadOptions { merge_domains: merge, ..LoadOptions::default() };
            let resources: Vec<_> = configs.iter().map(super::tests::any).collect();
            let sources: Vec<_> = configs
                .iter()
                .map(|c| Source { name: c.name.clone(), text: as_yaml(c) })
                .collect();
            match (index_of(&resources, &options), load_sources(&sources, &options)) {
                (Ok(xds), Ok(files)) => {
                    prop_assert_eq!(xds.summaries(), files.summaries());
                    prop_assert_eq!(xds.rules().collect::<Vec<_>>(), files.rules().collect::<Vec<_>>());
                }
                (Err(Rejection::Invalid(xds)), Err(files)) => {
                    prop_assert_eq!(xds.issues(), files.issues());
                }
                (xds, files) => prop_assert!(false, "xds {:?} vs files {:?}\n{}", xds.err(), files.err(), sources.iter().map(|s| s.text.as_str()).collect::<String>()),
            }
        }
    }

    #[test]
    fn metadata_becomes_the_json_rule_files_hold() {
        use prost_types::{ListValue, Struct, Value};
        let value = |kind| Value { kind: Some(kind) };
        let mut d = limited("k", rls_conf::RateLimitUnit::Second, 1);
        d.metadata = Some(Struct {
            fields: [
                ("n".to_owned(), value(Kind::NumberValue(3.0))),
                ("f".to_owned(), value(Kind::NumberValue(0.5))),
                ("s".to_owned(), value(Kind::StringValue("x".to_owned()))),
                (
                    "l".to_owned(),
                    value(Kind::ListValue(ListValue {
                        values: vec![value(Kind::BoolValue(true)), Value { kind: None }],
                    })),
                ),
            ]
            .into_iter()
            .collect(),
        });
        let model = descriptors(vec![d]);
        let meta = serde_json::Value::Object(model[0].metadata.clone().unwrap());
        assert_eq!(
            meta,
            serde_json::json!({"n": 3, "f": 0.5, "s": "x", "l": [true, null]})
        );
    }
}
