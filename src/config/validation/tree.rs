//! The descriptor tree: rule nodes built while loading, checked for
//! duplicate composite keys, then frozen into the index's levels.

use super::*;
/// A descriptor node before freezing into the index.
#[derive(Debug)]
pub(super) struct BuildNode {
    key: String,
    value: Option<String>,
    rule: Option<Rule>,
    share_threshold: bool,
    /// `redact: true`: the values of `key` are secret in the domain.
    redact: bool,
    children: BuildLevel,
}

/// The nodes of one level, in config order, plus what makes a duplicate.
#[derive(Debug, Default)]
pub(super) struct BuildLevel {
    nodes: Vec<BuildNode>,
    seen: HashSet<(String, Option<String>)>,
}

#[derive(Debug)]
pub(super) struct BuildDomain {
    pub(super) name: String,
    pub(super) root: BuildLevel,
}

/// Turns a build level into the lookup structure. Rules are numbered in
/// pre-order, i.e. config order; the keys of `redact: true` nodes are added
/// to `secret_keys` once each.
pub(super) fn freeze(
    level: BuildLevel,
    rules: &mut Vec<Rule>,
    node_count: &mut usize,
    secret_keys: &mut Vec<Box<str>>,
) -> Level {
    let mut out = Level::default();
    for node in level.nodes {
        *node_count += 1;
        if node.redact && !secret_keys.iter().any(|k| **k == *node.key) {
            secret_keys.push(node.key.as_str().into());
        }
        let rule = node.rule.map(|rule| {
            rules.push(rule);
            rules.len() - 1
        });
        let share_pattern = node
            .value
            .as_deref()
            .filter(|_| node.share_threshold)
            .map(Box::from);
        let children = freeze(node.children, rules, node_count, secret_keys);
        out.insert(
            &node.key,
            node.value.as_deref(),
            Node {
                rule,
                share_pattern,
                children,
            },
        );
    }
    out
}

/// Validates `descriptors` (whose raw YAML list is `raw`) into `level`.
///
/// `prefix` is the reference's key of the parent plus `.`; `ancestors` the
/// path steps above this level.
pub(super) fn add_descriptors(
    check: &mut FileCheck<'_>,
    level: &mut BuildLevel,
    descriptors: &[model::Descriptor],
    raw: Option<&Value>,
    parent: &Place<'_>,
    prefix: &str,
    ancestors: &mut Vec<PathStep>,
) {
    let raw_items = raw.and_then(Value::as_sequence);
    for (index, descriptor) in descriptors.iter().enumerate() {
        let raw_item = raw_items.and_then(|items| items.get(index));
        let key = descriptor.key.as_deref().unwrap_or_default();
        // An empty value is the same as none: a default node.
        let value = descriptor
            .value
            .as_deref()
            .filter(|value| !value.is_empty());
        let place = Place {
            at: if parent.at.is_empty() {
                format!("descriptors[{index}]")
            } else {
                format!("{}.descriptors[{index}]", parent.at)
            },
            key: Some(key),
            value,
        };
        let here = place.render("");
        if let Some(raw_item) = raw_item {
            check_keys(check, raw_item, MapKind::Descriptor, &place, "", false);
        }

        let segment = match value {
            Some(value) => format!("{key}_{value}"),
            None => key.to_owned(),
        };
        let full_key = format!("{prefix}{segment}");
        let mut keep = true;
        if key.is_empty() {
            check.issue(&here, "descriptor has empty key");
            keep = false;
        } else if !level
            .seen
            .insert((key.to_owned(), value.map(str::to_owned)))
        {
            check.issue(
                &here,
                format!("duplicate descriptor composite key '{full_key}'"),
            );
            keep = false;
        }

        let share_threshold = descriptor.share_threshold.unwrap_or(false);
        if share_threshold && !value.is_some_and(|value| value.contains('*')) {
            check.issue(
                &here,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{segment}'"
                ),
            );
        }
        if descriptor.rate_limit.is_some() && descriptor.rate_limits.is_some() {
            check.issue(&here, "use either rate_limit or rate_limits, not both");
        }

        ancestors.push(PathStep {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            value_to_metric: descriptor.value_to_metric.unwrap_or(false),
            share_threshold,
        });
        let checked = match (&descriptor.rate_limit, &descriptor.rate_limits) {
            (Some(rate_limit), None) => check_rate_limit(check, rate_limit, &place, ".rate_limit"),
            (None, Some(rate_limits)) => check_rate_limits(check, rate_limits, &place),
            _ => None,
        };
        let table = check_table(check, descriptor, key, &place);
        let rule = checked.map(|(policy, replaces)| Rule {
            table,
            specs: match &policy {
                Policy::Limited(limits) => crate::config::specs(limits),
                Policy::Unlimited { .. } => Vec::new(),
            },
            full_key: full_key.clone(),
            policy,
            replaces,
            shadow_mode: descriptor.shadow_mode.unwrap_or(false),
            quota_mode: descriptor.quota_mode.unwrap_or(false),
            metadata: descriptor
                .metadata
                .as_ref()
                .filter(|meta| !meta.is_empty())
                .map(|meta| Arc::new(meta.clone())),
            domain: check.domain.to_owned(),
            detailed_metric: descriptor.detailed_metric.unwrap_or(false),
            value_to_metric: descriptor.value_to_metric.unwrap_or(false),
            path: ancestors.clone(),
        });
        let mut children = BuildLevel::default();
        add_descriptors(
            check,
            &mut children,
            descriptor.descriptors.as_deref().unwrap_or_default(),
            raw_item.and_then(|item| item.get("descriptors")),
            &place,
            &format!("{full_key}."),
            ancestors,
        );
        ancestors.pop();

        if keep {
            level.nodes.push(BuildNode {
                key: key.to_owned(),
                value: value.map(str::to_owned),
                rule,
                share_threshold,
                redact: descriptor.redact.unwrap_or(false),
                children,
            });
        }
    }
}
