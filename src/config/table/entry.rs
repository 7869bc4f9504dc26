//! One entry of a limit table: its JSON shape, read field by field so that
//! every problem names its field, and what it becomes for a rule reading
//! the table: the rule's limits as written with the entry's numbers laid
//! over them, checked exactly as rule files are
//! ([`check_limits`](crate::config::validation::check_limits)), its store
//! operations built once.

use crate::algorithm::{MAX_LIMITS, Spec};
use crate::config::model::RateLimit;
use crate::config::rule::{Limit, Policy, TableUse};
use crate::config::specs::specs;
use crate::config::validation::check_limits;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The fields of one window of an entry, in error messages.
const WINDOW_FIELDS: &str = "requests_per_unit, unit, unit_multiplier, burst, name";

/// The numbers of one window of an entry; an absent field is the rule's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Window {
    /// Allowed hits per window (required; 0 blocks every request).
    pub requests_per_unit: u32,
    /// Unit name, as in rule files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Units in one window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit_multiplier: Option<u32>,
    /// gcra: hits allowed at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// The limit's name in answers (`current_limit.name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One entry of a limit table, as the API takes and shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum TableEntry {
    /// `{"unlimited": true}`: never limited, never counted.
    Unlimited {
        /// Always true.
        unlimited: bool,
    },
    /// `{"rate_limits": [...]}`, for rules written with `rate_limits`.
    Windows {
        /// The windows, laid over the rule's by position.
        rate_limits: Vec<Window>,
    },
    /// One window, for rules written with `rate_limit`.
    One(Window),
}

impl<'de> Deserialize<'de> for TableEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_json(&value).map_err(|problems| serde::de::Error::custom(problems.join("; ")))
    }
}

/// What an entry means for one rule reading its table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    /// Never limited, never counted.
    Unlimited,
    /// These limits, with their store operations.
    Limited {
        /// Never empty.
        limits: Vec<Limit>,
        /// Built once, when the entry was put.
        specs: Vec<(Spec, usize)>,
    },
}

impl TableEntry {
    /// Reads an entry from JSON.
    ///
    /// # Errors
    /// Every problem, each naming its field (`entry.unit: ...`,
    /// `entry.rate_limits[1].requests_per_unit: ...`).
    pub fn from_json(value: &Value) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let Some(map) = value.as_object() else {
            return Err(vec!["entry: expected a JSON object".to_owned()]);
        };
        let entry = if map.contains_key("unlimited") {
            if map.get("unlimited") != Some(&Value::Bool(true)) {
                problems.push(
                    "entry.unlimited: expected true (leave the field out for a limit)".to_owned(),
                );
            }
            for key in map.keys().filter(|key| *key != "unlimited") {
                problems.push(format!("entry.{key}: not allowed with unlimited"));
            }
            Some(Self::Unlimited { unlimited: true })
        } else if let Some(list) = map.get("rate_limits") {
            for key in map.keys().filter(|key| *key != "rate_limits") {
                problems.push(format!(
                    "entry.{key}: not allowed with rate_limits (each window carries its own)"
                ));
            }
            match list.as_array() {
                None => {
                    problems.push("entry.rate_limits: expected a list of windows".to_owned());
                    None
                }
                Some(items) => {
                    if items.is_empty() || items.len() > MAX_LIMITS {
                        problems.push(format!(
                            "entry.rate_limits: lists {} windows; 1 to {MAX_LIMITS} are allowed",
                            items.len()
                        ));
                    }
                    let windows: Vec<Option<Window>> = items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| {
                            Window::from_json(
                                item,
                                &format!("entry.rate_limits[{i}]"),
                                &mut problems,
                            )
                        })
                        .collect();
                    windows
                        .into_iter()
                        .collect::<Option<Vec<_>>>()
                        .map(|rate_limits| Self::Windows { rate_limits })
                }
            }
        } else {
            Window::from_json(value, "entry", &mut problems).map(Self::One)
        };
        match entry {
            Some(entry) if problems.is_empty() => Ok(entry),
            _ => Err(problems),
        }
    }

    /// What this entry means for the rule `rule`: the rule's limits as
    /// written with the entry's numbers laid over them (window `i` over
    /// the rule's `i`-th, else its first), checked as rules are.
    ///
    /// # Errors
    /// Every problem, each naming its field.
    pub(crate) fn resolve(&self, rule: &TableUse) -> Result<Resolved, Vec<String>> {
        let windows = match self {
            Self::Unlimited { .. } => return Ok(Resolved::Unlimited),
            Self::One(window) if !rule.several => std::slice::from_ref(window),
            Self::Windows { rate_limits } if rule.several => rate_limits.as_slice(),
            Self::One(_) => {
                return Err(vec![
                    "entry: its rules list rate_limits: give {\"rate_limits\": [...]}".to_owned(),
                ]);
            }
            Self::Windows { .. } => {
                return Err(vec![
                    "entry.rate_limits: its rules have one rate_limit: give the window's fields at the top".to_owned(),
                ]);
            }
        };
        let items: Vec<RateLimit> = windows
            .iter()
            .enumerate()
            .map(|(i, window)| {
                let base = rule.template.get(i).or(rule.template.first());
                window.lay_over(base.cloned().unwrap_or_default())
            })
            .collect();
        match check_limits(&items, rule.several, &rule.stores)? {
            Policy::Unlimited { .. } => Ok(Resolved::Unlimited),
            Policy::Limited(limits) => Ok(Resolved::Limited {
                specs: specs(&limits),
                limits,
            }),
        }
    }

    /// Checks an entry of a table no rule reads yet: each window alone, as
    /// a fixed window of one second (a gcra limit when it gives a burst)
    /// where it gives no unit, so that what it does give is checked.
    ///
    /// # Errors
    /// Every problem, each naming its field.
    pub(crate) fn check_alone(&self) -> Result<(), Vec<String>> {
        let windows = match self {
            Self::Unlimited { .. } => return Ok(()),
            Self::One(window) => std::slice::from_ref(window),
            Self::Windows { rate_limits } => rate_limits.as_slice(),
        };
        let mut problems = Vec::new();
        for (i, window) in windows.iter().enumerate() {
            let base = RateLimit {
                unit: Some("second".to_owned()),
                algorithm: window.burst.map(|_| "gcra".to_owned()),
                ..RateLimit::default()
            };
            if let Err(mut more) = check_limits(&[window.lay_over(base)], false, &[]) {
                if let Self::Windows { .. } = self {
                    for problem in &mut more {
                        if let Some(rest) = problem.strip_prefix("entry") {
                            *problem = format!("entry.rate_limits[{i}]{rest}");
                        }
                    }
                }
                problems.append(&mut more);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

impl Window {
    /// Reads one window at `at` (`entry`, `entry.rate_limits[i]`); `None`
    /// when it has a problem (pushed to `problems`).
    fn from_json(value: &Value, at: &str, problems: &mut Vec<String>) -> Option<Self> {
        let Some(map) = value.as_object() else {
            problems.push(format!("{at}: expected a JSON object"));
            return None;
        };
        let before = problems.len();
        let mut window = Self::default();
        let mut requests = None;
        let number = |key: &str, value: &Value, problems: &mut Vec<String>| {
            let number = value.as_u64().and_then(|n| u32::try_from(n).ok());
            if number.is_none() {
                problems.push(format!(
                    "{at}.{key}: expected a whole number from 0 to {}",
                    u32::MAX
                ));
            }
            number
        };
        let text = |key: &str, value: &Value, problems: &mut Vec<String>| {
            let text = value.as_str().map(str::to_owned);
            if text.is_none() {
                problems.push(format!("{at}.{key}: expected a string"));
            }
            text
        };
        for (key, value) in map {
            match key.as_str() {
                "requests_per_unit" => requests = number(key, value, problems),
                "unit" => window.unit = text(key, value, problems),
                "unit_multiplier" => window.unit_multiplier = number(key, value, problems),
                "burst" => window.burst = number(key, value, problems),
                "name" => window.name = text(key, value, problems),
                _ => problems.push(format!(
                    "{at}.{key}: unknown field (a window has {WINDOW_FIELDS}; an entry may instead be {{\"unlimited\": true}} or {{\"rate_limits\": [...]}})"
                )),
            }
        }
        match requests {
            Some(requests) => window.requests_per_unit = requests,
            None if !map.contains_key("requests_per_unit") => problems.push(format!(
                "{at}.requests_per_unit: missing (0 is allowed and blocks every request)"
            )),
            None => {}
        }
        (problems.len() == before).then_some(window)
    }

    /// `base` (a rule's limit as written) with this window's numbers.
    fn lay_over(&self, mut base: RateLimit) -> RateLimit {
        base.requests_per_unit = Some(self.requests_per_unit);
        if let Some(unit) = &self.unit {
            base.unit = Some(unit.clone());
        }
        if let Some(multiplier) = self.unit_multiplier {
            base.unit_multiplier = Some(multiplier);
        }
        if let Some(burst) = self.burst {
            base.burst = Some(burst);
        }
        if let Some(name) = &self.name {
            base.name = Some(name.clone());
        }
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn rule(template: Value, several: bool) -> TableUse {
        let template: Vec<RateLimit> = if several {
            template
                .as_array()
                .unwrap()
                .iter()
                .map(|t| serde_json::from_value(t.clone()).unwrap())
                .collect()
        } else {
            vec![serde_json::from_value(template).unwrap()]
        };
        TableUse {
            name: Arc::from("plans"),
            key: Arc::from("tenant"),
            template,
            several,
            stores: Vec::new(),
        }
    }

    fn problems(value: &Value) -> Vec<String> {
        TableEntry::from_json(value).unwrap_err()
    }

    #[test]
    fn every_problem_names_its_field() {
        assert_eq!(
            problems(&json!({"requests_per_unit": -1, "unit": 5, "units": "minute"})),
            [
                "entry.requests_per_unit: expected a whole number from 0 to 4294967295",
                "entry.unit: expected a string",
                "entry.units: unknown field (a window has requests_per_unit, unit, unit_multiplier, burst, name; an entry may instead be {\"unlimited\": true} or {\"rate_limits\": [...]})",
            ]
        );
        assert_eq!(
            problems(&json!({"unit": "minute"})),
            ["entry.requests_per_unit: missing (0 is allowed and blocks every request)"]
        );
        assert_eq!(
            problems(&json!({"unlimited": false, "unit": "minute"})),
            [
                "entry.unlimited: expected true (leave the field out for a limit)",
                "entry.unit: not allowed with unlimited",
            ]
        );
        assert_eq!(
            problems(
                &json!({"rate_limits": [{"requests_per_unit": 1}, {"requests_per_unit": 4294967296_u64}]})
            ),
            [
                "entry.rate_limits[1].requests_per_unit: expected a whole number from 0 to 4294967295"
            ]
        );
        assert_eq!(problems(&json!([1])), ["entry: expected a JSON object"]);
    }

    #[test]
    fn an_entry_reads_back_as_it_was_written() {
        for value in [
            json!({"unlimited": true}),
            json!({"requests_per_unit": 5, "unit": "hour", "name": "gold"}),
            json!({"rate_limits": [{"requests_per_unit": 5}, {"requests_per_unit": 50, "unit": "day"}]}),
        ] {
            let entry = TableEntry::from_json(&value).unwrap();
            assert_eq!(serde_json::to_value(&entry).unwrap(), value);
            let again: TableEntry = serde_json::from_value(value).unwrap();
            assert_eq!(again, entry);
        }
    }

    #[test]
    fn absent_fields_are_the_rules_and_the_rules_checks_apply() {
        let rule = rule(
            json!({"unit": "minute", "requests_per_unit": 60, "algorithm": "gcra", "burst": 10, "name": "default"}),
            false,
        );
        let entry = TableEntry::from_json(&json!({"requests_per_unit": 600})).unwrap();
        let Ok(Resolved::Limited { limits, specs }) = entry.resolve(&rule) else {
            panic!("limited");
        };
        let limit = &limits[0];
        assert_eq!(
            (limit.requests_per_unit, limit.burst, limit.name.as_deref()),
            (600, Some(10), Some("default"))
        );
        assert_eq!(limit.window_secs(), 60);
        assert_eq!(specs.len(), 1);
        let entry = TableEntry::from_json(
            &json!({"requests_per_unit": 1, "unit": "minutes", "unit_multiplier": 0, "burst": 0}),
        )
        .unwrap();
        assert_eq!(
            entry.resolve(&rule).unwrap_err(),
            [
                "entry: invalid rate limit unit 'minutes'",
                "entry: unit_multiplier must be at least 1",
                "entry: burst must be at least 1",
            ]
        );
        let fixed = self::rule(json!({"unit": "minute", "requests_per_unit": 60}), false);
        let entry = TableEntry::from_json(&json!({"requests_per_unit": 1, "burst": 3})).unwrap();
        assert_eq!(
            entry.resolve(&fixed).unwrap_err(),
            ["entry: burst is only valid with algorithm gcra"]
        );
        assert_eq!(entry.check_alone(), Ok(()));
    }

    #[test]
    fn windows_follow_the_rules_windows_and_must_differ() {
        let rule = rule(
            json!([{"unit": "minute", "requests_per_unit": 10}, {"unit": "hour", "requests_per_unit": 100}]),
            true,
        );
        let entry = TableEntry::from_json(
            &json!({"rate_limits": [{"requests_per_unit": 20}, {"requests_per_unit": 200}]}),
        )
        .unwrap();
        let Ok(Resolved::Limited { limits, .. }) = entry.resolve(&rule) else {
            panic!("limited");
        };
        let got: Vec<_> = limits
            .iter()
            .map(|l| (l.requests_per_unit, l.window_secs()))
            .collect();
        assert_eq!(got, [(20, 60), (200, 3600)]);
        let same = TableEntry::from_json(
            &json!({"rate_limits": [{"requests_per_unit": 20}, {"requests_per_unit": 200, "unit": "minute"}]}),
        )
        .unwrap();
        assert_eq!(
            same.resolve(&rule).unwrap_err(),
            [
                "entry.rate_limits[1]: has the same window (60 s) as rate_limits[0]; the windows of one descriptor must differ"
            ]
        );
        let one = TableEntry::from_json(&json!({"requests_per_unit": 20})).unwrap();
        assert_eq!(
            one.resolve(&rule).unwrap_err(),
            ["entry: its rules list rate_limits: give {\"rate_limits\": [...]}"]
        );
        assert_eq!(
            TableEntry::Unlimited { unlimited: true }.resolve(&rule),
            Ok(Resolved::Unlimited)
        );
    }
}
