//! The house rules over `src/`, checked on every test run (no server, no
//! Redis): the layer rule written in ARCHITECTURE.md, no loop of imports
//! between sibling modules at any depth, and a code map that names every
//! file.
//!
//! The check reads the source as text: `use` statements (braces expanded)
//! and inline `crate::`/`super::`/`self::` paths, comments left out. A path
//! is resolved to the deepest module file it names; a name a module
//! re-exports (`pub use child::Name`) resolves to where it comes from, so a
//! loop hidden behind a re-export is still a loop.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `["store", "redis", "fault"]`.
type ModPath = Vec<String>;

/// One source file: its module path and every module path it refers to.
#[derive(Debug)]
struct File {
    /// Path relative to `src/`, e.g. `store/redis/fault.rs`.
    rel: String,
    module: ModPath,
    /// Paths the file refers to, made absolute (may still name items).
    refs: Vec<ModPath>,
    /// The same, leaving out test code (`#[cfg(test)]` items, `tests.rs`
    /// files and `tests/` directories): a unit test may build its
    /// fixtures with a sibling module without making a loop.
    lib_refs: Vec<ModPath>,
    /// Names the file re-exports, to the absolute path they come from.
    reexports: BTreeMap<String, ModPath>,
}

/// The whole tree.
#[derive(Debug)]
struct Tree {
    files: Vec<File>,
}

impl Tree {
    fn read(src: &Path) -> Self {
        let mut paths = Vec::new();
        walk(src, &mut paths);
        paths.sort();
        let files = paths
            .into_iter()
            .map(|path| {
                let rel = path
                    .strip_prefix(src)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = fs::read_to_string(&path).unwrap();
                File::parse(rel, &text)
            })
            .collect();
        Self { files }
    }

    fn modules(&self) -> BTreeSet<ModPath> {
        self.files.iter().map(|f| f.module.clone()).collect()
    }

    /// The module a path lands in: the deepest module file that is a
    /// prefix of it, following one re-export of the next name.
    fn resolve(&self, path: &ModPath) -> Option<ModPath> {
        let modules = self.modules();
        let mut seen = 0;
        let mut current = path.clone();
        // Re-exports may chain (a parent re-exports what a child re-exports);
        // bounded so a malformed tree cannot loop.
        while seen < 8 {
            seen += 1;
            let len = (1..=current.len())
                .rev()
                .find(|&n| modules.contains(&current[..n]))?;
            let module = current[..len].to_vec();
            let Some(name) = current.get(len) else {
                return Some(module);
            };
            let file = self.files.iter().find(|f| f.module == module)?;
            match file.reexports.get(name) {
                Some(origin) if origin != &current => {
                    let mut next = origin.clone();
                    next.extend(current[len + 1..].iter().cloned());
                    current = next;
                }
                _ => return Some(module),
            }
        }
        None
    }

    /// Every (from module, to module) edge, both resolved.
    fn edges(&self) -> BTreeSet<(ModPath, ModPath)> {
        let mut edges = BTreeSet::new();
        for file in &self.files {
            for r in &file.lib_refs {
                if let Some(to) = self.resolve(r)
                    && to != file.module
                {
                    edges.insert((file.module.clone(), to));
                }
            }
        }
        edges
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

impl File {
    fn parse(rel: String, text: &str) -> Self {
        let module = module_of(&rel);
        let code = strip_comments(text);
        let is_test = rel.ends_with("/tests.rs") || rel.contains("/tests/");
        let lib_code = if is_test {
            String::new()
        } else {
            strip_test_items(&code)
        };
        let mut reexports = BTreeMap::new();
        let refs = references(&module, &rel, &code, &mut reexports);
        let lib_refs = references(&module, &rel, &lib_code, &mut BTreeMap::new());
        Self {
            rel,
            module,
            refs,
            lib_refs,
            reexports,
        }
    }
}

/// Every path `code` refers to, absolute; re-exported names into
/// `reexports`.
fn references(
    module: &ModPath,
    rel: &str,
    code: &str,
    reexports: &mut BTreeMap<String, ModPath>,
) -> Vec<ModPath> {
    let mut refs = Vec::new();
    for (public, tree) in use_statements(code) {
        for path in expand(&tree) {
            let Some(abs) = absolute(module, rel, &path) else {
                continue;
            };
            if public && let Some(name) = abs.last() {
                reexports.insert(name.clone(), abs.clone());
            }
            refs.push(abs);
        }
    }
    for path in inline_paths(code) {
        if let Some(abs) = absolute(module, rel, &path) {
            refs.push(abs);
        }
    }
    refs
}

/// `code` without the items marked `#[cfg(test)]` (a `mod tests { .. }`,
/// a test-only function, a `mod tests;` declaration).
fn strip_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let semi = item.find(';').unwrap_or(item.len());
        let open = item.find('{').unwrap_or(item.len());
        let end = if semi < open {
            semi + 1
        } else {
            let mut depth = 0usize;
            let mut end = item.len();
            for (i, c) in item.char_indices().skip(open) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// `store/redis/mod.rs` -> `[store, redis]`; `lib.rs`/`main.rs` -> `[]`.
fn module_of(rel: &str) -> ModPath {
    let stem = rel.trim_end_matches(".rs");
    let mut parts: ModPath = stem.split('/').map(str::to_owned).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether a file is a directory module (`mod.rs`, or the crate root).
fn is_dir_module(rel: &str) -> bool {
    rel.ends_with("mod.rs") || rel == "lib.rs" || rel == "main.rs"
}

/// Makes `crate::a::b`, `super::x`, `self::y` absolute from `module`;
/// `None` for paths outside the crate.
fn absolute(module: &ModPath, rel: &str, path: &[String]) -> Option<ModPath> {
    let first = path.first()?;
    let mut out: ModPath;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => out = Vec::new(),
        "self" => out = module.clone(),
        "super" => {
            out = module.clone();
            out.pop()?;
            while rest.first().map(String::as_str) == Some("super") {
                out.pop()?;
                rest = &rest[1..];
            }
        }
        _ => {
            // A path from a `use` of a child module (`use child::Name`) in
            // a directory module, or of an external crate: only the first
            // is ours, and only when such a child exists (checked later by
            // resolve, which finds no module for an external crate).
            if is_dir_module(rel) || module.is_empty() {
                out = module.clone();
                out.push(first.clone());
                out.extend(rest.iter().cloned());
                return Some(out);
            }
            return None;
        }
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// The text without `//` and `/* */` comments or string literals, so a
/// doc link or a message never counts as an import.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push_str("\"\"");
            }
            '\'' => {
                // A char literal ('"' would open a string otherwise) or a
                // lifetime: copy a lifetime, skip a literal.
                let ahead: String = chars.clone().take(3).collect();
                let literal = ahead.starts_with('\\') || ahead.chars().nth(1) == Some('\'');
                if literal {
                    let mut escaped = false;
                    for c in chars.by_ref() {
                        if !escaped && c == '\'' {
                            break;
                        }
                        escaped = !escaped && c == '\\';
                    }
                    out.push_str("' '");
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every `use` statement: whether it re-exports (`pub use`, any
/// visibility), and its tree text (`a::{b, c::d}`).
fn use_statements(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find("use ") {
        let start = at + found;
        at = start + 4;
        let boundary = start == 0 || !is_ident(bytes[start - 1]);
        if !boundary {
            continue;
        }
        let line_start = code[..start].rfind('\n').map_or(0, |i| i + 1);
        let before = code[line_start..start].trim();
        let public = before.starts_with("pub");
        if !(before.is_empty() || public) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        // Whitespace collapsed to single spaces, kept only around `as`.
        let tree = code[at..at + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace(" ::", "::")
            .replace(":: ", "::")
            .replace("{ ", "{")
            .replace(" }", "}")
            .replace(", ", ",");
        out.push((public, tree));
        at += end;
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `a::{b, c::{d, e}}` -> `[a,b]`, `[a,c,d]`, `[a,c,e]`; `self` inside
/// braces names the prefix; `as` renames are dropped.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn go(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim_end_matches("::");
            let mut base = prefix.to_vec();
            base.extend(segments(head));
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner).into_iter().map(str::trim) {
                if part == "self" {
                    out.push(base.clone());
                } else if !part.is_empty() {
                    go(&base, part, out);
                }
            }
        } else {
            let mut path = prefix.to_vec();
            let head = tree.split(" as ").next().unwrap_or(tree).trim();
            path.extend(segments(head));
            if path.last().map(String::as_str) == Some("*") {
                path.pop();
            }
            out.push(path);
        }
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Splits on commas not inside braces.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Inline paths outside `use` statements: `crate::a::b`, `super::x`,
/// `self::y` (a leading `self::` on a method call is rare and harmless).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for key in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(found) = code[at..].find(key) {
            let start = at + found;
            at = start + key.len();
            if start > 0 && (is_ident(bytes[start - 1]) || bytes[start - 1] == b':') {
                continue;
            }
            let end = code[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |i| start + i);
            out.push(segments(&code[start..end]));
        }
    }
    out
}

/// The allowed arrows between top-level modules, from ARCHITECTURE.md's
/// block after the marker line: `module -> dep dep ...` per line.
fn layer_rule(architecture: &str) -> BTreeMap<String, BTreeSet<String>> {
    const MARKER: &str = "<!-- layer rule: read by tests/tidy.rs -->";
    let after = architecture
        .split_once(MARKER)
        .expect("ARCHITECTURE.md has the layer rule marker")
        .1;
    let block = after
        .split_once("```text")
        .expect("a ```text block follows the marker")
        .1
        .split_once("```")
        .expect("the block is closed")
        .0;
    let mut rule = BTreeMap::new();
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (from, to) = line
            .split_once("->")
            .unwrap_or_else(|| panic!("layer rule line without '->': {line}"));
        let deps = to
            .split_whitespace()
            .filter(|d| *d != "(nothing)")
            .map(str::to_owned)
            .collect();
        rule.insert(from.trim().to_owned(), deps);
    }
    rule
}

/// Imports against the rule, as `from -> to (file)` lines.
fn layer_breaks(tree: &Tree, rule: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut breaks = Vec::new();
    for file in &tree.files {
        let Some(top) = file.module.first() else {
            continue; // lib.rs and main.rs sit above every layer
        };
        if top == "main" {
            continue; // the binary's own files (src/main/) use the library's public API
        }
        let Some(allowed) = rule.get(top) else {
            breaks.push(format!(
                "{}: module '{top}' has no line in the layer rule",
                file.rel
            ));
            continue;
        };
        let mut seen = BTreeSet::new();
        for r in &file.refs {
            let Some(to) = tree.resolve(r) else { continue };
            let Some(to_top) = to.first() else { continue };
            if to_top != top && !allowed.contains(to_top) && seen.insert(to_top.clone()) {
                breaks.push(format!(
                    "{}: {top} -> {to_top} ({})",
                    file.rel,
                    r.join("::")
                ));
            }
        }
    }
    breaks
}

/// Loops among sibling modules at every depth: each child of a module is
/// its whole subtree; an edge between two children is any reference from
/// a file of one to a module of the other. A module's own file and its
/// children may refer to each other (a parent declares and re-exports its
/// children; children use their parent's items).
fn loops(tree: &Tree) -> Vec<String> {
    let edges = tree.edges();
    let modules = tree.modules();
    let mut parents: BTreeSet<ModPath> = BTreeSet::new();
    for m in &modules {
        for n in 0..m.len() {
            parents.insert(m[..n].to_vec());
        }
    }
    let mut found = Vec::new();
    for parent in parents {
        let depth = parent.len();
        let child_of = |m: &ModPath| -> Option<String> {
            (m.len() > depth && m[..depth] == parent[..]).then(|| m[depth].clone())
        };
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in &edges {
            if let (Some(a), Some(b)) = (child_of(from), child_of(to))
                && a != b
            {
                graph.entry(a).or_default().insert(b);
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            let mut names: Vec<String> = cycle
                .iter()
                .map(|c| {
                    let mut p = parent.clone();
                    p.push(c.clone());
                    p.join("::")
                })
                .collect();
            names.push(names[0].clone());
            found.push(names.join(" -> "));
        }
    }
    found
}

/// One cycle of `graph`, if any (depth-first search with colours).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            return Some(stack[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut done, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn imports_follow_the_layer_rule() {
    let tree = Tree::read(&root().join("src"));
    let architecture = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let rule = layer_rule(&architecture);
    let breaks = layer_breaks(&tree, &rule);
    assert!(
        breaks.is_empty(),
        "imports against the layer rule in ARCHITECTURE.md:\n  {}",
        breaks.join("\n  ")
    );
    let tops: BTreeSet<String> = tree
        .modules()
        .iter()
        .filter_map(|m| m.first().cloned())
        .collect();
    let unknown: Vec<&String> = rule.keys().filter(|m| !tops.contains(*m)).collect();
    assert!(
        unknown.is_empty(),
        "the layer rule names modules src/ lacks: {unknown:?}"
    );
    assert_eq!(find_cycle(&rule), None, "the layer rule itself has a loop");
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let tree = Tree::read(&root().join("src"));
    let found = loops(&tree);
    assert!(
        found.is_empty(),
        "import loops in src/:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn every_source_file_is_in_the_code_map() {
    let tree = Tree::read(&root().join("src"));
    let architecture = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let missing: Vec<&str> = tree
        .files
        .iter()
        .map(|f| f.rel.as_str())
        .filter(|rel| !architecture.contains(&format!("src/{rel}")))
        .collect();
    assert!(
        missing.is_empty(),
        "files missing from ARCHITECTURE.md's code map (write their path, e.g. `src/{}`):\n  {}",
        missing.first().copied().unwrap_or_default(),
        missing.join("\n  ")
    );
}

/// The checker itself: a tree with a store importing the server breaks the
/// rule, and two siblings importing each other are a loop.
#[test]
fn the_checker_finds_a_break_and_a_loop() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod server;\npub mod store;\n");
    write(
        "server/mod.rs",
        "mod a;\nmod b;\npub use a::Thing;\nuse crate::store::Op;\n",
    );
    write(
        "server/a.rs",
        "use super::b::Other; // crate::nothing\npub struct Thing;\n",
    );
    write("server/b.rs", "use super::Thing;\npub struct Other;\n");
    write(
        "store/mod.rs",
        "/// [`crate::server`]\nuse crate::server::{self, Thing};\npub struct Op;\n",
    );
    let tree = Tree::read(src);
    let rule = layer_rule(
        "<!-- layer rule: read by tests/tidy.rs -->\n```text\nserver -> store\nstore -> (nothing)\n```\n",
    );
    let breaks = layer_breaks(&tree, &rule);
    assert_eq!(breaks.len(), 1, "{breaks:?}");
    assert!(
        breaks[0].starts_with("store/mod.rs: store -> server"),
        "{breaks:?}"
    );
    let found = loops(&tree);
    assert!(
        found.contains(&"server::a -> server::b -> server::a".to_owned())
            || found.contains(&"server::b -> server::a -> server::b".to_owned()),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|l| l.contains("store") && l.contains("server")),
        "{found:?}"
    );
}
