//! The book's reference pages (`docs/src/reference/`) are what the code says today: the CLI's
//! help from clap, the Prometheus metrics from the exposition, the server's routes, request
//! fields and error statuses from its source. A stale page fails with the command that
//! rewrites it: `PAGODA_BLESS=1 cargo test --test docs_reference`.

mod docs_support;

use std::path::{Path, PathBuf};

use docs_support::{cli, metrics, server};
use pagoda::server::error::ERROR_STATUSES;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compares `generated` with the committed page, or writes it under `PAGODA_BLESS`.
fn check(page: &str, generated: &str) {
    let path: PathBuf = repo().join("docs/src/reference").join(page);
    if std::env::var_os("PAGODA_BLESS").is_some() {
        std::fs::write(&path, generated).expect("write the reference page");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/src/reference/{page} is stale: run `PAGODA_BLESS=1 cargo test --test docs_reference`"
    );
}

#[test]
fn cli_reference_is_current() {
    check("cli.md", &cli::page(Path::new(env!("CARGO_BIN_EXE_pagoda"))));
}

#[test]
fn metrics_reference_is_current() {
    check("metrics.md", &metrics::page());
}

#[test]
fn server_reference_is_current() {
    check("server.md", &server::page(&repo().join("src")));
}

/// The error table names every status the server answers with.
#[test]
fn error_table_covers_every_status_the_server_answers() {
    let listed: Vec<String> = ERROR_STATUSES
        .iter()
        .map(|(status, _)| server::constant_name(status.canonical_reason().unwrap_or_default()))
        .collect();
    for name in server::statuses_in_source(&repo().join("src")) {
        assert!(
            listed.contains(&name),
            "StatusCode::{name} is answered but not in server::error::ERROR_STATUSES"
        );
    }
}
