//! Why a model could not be had from the Hugging Face Hub or its cache.

use std::path::PathBuf;

/// A failure to find, fetch or check a model by its Hub id. Each names the id (or file) it
/// concerns and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The text is not `ORG/NAME[:QUANT][@REVISION]` or `ORG/NAME/FILE.gguf[@REVISION]`.
    #[error(
        "`{id}` is not a Hub model id ({reason}); expected ORG/NAME, ORG/NAME:QUANT, ORG/NAME/FILE.gguf, each with an optional @REVISION"
    )]
    InvalidId {
        /// The text given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `HF_HUB_OFFLINE` is set and the cache does not hold the model.
    #[error(
        "{id} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set: unset it to download"
    )]
    Offline {
        /// The model id.
        id: String,
        /// The cache directory searched.
        cache: PathBuf,
    },
    /// The Hub could not be reached (no network, refused, timed out) and the cache does not
    /// hold the model.
    #[error(
        "cannot reach the Hub at {endpoint} for {id} ({reason}), and the Hugging Face cache ({cache}) does not hold it"
    )]
    Unreachable {
        /// The model id.
        id: String,
        /// The endpoint tried.
        endpoint: String,
        /// The network error.
        reason: String,
        /// The cache directory searched.
        cache: PathBuf,
    },
    /// The repository is gated and no token was sent.
    #[error(
        "{id} is gated: it needs a token (set HF_TOKEN, or log in so the token file exists) from an account that accepted its license at {url}"
    )]
    NeedsToken {
        /// The model id.
        id: String,
        /// The repository's page, where its license is accepted.
        url: String,
    },
    /// The repository is gated and the token's account has not been granted access.
    #[error(
        "{id} is gated and the token's account has no access yet: accept the license at {url} (the Hub said: {message})"
    )]
    NotAuthorized {
        /// The model id.
        id: String,
        /// The repository's page, where its license is accepted.
        url: String,
        /// The Hub's own message.
        message: String,
    },
    /// The token was refused.
    #[error("the Hub refused the token for {id} (invalid credentials): check HF_TOKEN or the token file")]
    InvalidToken {
        /// The model id.
        id: String,
    },
    /// No such repository, or a private one the token cannot see.
    #[error("repository {id} not found on the Hub (a private repository needs HF_TOKEN)")]
    RepoNotFound {
        /// The model id.
        id: String,
    },
    /// The repository has no such branch, tag or commit.
    #[error("{id} has no revision `{revision}`")]
    RevisionNotFound {
        /// The model id.
        id: String,
        /// The revision asked for.
        revision: String,
    },
    /// The repository has no such file.
    #[error("{id} has no file `{file}`")]
    FileNotFound {
        /// The model id.
        id: String,
        /// The file asked for.
        file: String,
    },
    /// No GGUF file of the repository carries the quant asked for.
    #[error("{id} has no GGUF file for quant {quant}; its GGUF files: {}", list(available))]
    NoQuant {
        /// The model id.
        id: String,
        /// The quant asked for.
        quant: String,
        /// The repository's GGUF files.
        available: Vec<String>,
    },
    /// The repository holds nothing pagoda can load.
    #[error(
        "{id} has no model pagoda can load (config.json with safetensors weights, or a .gguf file); its files: {}",
        list(files)
    )]
    NoWeights {
        /// The model id.
        id: String,
        /// The repository's files.
        files: Vec<String>,
    },
    /// The Hub answered with an error status this client has no better words for.
    #[error("{url}: HTTP {status}{}", if message.is_empty() { String::new() } else { format!(" ({message})") })]
    Http {
        /// The URL requested.
        url: String,
        /// The status.
        status: u16,
        /// The Hub's `X-Error-Message`, if any.
        message: String,
    },
    /// The Hub's answer lacked something the protocol requires.
    #[error("{url}: unexpected answer from the Hub: {reason}")]
    Protocol {
        /// The URL requested.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The network failed in the middle of a download, more often than retries allow.
    #[error("downloading {file} failed: {reason}")]
    Download {
        /// The file.
        file: String,
        /// The last error.
        reason: String,
    },
    /// A downloaded file does not match its checksum; it was deleted.
    #[error(
        "{file} failed its checksum (expected {expected}, got {actual}); the download was deleted, try again"
    )]
    Checksum {
        /// The file.
        file: String,
        /// The ETag / SHA-256 the Hub announced.
        expected: String,
        /// What the bytes hash to.
        actual: String,
    },
    /// The cache holds no model of that id (`pagoda rm`).
    #[error("{id} is not in the Hugging Face cache ({cache})")]
    NotCached {
        /// The model id.
        id: String,
        /// The cache directory searched.
        cache: PathBuf,
    },
    /// A file of the cache could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

/// `map_err` helper: an I/O error on `path`.
pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
    let path = path.into();
    move |source| HubError::Io { path, source }
}
