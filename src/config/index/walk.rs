//! The matcher's walk made visible, for `/explain`: how each request entry
//! was matched at its level, by the very selection [`Index::lookup`] makes
//! (exact value, then wildcards in config order, then the key-only node; no
//! backtracking), and the rule it ends at.

use super::{Index, Lookup, Match, Selected};
use crate::descriptor::Entry;

/// How one request entry was matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepMatch {
    /// A node whose value equals the entry's value.
    Exact,
    /// A wildcard node, by this pattern.
    Wildcard {
        /// The node's value as written in the rule file.
        pattern: String,
    },
    /// The key-only node of the entry's key.
    Default,
    /// Nothing at this level matched (or an earlier entry already failed),
    /// so the walk stopped.
    None,
}

/// The walk of one request descriptor through a domain's tree.
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    /// One per request entry, in order.
    pub steps: Vec<StepMatch>,
    /// What [`Index::lookup`] answers for the same entries.
    pub lookup: Lookup<'a>,
    /// Whether every entry matched a node, but the last one carries no limit
    /// (the request is shallower than the rule, or deeper than a limit on
    /// an intermediate node).
    pub ended_without_rule: bool,
}

impl Index {
    /// Walks `entries` through `domain`'s tree, step by step. Its `lookup`
    /// is always the one [`Index::lookup`] gives.
    pub fn walk<'a>(&'a self, domain: &str, entries: &[Entry]) -> Walk<'a> {
        let mut steps = Vec::with_capacity(entries.len());
        let Some(index) = self.domain(domain) else {
            steps.resize(entries.len(), StepMatch::None);
            return Walk {
                steps,
                lookup: Lookup::UnknownDomain,
                ended_without_rule: false,
            };
        };
        let mut level = &index.root;
        let mut shared = Vec::new();
        let mut matched = None;
        for (at, entry) in entries.iter().enumerate() {
            let Some((node, how)) = level.select_how(entry) else {
                steps.resize(entries.len(), StepMatch::None);
                return Walk {
                    steps,
                    lookup: Lookup::NoMatch,
                    ended_without_rule: false,
                };
            };
            steps.push(match how {
                Selected::Exact => StepMatch::Exact,
                Selected::Wildcard(pattern) => StepMatch::Wildcard {
                    pattern: pattern.text(),
                },
                Selected::Default => StepMatch::Default,
            });
            if let Some(pattern) = &node.share_pattern {
                shared.push((at, &**pattern));
            }
            level = &node.children;
            matched = Some(node);
        }
        let rule = matched
            .and_then(|node| node.rule)
            .and_then(|rule| index.rules.get(rule));
        Walk {
            steps,
            ended_without_rule: matched.is_some() && rule.is_none(),
            lookup: match rule {
                Some(rule) => Lookup::Matched(Match {
                    rule,
                    shared,
                    secret_keys: &index.secret_keys,
                }),
                None => Lookup::NoMatch,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadOptions, Source, load_sources};

    fn index() -> Index {
        let text = "
domain: d
descriptors:
  - key: k
    value: exact
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: wild*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: other
        rate_limit: {unit: second, requests_per_unit: 4}
";
        load_sources(
            &[Source {
                name: "d.yaml".into(),
                text: text.into(),
            }],
            &LoadOptions::default(),
        )
        .unwrap()
    }

    fn rule_of(walk: &Walk<'_>) -> Option<String> {
        match &walk.lookup {
            Lookup::Matched(m) => Some(m.rule.full_key.clone()),
            _ => None,
        }
    }

    #[test]
    fn every_kind_of_step_and_the_rule_lookup_finds() {
        let index = index();
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [StepMatch], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (
                &[("k", "exact"), ("sub", "x")],
                &[StepMatch::Exact, StepMatch::Default],
                Some("d.k_exact.sub"),
            ),
            (
                &[("k", "wildcat")],
                &[StepMatch::Wildcard {
                    pattern: "wild*".into(),
                }],
                Some("d.k_wild*"),
            ),
            (&[("k", "plain")], &[StepMatch::Default], Some("d.k")),
            // No backtracking: `exact` has no child `other`, and the walk
            // does not retry through the key-only node that has one.
            (
                &[("k", "exact"), ("other", "x")],
                &[StepMatch::Exact, StepMatch::None],
                None,
            ),
            (
                &[("nope", "x"), ("k", "v")],
                &[StepMatch::None, StepMatch::None],
                None,
            ),
            // Shallower than the rule: `exact` itself has no limit.
            (&[("k", "exact")], &[StepMatch::Exact], None),
        ];
        for (entries, steps, rule) in cases {
            let entries: Vec<Entry> = entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect();
            let walk = index.walk("d", &entries);
            assert_eq!(walk.steps, *steps, "{entries:?}");
            assert_eq!(rule_of(&walk).as_deref(), *rule, "{entries:?}");
            let lookup = match index.lookup("d", &entries) {
                Lookup::Matched(m) => Some(m.rule.full_key.clone()),
                _ => None,
            };
            assert_eq!(rule_of(&walk), lookup, "walk and lookup agree");
        }
        let unknown = index.walk("other", &[Entry::new("k", "v")]);
        assert!(matches!(unknown.lookup, Lookup::UnknownDomain));
        assert_eq!(unknown.steps, [StepMatch::None]);
    }
}
