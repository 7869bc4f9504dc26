//! `RESPONSE_DYNAMIC_METADATA`: the `dynamic_metadata` Struct of a response,
//! shaped as the reference's `ratelimitToMetadata` shapes it, so Envoy can
//! log it and route on it (`envoy.filters.http.ratelimit` namespace):
//!
//! - `domain`: the request's domain;
//! - `descriptors`: one `{entries: ["k=v", …], limit?, hitsAddend?}` per
//!   request descriptor, in request order;
//! - `hitsAddend`: the request's, when not 0;
//! - `metadata`: the rule `metadata` of every descriptor that passed, merged
//!   in request order: the first value of a key wins, and two maps under one
//!   key merge key by key, recursively. Absent when nothing was merged.
//!
//! Rule metadata is converted here, once per answered request, straight into
//! the output; nothing is done when the setting is off. Unlike the
//! reference, merging never writes into the loaded rules.

use crate::config::Metadata;
use crate::descriptor::{Descriptor, Request};
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The `dynamic_metadata` of an answer to `request`, with `passed` the
/// metadata of the rules whose descriptors passed, in request order.
pub(crate) fn dynamic_metadata(request: &Request, passed: &[Arc<Metadata>]) -> Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_owned(), string(request.domain.clone()));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert(
        "descriptors".to_owned(),
        kind(Kind::ListValue(ListValue {
            values: descriptors,
        })),
    );
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            kind(Kind::NumberValue(f64::from(request.hits_addend))),
        );
    }
    let merged = merge(passed);
    if !merged.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            kind(Kind::StructValue(Struct { fields: merged })),
        );
    }
    Struct { fields }
}

/// Merges rule metadata in order: first value wins; maps merge recursively.
fn merge(passed: &[Arc<Metadata>]) -> BTreeMap<String, Value> {
    let mut merged = BTreeMap::new();
    for metadata in passed {
        merge_into(&mut merged, metadata);
    }
    merged
}

fn merge_into(dest: &mut BTreeMap<String, Value>, src: &Metadata) {
    for (key, value) in src {
        match dest.get_mut(key) {
            None => {
                dest.insert(key.clone(), to_value(value));
            }
            Some(Value {
                kind: Some(Kind::StructValue(existing)),
            }) => {
                if let serde_json::Value::Object(map) = value {
                    merge_into(&mut existing.fields, map);
                }
            }
            // A value already there wins.
            Some(_) => {}
        }
    }
}

/// One request descriptor as the reference describes it.
fn descriptor(descriptor: &Descriptor) -> Value {
    let mut fields = BTreeMap::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|e| string(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert(
        "entries".to_owned(),
        kind(Kind::ListValue(ListValue { values: entries })),
    );
    if let Some(limit) = &descriptor.limit {
        // The override in protobuf text form, as the reference prints it;
        // a zero requests_per_unit is a default value, so it is left out.
        let text = if limit.requests_per_unit == 0 {
            format!("unit:{}", limit.unit.proto_name())
        } else {
            format!(
                "requests_per_unit:{} unit:{}",
                limit.requests_per_unit,
                limit.unit.proto_name()
            )
        };
        fields.insert("limit".to_owned(), string(text));
    }
    if let Some(hits) = descriptor.hits_addend {
        // JSON numbers are doubles, in the reference as on the wire.
        #[allow(clippy::cast_precision_loss)]
        let hits = hits as f64;
        fields.insert("hitsAddend".to_owned(), kind(Kind::NumberValue(hits)));
    }
    kind(Kind::StructValue(Struct { fields }))
}

/// A rule-file (JSON) value as a protobuf `Value`.
fn to_value(value: &serde_json::Value) -> Value {
    kind(match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        serde_json::Value::Object(map) => Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
        }),
    })
}

const fn kind(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn string(text: String) -> Value {
    kind(Kind::StringValue(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{Entry, RateLimitOverride, Unit};
    use proptest::prelude::*;
    use serde_json::json;

    /// The merge, said another way: a key takes its first value; when that
    /// value is a map, it is the merge of every map under the key, in order
    /// (values that are not maps are ignored after a map).
    fn model(inputs: &[&Metadata]) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (i, input) in inputs.iter().enumerate() {
            for key in input.keys() {
                if out.contains_key(key) || inputs[..i].iter().any(|m| m.contains_key(key)) {
                    continue;
                }
                let values = inputs.iter().filter_map(|m| m.get(key));
                let merged = match &input[key] {
                    serde_json::Value::Object(_) => {
                        let maps: Vec<&Metadata> =
                            values.filter_map(serde_json::Value::as_object).collect();
                        model(&maps)
                    }
                    first => first.clone(),
                };
                out.insert(key.clone(), merged);
            }
        }
        serde_json::Value::Object(out)
    }

    fn to_json(value: &Value) -> serde_json::Value {
        match &value.kind {
            Some(Kind::StructValue(s)) => serde_json::Value::Object(
                s.fields
                    .iter()
                    .map(|(k, v)| (k.clone(), to_json(v)))
                    .collect(),
            ),
            Some(Kind::ListValue(l)) => {
                serde_json::Value::Array(l.values.iter().map(to_json).collect())
            }
            Some(Kind::StringValue(s)) => json!(s),
            Some(Kind::NumberValue(n)) => json!(n),
            Some(Kind::BoolValue(b)) => json!(b),
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        }
    }

    /// Integers as doubles, as the output holds every number.
    fn doubled(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Number(n) => json!(n.as_f64().unwrap()),
            serde_json::Value::Array(a) => a.iter().map(doubled).collect(),
            serde_json::Value::Object(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), doubled(v))).collect())
            }
            other => other.clone(),
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            (-5i64..5).prop_map(serde_json::Value::from),
            "[xy]{0,2}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[abc]", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn metadata_map() -> impl Strategy<Value = Metadata> {
        prop::collection::btree_map("[abc]", json_value(), 0..4)
            .prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #[test]
        fn merge_matches_the_model(inputs in prop::collection::vec(metadata_map(), 0..5)) {
            let shared: Vec<Arc<Metadata>> = inputs.iter().cloned().map(Arc::new).collect();
            let merged = merge(&shared);
            let got = to_json(&kind(Kind::StructValue(Struct { fields: merged })));
            let refs: Vec<&Metadata> = inputs.iter().collect();
            prop_assert_eq!(got, doubled(&model(&refs)));
            // The rules are never written.
            let again: Vec<Metadata> = shared.iter().map(|m| (**m).clone()).collect();
            prop_assert_eq!(again, inputs);
        }
    }

    fn meta(value: serde_json::Value) -> Arc<Metadata> {
        match value {
            serde_json::Value::Object(map) => Arc::new(map),
            other => panic!("not a map: {other}"),
        }
    }

    fn field<'a>(fields: &'a BTreeMap<String, Value>, key: &str) -> &'a Kind {
        fields[key].kind.as_ref().unwrap()
    }

    #[test]
    fn first_value_wins_and_maps_merge_recursively() {
        let merged = merge(&[
            meta(json!({"service": "a", "nested": {"x": 1, "deep": {"p": true}}, "list": [1]})),
            meta(
                json!({"service": "b", "nested": {"x": 2, "y": "new", "deep": {"q": null}}, "list": [2], "extra": 3}),
            ),
            meta(json!({"nested": "not a map", "service": {"m": 1}})),
        ]);
        assert_eq!(field(&merged, "service"), &Kind::StringValue("a".into()));
        assert_eq!(field(&merged, "extra"), &Kind::NumberValue(3.0));
        let Kind::ListValue(list) = field(&merged, "list") else {
            panic!("list")
        };
        assert_eq!(list.values, vec![kind(Kind::NumberValue(1.0))]);
        let Kind::StructValue(nested) = field(&merged, "nested") else {
            panic!("nested")
        };
        assert_eq!(field(&nested.fields, "x"), &Kind::NumberValue(1.0));
        assert_eq!(field(&nested.fields, "y"), &Kind::StringValue("new".into()));
        let Kind::StructValue(deep) = field(&nested.fields, "deep") else {
            panic!("deep")
        };
        assert_eq!(field(&deep.fields, "p"), &Kind::BoolValue(true));
        assert_eq!(field(&deep.fields, "q"), &Kind::NullValue(0));
    }

    #[test]
    fn merging_leaves_the_rules_untouched() {
        let first = meta(json!({"nested": {"x": 1}}));
        let second = meta(json!({"nested": {"y": 2}}));
        let before = first.clone();
        let merged = merge(&[first.clone(), second]);
        assert_eq!(first, before);
        assert_eq!(merge(&[first]).len(), 1);
        let Kind::StructValue(nested) = field(&merged, "nested") else {
            panic!("nested")
        };
        assert_eq!(nested.fields.len(), 2);
    }

    #[test]
    fn describes_the_request_as_the_reference_does() {
        let request = Request {
            domain: "edge".into(),
            descriptors: vec![
                Descriptor {
                    entries: vec![Entry::new("k", "v"), Entry::new("k2", "")],
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 10,
                        unit: Unit::Minute,
                    }),
                    hits_addend: Some(3),
                },
                Descriptor::from_pairs([("a", "b")]),
            ],
            hits_addend: 2,
        };
        let out = dynamic_metadata(&request, &[]);
        assert_eq!(
            field(&out.fields, "domain"),
            &Kind::StringValue("edge".into())
        );
        assert_eq!(field(&out.fields, "hitsAddend"), &Kind::NumberValue(2.0));
        assert!(!out.fields.contains_key("metadata"));
        let Kind::ListValue(list) = field(&out.fields, "descriptors") else {
            panic!("descriptors")
        };
        assert_eq!(list.values.len(), 2);
        let Some(Kind::StructValue(first)) = &list.values[0].kind else {
            panic!("first")
        };
        let Kind::ListValue(entries) = field(&first.fields, "entries") else {
            panic!("entries")
        };
        assert_eq!(
            entries.values,
            vec![string("k=v".into()), string("k2=".into())]
        );
        assert_eq!(
            field(&first.fields, "limit"),
            &Kind::StringValue("requests_per_unit:10 unit:MINUTE".into())
        );
        assert_eq!(field(&first.fields, "hitsAddend"), &Kind::NumberValue(3.0));
        let Some(Kind::StructValue(second)) = &list.values[1].kind else {
            panic!("second")
        };
        assert_eq!(second.fields.len(), 1, "no limit, no hitsAddend");

        let with = dynamic_metadata(
            &Request {
                hits_addend: 0,
                ..request
            },
            &[meta(json!({"route": "blue"}))],
        );
        assert!(!with.fields.contains_key("hitsAddend"));
        let Kind::StructValue(merged) = field(&with.fields, "metadata") else {
            panic!("metadata")
        };
        assert_eq!(
            field(&merged.fields, "route"),
            &Kind::StringValue("blue".into())
        );
    }
}
