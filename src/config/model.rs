//! The rule-file YAML, mirrored one-to-one as serde types, plus the set of
//! keys each level of the file may contain.
//!
//! Owns: the shape of a rule file and its parsing. Must not touch: defaults,
//! meaning or cross-field rules (that is `validation`) and lookup (`index`).
//!
//! The types deliberately do **not** use `#[serde(deny_unknown_fields)]`:
//! `validation` walks the raw YAML tree against the key lists below first,
//! which reports *every* unknown key with the reference's wording
//! (`config error, unknown key 'ratelimit'`), whereas `deny_unknown_fields`
//! would stop at the first one with serde's wording. Ignoring unknown keys
//! here also lets a file with a typo still be checked for its other errors.

use serde::Deserialize;
use serde_yaml_ng::Value;

/// Keys allowed at the top of a rule file.
pub(crate) const ROOT_KEYS: &[&str] = &["domain", "descriptors"];

/// Keys allowed in a descriptor node. `rate_limits` is a floodgate extension.
pub(crate) const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "rate_limits",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "metadata",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "redact",
];

/// Keys allowed in a `rate_limit` map. `unit_multiplier`, `algorithm`,
/// `burst`, `count_rejected`, `shadow_mode`, `calendar`, `time_zone`,
/// `week_start`, `slot_key`, `release_key`, `lease`, `table`,
/// `table_key`, `store` and `partition_allowance` are floodgate extensions.
pub(crate) const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "name",
    "unlimited",
    "replaces",
    "unit_multiplier",
    "algorithm",
    "burst",
    "count_rejected",
    "shadow_mode",
    "calendar",
    "time_zone",
    "week_start",
    "slot_key",
    "release_key",
    "lease",
    "table",
    "table_key",
    "store",
    "partition_allowance",
];

/// Keys allowed in one `replaces` entry.
pub(crate) const REPLACES_KEYS: &[&str] = &["name"];

/// A whole rule file: one domain and its descriptor tree.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct File {
    /// Rule namespace; required, checked by validation.
    pub(crate) domain: Option<String>,
    /// Top-level descriptor nodes, in file order.
    pub(crate) descriptors: Option<Vec<Descriptor>>,
}

/// One descriptor node of the tree.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Descriptor {
    /// Entry key to match; required, checked by validation.
    pub(crate) key: Option<String>,
    /// Entry value to match; absent (or empty) means "any value".
    pub(crate) value: Option<String>,
    /// The limit applied when a request ends at this node.
    pub(crate) rate_limit: Option<RateLimit>,
    /// Extension: several limits on one node, all enforced.
    pub(crate) rate_limits: Option<Vec<RateLimit>>,
    /// Child nodes, matched by the next request entry.
    pub(crate) descriptors: Option<Vec<Self>>,
    /// Count but never reject.
    pub(crate) shadow_mode: Option<bool>,
    /// Soft limit, see the reference's quota mode.
    pub(crate) quota_mode: Option<bool>,
    /// Free-form data returned as dynamic metadata; keys are not checked.
    pub(crate) metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Stats key uses the runtime values of every level.
    pub(crate) detailed_metric: Option<bool>,
    /// Stats key includes the runtime value where this node matched it
    /// without an explicit value.
    pub(crate) value_to_metric: Option<bool>,
    /// All values matching this wildcard node share one counter.
    pub(crate) share_threshold: Option<bool>,
    /// Extension: the values of this node's key are secret in its domain
    /// (shown only as tags outside the counting).
    pub(crate) redact: Option<bool>,
}

/// The `rate_limit` map of a descriptor node (also the template a table
/// entry is laid over, so entries are checked as rules are).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct RateLimit {
    /// Unit name, case-insensitive.
    pub(crate) unit: Option<String>,
    /// Allowed hits per window; 0 is valid and blocks everything.
    pub(crate) requests_per_unit: Option<u32>,
    /// Optional name, the target of other rules' `replaces`.
    pub(crate) name: Option<String>,
    /// Never limited, never counted.
    pub(crate) unlimited: Option<bool>,
    /// Names of limits this one replaces within a request.
    pub(crate) replaces: Option<Vec<Replaces>>,
    /// Extension: the window is `unit * unit_multiplier`; 0 is invalid.
    pub(crate) unit_multiplier: Option<u32>,
    /// Extension: counting algorithm name.
    pub(crate) algorithm: Option<String>,
    /// Extension (gcra): hits allowed at once; defaults to `requests_per_unit`.
    pub(crate) burst: Option<u32>,
    /// Extension (sliding_window): count denied hits too.
    pub(crate) count_rejected: Option<bool>,
    /// Extension: a candidate limit, counted on its own counters but never
    /// enforced.
    pub(crate) shadow_mode: Option<bool>,
    /// Extension (fixed_window, unit day/week/month/year): windows follow
    /// the calendar of `time_zone`.
    pub(crate) calendar: Option<bool>,
    /// Extension: the IANA zone of a calendar window (default UTC).
    pub(crate) time_zone: Option<String>,
    /// Extension: the first day of a calendar week (default monday).
    pub(crate) week_start: Option<String>,
    /// Extension (concurrency): the entry holding a request's id.
    pub(crate) slot_key: Option<String>,
    /// Extension (concurrency): the entry marking a release.
    pub(crate) release_key: Option<String>,
    /// Extension (fixed_window, sliding_window, gcra on Redis): admit from
    /// blocks of hits taken from the store ahead of demand.
    pub(crate) lease: Option<bool>,
    /// Extension: the limit table whose entry, for the value of the entry
    /// `table_key` names, replaces this limit's numbers.
    pub(crate) table: Option<String>,
    /// Extension: the descriptor entry whose value keys the table (default:
    /// the rule's own key).
    pub(crate) table_key: Option<String>,
    /// Extension: the store (`STORES_FILE`) counting this limit; default
    /// `default`, the process-wide store.
    pub(crate) store: Option<String>,
    /// Extension (leased fixed windows): the share of the limit an
    /// instance cut off from the limit's store admits per window on its
    /// own, charged to the store when it is back.
    pub(crate) partition_allowance: Option<serde_json::Number>,
}

/// One `replaces` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Replaces {
    /// Name of the limit to drop.
    pub(crate) name: Option<String>,
}

/// Why a rule file could not be turned into a [`File`].
#[derive(Debug)]
pub(crate) struct ParseError {
    /// 1-based line and column, when the YAML parser knows them.
    pub(crate) location: Option<(usize, usize)>,
    /// The parser's message, without its trailing location (which goes in
    /// `location` so every issue renders it the same way).
    pub(crate) message: String,
}

impl ParseError {
    fn from_yaml(err: &serde_yaml_ng::Error) -> Self {
        let mut location = err.location().map(|loc| (loc.line(), loc.column()));
        let mut message = err.to_string();
        if let Some((line, column)) = location {
            // The parser appends " at line L column C" for the primary mark;
            // drop that one copy, keep any secondary context marks.
            let suffix = format!(" at line {line} column {column}");
            if let Some(at) = message.find(&suffix) {
                message.replace_range(at..at + suffix.len(), "");
            } else if (line, column) == (1, 1) {
                // An unset mark (e.g. for duplicate map keys) also reads as
                // 1:1 and is never printed by the parser; do not invent it.
                location = None;
            }
        }
        Self { location, message }
    }
}

/// A parsed rule file as a generic YAML tree, with `<<` merge keys applied.
#[derive(Debug)]
pub(crate) struct Document {
    /// The tree the key checks walk.
    pub(crate) tree: Value,
    /// Whether the text used `<<` merge keys, which the typed parse of the
    /// raw text would not apply.
    merged: bool,
}

/// Parses `text` as a generic YAML tree (for key checks), applying `<<`
/// merge keys as the reference's YAML library does.
///
/// # Errors
/// Syntax errors, duplicate map keys, several documents in one file, a
/// malformed merge.
pub(crate) fn parse_tree(text: &str) -> Result<Document, ParseError> {
    let mut tree: Value =
        serde_yaml_ng::from_str(text).map_err(|err| ParseError::from_yaml(&err))?;
    let merged = has_merge_key(&tree);
    if merged {
        tree.apply_merge()
            .map_err(|err| ParseError::from_yaml(&err))?;
    }
    Ok(Document { tree, merged })
}

fn has_merge_key(value: &Value) -> bool {
    match value {
        Value::Mapping(map) => map
            .iter()
            .any(|(key, value)| key.as_str() == Some("<<") || has_merge_key(value)),
        Value::Sequence(items) => items.iter().any(has_merge_key),
        Value::Tagged(tagged) => has_merge_key(&tagged.value),
        _ => false,
    }
}

/// Parses `text` (already parsed as `document`) into the typed model. An
/// empty document is an empty [`File`], so validation reports the missing
/// domain like the reference.
///
/// # Errors
/// Type mismatches such as `requests_per_unit: abc`, with their location
/// (except in files using `<<` merges: those are parsed from the merged tree,
/// whose positions no longer match the file).
pub(crate) fn parse_file(text: &str, document: &Document) -> Result<File, ParseError> {
    let parse = |text: &str| {
        serde_yaml_ng::from_str::<Option<File>>(text)
            .map(Option::unwrap_or_default)
            .map_err(|err| ParseError::from_yaml(&err))
    };
    if !document.merged {
        return parse(text);
    }
    // Going through text (not `from_value`) keeps `value: 500` readable as a
    // string, exactly as in unmerged files.
    let merged =
        serde_yaml_ng::to_string(&document.tree).map_err(|err| ParseError::from_yaml(&err))?;
    parse(&merged).map_err(|err| ParseError {
        location: None,
        message: err.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<File, ParseError> {
        parse_file(text, &parse_tree(text)?)
    }

    #[test]
    fn scalars_of_any_type_read_as_strings() {
        // The reference (yaml.v2) reads `value: 500` into its string field;
        // rule files in the wild rely on that.
        let file = parse("domain: d\ndescriptors:\n  - key: code\n    value: 500\n").unwrap();
        let descriptors = file.descriptors.unwrap();
        assert_eq!(descriptors[0].value.as_deref(), Some("500"));
    }

    #[test]
    fn empty_document_is_an_empty_file() {
        let file = parse("# nothing here\n").unwrap();
        assert!(file.domain.is_none());
        assert!(file.descriptors.is_none());
    }

    #[test]
    fn type_errors_keep_their_location() {
        let err = parse(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: abc\n",
        )
        .unwrap_err();
        assert_eq!(err.location, Some((5, 26)));
        assert_eq!(
            err.message,
            "descriptors[0].rate_limit.requests_per_unit: invalid type: string \"abc\", expected u32"
        );
    }

    #[test]
    fn syntax_errors_move_their_location_out_of_the_message() {
        let err = parse_tree("a:\n  b: 1\n c: 2\n").unwrap_err();
        assert_eq!(err.location, Some((3, 2)));
        assert_eq!(
            err.message,
            "did not find expected key, while parsing a block mapping"
        );
    }

    #[test]
    fn merge_keys_are_applied() {
        let text = "domain: d\nx: &base {unit: second, requests_per_unit: 1}\n";
        let text = format!(
            "{text}descriptors:\n  - key: k\n    value: 500\n    rate_limit:\n      <<: *base\n      name: n\n"
        );
        let document = parse_tree(&text).unwrap();
        assert!(
            document.tree["descriptors"][0]["rate_limit"]
                .get("<<")
                .is_none()
        );
        let file = parse_file(&text, &document).unwrap();
        let descriptor = &file.descriptors.unwrap()[0];
        assert_eq!(descriptor.value.as_deref(), Some("500"));
        let rate_limit = descriptor.rate_limit.as_ref().unwrap();
        assert_eq!(rate_limit.unit.as_deref(), Some("second"));
        assert_eq!(rate_limit.requests_per_unit, Some(1));
    }

    #[test]
    fn metadata_accepts_any_map() {
        let file =
            parse("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: [1, {b: c}], 2: x}\n")
                .unwrap();
        let meta = file.descriptors.unwrap()[0].metadata.clone().unwrap();
        assert_eq!(meta["a"][1]["b"], "c");
        assert_eq!(meta["2"], "x");
    }
}
