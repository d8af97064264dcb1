//! Models by Hugging Face Hub id (`ORG/NAME`, `ORG/NAME:QUANT`, `ORG/NAME/FILE.gguf`,
//! `@REVISION`), fetched into — and found in — the cache layout every Hugging Face tool
//! shares, so a model transformers or vLLM fetched is used without a download and one
//! pagoda fetched is theirs.
//!
//! Built on `hf-hub` (the cache's and the repositories' naming) and its HTTP client `ureq`;
//! what `hf-hub`'s blocking API lacks is here: timeouts on every request, typed errors for
//! the Hub's answers (gated, private, missing), blobs checked against their ETag, resumed
//! downloads, locks shared with `huggingface_hub`, offline mode and the listing cache.

pub mod client;
pub mod download;
pub mod error;
pub mod fetch;
pub mod id;
pub mod inventory;
pub mod layout;
pub mod lock;
pub mod progress;
pub mod select;
pub mod settings;
pub mod tree_cache;
pub mod verify;

pub use error::HubError;
pub use fetch::{Fetched, Freshness, fetch};
pub use id::{HubId, Selector};
pub use settings::{HubSettings, ProgressStyle};
