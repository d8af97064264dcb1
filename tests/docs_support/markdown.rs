//! The Markdown files of the docs, for the tests that read them (included by path, so that
//! those tests need none of the generators).

use std::path::{Path, PathBuf};

/// The Markdown files under `dir`, recursively, in name order.
pub fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list a docs folder") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// A document's lines, fence lines left out, each with whether it is inside a fenced code
/// block.
pub fn lines_by_fence(text: &str) -> Vec<(bool, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else {
            lines.push((fenced, line));
        }
    }
    lines
}
