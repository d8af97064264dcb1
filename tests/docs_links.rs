//! Every link in the book (`docs/src/`) and in `README.md` reaches a file, and every
//! `#anchor` a heading of it; every `{{#include}}` reaches a file and its `ANCHOR`; every
//! chapter is in `SUMMARY.md`; the README stays short. An image the book's build renders
//! (`scripts/book.sh`) may be missing until it runs.

#[path = "docs_support/markdown.rs"]
mod markdown;

use std::collections::HashSet;
use std::path::Path;

use markdown::markdown_files;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text outside fenced code blocks and inline code spans (which may wrap), its lines
/// joined so that a link may wrap too.
fn prose(text: &str) -> String {
    let lines: Vec<&str> = markdown::lines_by_fence(text)
        .into_iter()
        .filter(|(fenced, _)| !fenced)
        .map(|(_, line)| line)
        .collect();
    lines.join(" ").split('`').step_by(2).collect()
}

/// The targets of `[text](target)` and `![alt](target)` links.
fn link_targets(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(i, _)| prose[i + 2..].split_once(')').map(|(target, _)| target.trim().to_owned()))
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .collect()
}

/// A heading's anchor as mdBook makes it: text without markup, lowercased, spaces as `-`,
/// other punctuation dropped.
fn slug(heading: &str) -> String {
    let text: String = heading.replace(['`', '*'], "");
    let text = match (text.find('['), text.find("](")) {
        (Some(open), Some(close)) if open < close => {
            let end = text[close..].find(')').map_or(text.len(), |e| close + e + 1);
            format!("{}{}{}", &text[..open], &text[open + 1..close], &text[end..])
        }
        _ => text,
    };
    text.trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (duplicates numbered as mdBook numbers them).
fn anchors(text: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    for (fenced, line) in markdown::lines_by_fence(text) {
        if !fenced && line.starts_with('#') {
            let base = slug(line.trim_start_matches('#'));
            let mut anchor = base.clone();
            let mut n = 0;
            while !anchors.insert(anchor.clone()) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
        }
    }
    anchors
}

/// The problems with `file`'s links, as `file: message` lines.
fn check_file(file: &Path, rendered: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("read a Markdown file");
    let dir = file.parent().expect("a file's folder");
    let name = file.strip_prefix(repo()).unwrap_or(file).display().to_string();
    let mut problems = Vec::new();
    for target in link_targets(&text) {
        let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
        let linked = if path.is_empty() { file.to_path_buf() } else { dir.join(path) };
        if !linked.exists() {
            let relative = linked.strip_prefix(repo().join("docs/src")).map(|p| p.display().to_string());
            if !relative.is_ok_and(|p| rendered.contains(&format!("docs/src/{p}"))) {
                problems.push(format!("{name}: no file for the link {target}"));
            }
            continue;
        }
        if let Some(anchor) = anchor {
            let linked_text = std::fs::read_to_string(&linked).unwrap_or_default();
            if !anchors(&linked_text).contains(anchor) {
                problems.push(format!("{name}: no heading for the anchor of {target}"));
            }
        }
    }
    for (i, _) in text.match_indices("{{#include ") {
        let spec = text[i + 11..].split("}}").next().unwrap_or_default().trim();
        let (path, selector) = spec.split_once(':').map_or((spec, None), |(p, s)| (p, Some(s)));
        let included = std::fs::read_to_string(dir.join(path));
        match (included, selector) {
            (Err(_), _) => problems.push(format!("{name}: no file for {{{{#include {spec}}}}}")),
            // A line range (`:7:`) needs no anchor.
            (Ok(source), Some(anchor))
                if !anchor.starts_with(|c: char| c.is_ascii_digit())
                    && !source.contains(&format!("ANCHOR: {anchor}")) =>
            {
                problems.push(format!("{name}: no ANCHOR: {anchor} in {path}"));
            }
            _ => {}
        }
    }
    problems
}

#[test]
fn book_and_readme_links_resolve() {
    let src = repo().join("docs/src");
    // Files the book's build renders before mdBook runs.
    let rendered = std::fs::read_to_string(repo().join("scripts/book.sh")).expect("read scripts/book.sh");
    let mut files = markdown_files(&src);
    files.push(repo().join("README.md"));
    let problems: Vec<String> = files.iter().flat_map(|file| check_file(file, &rendered)).collect();
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary() {
    let src = repo().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("read SUMMARY.md");
    let listed: HashSet<String> = link_targets(&summary).into_iter().collect();
    for file in markdown_files(&src) {
        let chapter = file.strip_prefix(&src).expect("under docs/src").display().to_string();
        assert!(
            chapter == "SUMMARY.md" || listed.contains(&chapter),
            "{chapter} is not in docs/src/SUMMARY.md"
        );
    }
}

#[test]
fn slugs_follow_mdbook() {
    assert_eq!(slug(" `POST /v1/completions`"), "post-v1completions");
    assert_eq!(slug(" KV-cache events"), "kv-cache-events");
    assert_eq!(slug(" Embedding: Rust and C"), "embedding-rust-and-c");
    assert_eq!(slug(" `stream_options`"), "stream_options");
}

/// The README is the five-minute read; the rest belongs in the book.
#[test]
fn readme_stays_short() {
    let lines = std::fs::read_to_string(repo().join("README.md")).expect("read README.md").lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines (at most 150): move the detail into a chapter of docs/src/"
    );
}
