//! The unknown-key check: every map of a rule file may hold only the keys
//! its kind allows (a typo such as `ratelimit:` is an error).

use super::*;
/// The kinds of YAML maps in a rule file, each with its own allowed keys.
#[derive(Debug, Clone, Copy)]
pub(super) enum MapKind {
    Root,
    Descriptor,
    RateLimit,
    Replaces,
}

impl MapKind {
    fn allowed(self) -> &'static [&'static str] {
        match self {
            Self::Root => ROOT_KEYS,
            Self::Descriptor => DESCRIPTOR_KEYS,
            Self::RateLimit => RATE_LIMIT_KEYS,
            Self::Replaces => REPLACES_KEYS,
        }
    }
}

/// Reports unknown and non-string keys of `map` (at `place` + `suffix`),
/// descending into its `rate_limit(s)` and `replaces`, and into child
/// `descriptors` only when `deep` (otherwise the descriptor walk visits them,
/// which keeps issues in document order). `metadata` is free-form. Values of
/// the wrong type are left to serde, which knows their line.
pub(super) fn check_keys(
    check: &mut FileCheck<'_>,
    map: &Value,
    kind: MapKind,
    place: &Place<'_>,
    suffix: &str,
    deep: bool,
) {
    let Some(mapping) = map.as_mapping() else {
        return;
    };
    let here = place.render(suffix);
    for (key, value) in mapping {
        let Some(name) = key.as_str() else {
            check.issue(
                &here,
                format!("config error, key is not of type string: {}", go_text(key)),
            );
            continue;
        };
        if !kind.allowed().contains(&name) {
            check.issue(&here, format!("config error, unknown key '{name}'"));
            continue;
        }
        let list = |check: &mut FileCheck<'_>, at: &str, kind: MapKind| {
            for (index, item) in value.as_sequence().into_iter().flatten().enumerate() {
                let suffix = format!("{suffix}.{at}[{index}]");
                if item.is_mapping() {
                    check_keys(check, item, kind, place, &suffix, deep);
                } else {
                    check.issue(
                        &place.render(&suffix),
                        format!(
                            "config error, yaml file contains list of type other than map: {}",
                            go_text(item)
                        ),
                    );
                }
            }
        };
        match (kind, name) {
            (MapKind::Root | MapKind::Descriptor, "descriptors") if deep => {
                for (index, item) in value.as_sequence().into_iter().flatten().enumerate() {
                    let child = Place {
                        at: if place.at.is_empty() {
                            format!("descriptors[{index}]")
                        } else {
                            format!("{}.descriptors[{index}]", place.at)
                        },
                        key: item.get("key").and_then(Value::as_str),
                        value: item.get("value").and_then(Value::as_str),
                    };
                    if item.is_mapping() {
                        check_keys(check, item, MapKind::Descriptor, &child, "", deep);
                    } else {
                        check.issue(
                            &child.at,
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                go_text(item)
                            ),
                        );
                    }
                }
            }
            (MapKind::Descriptor, "rate_limit") => {
                check_keys(check, value, MapKind::RateLimit, place, ".rate_limit", deep);
            }
            (MapKind::Descriptor, "rate_limits") => list(check, "rate_limits", MapKind::RateLimit),
            (MapKind::RateLimit, "replaces") => list(check, "replaces", MapKind::Replaces),
            _ => {}
        }
    }
}

/// A YAML value as Go's `%v` prints it, which is how the reference shows
/// offending keys and list items.
pub(super) fn go_text(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => {
            let items: Vec<_> = items.iter().map(go_text).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Mapping(map) => {
            let pairs: Vec<_> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_text(k), go_text(v)))
                .collect();
            format!("map[{}]", pairs.join(" "))
        }
        Value::Tagged(tagged) => format!("{} {}", tagged.tag, go_text(&tagged.value)),
    }
}
