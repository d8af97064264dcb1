//! The generators of the book's reference pages (`docs/src/reference/`), each from what the
//! code says today.

pub mod cli;
pub mod metrics;
pub mod rust_source;
pub mod server;

/// The note each generated page opens with.
pub const GENERATED: &str = "<!-- Generated from the code: `PAGODA_BLESS=1 cargo test --test docs_reference` rewrites it. Do not edit. -->";
