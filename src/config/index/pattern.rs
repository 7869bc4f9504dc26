//! `*` patterns in rule values.

/// A `*` pattern, split once at load time so matching allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// Literal pieces between `*`s; at least two, since the pattern has a `*`.
    parts: Box<[Box<str>]>,
}

impl Pattern {
    /// Builds a pattern; `None` when `raw` has no `*` (it is an exact value).
    pub(crate) fn new(raw: &str) -> Option<Self> {
        raw.contains('*').then(|| Self {
            parts: raw.split('*').map(Box::from).collect(),
        })
    }

    /// The pattern as written in the rule file.
    pub(crate) fn text(&self) -> String {
        self.parts.join("*")
    }

    /// Whether `value` matches, each `*` standing for any run of characters
    /// (including none). The first and last pieces are anchored; the middle
    /// pieces are found leftmost-first, which is optimal for `*`-only globs,
    /// so no backtracking is needed.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let Some((first, rest)) = self.parts.split_first() else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return value == &**first;
        };
        let Some(value) = value.strip_prefix(&**first) else {
            return false;
        };
        let Some(mut value) = value.strip_suffix(&**last) else {
            return false;
        };
        for piece in middle.iter().filter(|piece| !piece.is_empty()) {
            match value.split_once(&**piece) {
                Some((_, after)) => value = after,
                None => return false,
            }
        }
        true
    }
}
