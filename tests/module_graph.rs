//! The library's modules import one another without cycles.
//!
//! The graph comes from the source: each file under `src/` is a module (`a/mod.rs` is `a`);
//! a path in its code (`crate::x::y`, `super::y`, `self::y`; comments and `#[cfg(test)]`
//! blocks left out) is an edge to the longest module the path names. A module may use its
//! own ancestors (its parent is its namespace), so those edges do not count; any other
//! ring — two siblings using each other, or a longer loop — fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`core::scheduler`) → the file's code.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if path.extension().is_none_or(|e| e != "rs") || parts == ["main"] {
                continue;
            }
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            modules.insert(parts.join("::"), code_of(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    modules
}

/// `source` without comments and without its `#[cfg(test)]` module.
fn code_of(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    source.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The paths that `code` (of module `module`) names from the crate: every `use` tree
/// expanded, and every path in the code that starts with `crate::`, `super::` or `self::`;
/// each as module path segments from the crate root.
fn mentioned(module: &str, code: &str) -> Vec<Vec<String>> {
    let own: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    let mut written = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim_start();
        let tree = statement.strip_prefix("pub ").unwrap_or(statement).strip_prefix("use ");
        let is_tree = |t: &&str| t.chars().all(|c| c.is_alphanumeric() || "_:{},* \n\t".contains(c));
        if let Some(tree) = tree.filter(is_tree) {
            written.extend(expand("", tree));
        } else {
            let words = statement.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
            written.extend(words.filter(|w| w.contains("::")).map(str::to_owned));
        }
    }
    written
        .iter()
        .filter_map(|path| {
            let path: Vec<&str> = path.split("::").map(str::trim).filter(|p| !p.is_empty()).collect();
            let ups = path.iter().take_while(|&&p| p == "super").count();
            let base: Vec<&str> = match path.first() {
                Some(&"crate") => path[1..].to_vec(),
                Some(&"super") if ups <= own.len() => [&own[..own.len() - ups], &path[ups..]].concat(),
                Some(&"self") => [&own[..], &path[1..]].concat(),
                _ => return None,
            };
            Some(base.into_iter().map(String::from).collect())
        })
        .collect()
}

/// The paths of a `use` tree (`a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`).
fn expand(prefix: &str, tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![format!("{prefix}{path}")];
    };
    let head = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|item| expand(&format!("{prefix}{head}"), item))
        .collect()
}

/// Module → the modules it uses (ancestors and itself left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let mut edges = BTreeMap::new();
    for (module, code) in &modules {
        let mut targets = BTreeSet::new();
        for path in mentioned(module, code) {
            let Some(target) =
                (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains_key(m))
            else {
                continue;
            };
            let is_ancestor = module.starts_with(&format!("{target}::"));
            if &target != module && !is_ancestor {
                targets.insert(target);
            }
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

/// A cycle through `edges`, if there is one, as the modules along it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|m| m == next).unwrap_or(0);
                    return Some(stack[from..].iter().cloned().chain([next.clone()]).collect());
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(cycle) = visit(next, edges, marks, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if !marks.contains_key(node)
            && let Some(cycle) = visit(node, edges, &mut marks, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn no_two_modules_import_each_other() {
    let edges = graph();
    assert!(edges.len() > 40, "found only {} modules", edges.len());
    assert!(edges["engine"].contains("core::scheduler"), "the graph misses a known edge");
    if let Some(cycle) = find_cycle(&edges) {
        panic!("modules import each other in a ring: {}", cycle.join(" -> "));
    }
}

#[test]
fn a_ring_is_found() {
    let ring: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
        .collect();
    assert_eq!(find_cycle(&ring), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let paths = mentioned(
        "server::routes",
        "use super::{streaming::Chunk, tools::{A, B as C}};\nlet x = crate::ids::TokenId::MAX;",
    );
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["server::streaming::Chunk", "server::tools::A", "server::tools::B", "ids::TokenId::MAX"]
    );
}
