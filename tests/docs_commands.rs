//! Every `pagoda` command the book and `README.md` show names a subcommand that exists and
//! flags that subcommand takes today (as its `--help` lists them), so a renamed or removed
//! flag fails here rather than in a reader's shell.

#[path = "docs_support/markdown.rs"]
mod markdown;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chapters (the generated reference aside: it is the help itself) and the README.
fn documents() -> Vec<PathBuf> {
    let reference = repo().join("docs/src/reference");
    let mut files = markdown::markdown_files(&repo().join("docs/src"));
    files.retain(|file| !file.starts_with(&reference));
    files.push(repo().join("README.md"));
    files
}

/// The `pagoda ...` lines of a document's code blocks, comments cut.
fn commands(text: &str) -> Vec<String> {
    markdown::lines_by_fence(text)
        .into_iter()
        .filter(|(fenced, _)| *fenced)
        .map(|(_, line)| line.split(" # ").next().unwrap_or_default().trim())
        .map(|line| line.split(" && ").next().unwrap_or_default())
        .filter(|line| {
            // `pagoda SUBCOMMAND ...`, not e.g. a Cargo.toml's `pagoda = { .. }`.
            let word = line.strip_prefix("pagoda ").and_then(|rest| rest.split_whitespace().next());
            word.is_some_and(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        })
        .map(str::to_owned)
        .collect()
}

/// `pagoda`'s help for `args`.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pagoda")).args(args).env_clear().output().expect("run pagoda");
    assert!(out.status.success(), "pagoda {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

#[test]
fn documented_commands_use_real_subcommands_and_flags() {
    let mut helps: HashMap<String, String> = HashMap::new();
    let mut problems = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("read a document");
        let name = file.strip_prefix(repo()).unwrap_or(&file).display().to_string();
        for command in commands(&text) {
            let subcommand = command.split_whitespace().nth(1).unwrap_or_default().to_owned();
            let text = helps.entry(subcommand.clone()).or_insert_with(|| {
                let top = help(&["--help"]);
                let listed = top.lines().any(|l| l.split_whitespace().next() == Some(subcommand.as_str()));
                if listed { help(&[subcommand.as_str(), "--help"]) } else { String::new() }
            });
            if text.is_empty() {
                problems.push(format!("{name}: `{command}`: no subcommand {subcommand}"));
                continue;
            }
            let flags = command
                .split(|c: char| c.is_whitespace() || "[]|=".contains(c))
                .filter(|w| w.starts_with("--"));
            for flag in flags {
                let known = text.lines().any(|l| l.trim_start().split([',', ' ']).any(|w| w == flag));
                if !known {
                    problems.push(format!("{name}: `{command}`: pagoda {subcommand} has no {flag}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "stale commands in the docs:\n{}", problems.join("\n"));
}
