//! Where the Hub and its cache are, read from the environment variables every Hugging Face
//! tool reads: `HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_TOKEN` (and the token file),
//! `HF_HUB_OFFLINE`, `HF_HUB_ETAG_TIMEOUT`, `HF_HUB_DOWNLOAD_TIMEOUT`.

use std::path::PathBuf;
use std::time::Duration;

/// The Hub's address when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How a download shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressStyle {
    /// A bar per file on stderr (bytes, rate, ETA): for a terminal.
    Bar,
    /// A log line (`tracing`, target `pagoda::hub`) when a file starts, every 10 seconds,
    /// and when it ends: for logs.
    Lines,
}

/// Everything the Hub client needs to know.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// The cache directory: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub` or `~/.cache/huggingface/hub`.
    pub cache_dir: PathBuf,
    /// The Hub's base URL, without a trailing `/`.
    pub endpoint: String,
    /// The access token: `HF_TOKEN`, else the token file (`HF_TOKEN_PATH`, else `HF_HOME/token`).
    pub token: Option<String>,
    /// Never touch the network (`HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// How long to wait for the Hub to answer a metadata request (connect, then each read).
    pub metadata_timeout: Duration,
    /// How long a download may go without receiving a byte.
    pub download_timeout: Duration,
    /// How downloads show progress.
    pub progress: ProgressStyle,
}

impl HubSettings {
    /// The settings the environment describes, with progress drawn as `progress`.
    pub fn from_env(progress: ProgressStyle) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let base = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"));
            base.join("huggingface")
        });
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("hub"));
        let token_file = var("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| home.join("token"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(token_file).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let endpoint =
            var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.into()).trim_end_matches('/').to_owned();
        let seconds = |name: &str| {
            let s =
                var(name).and_then(|v| v.trim().parse::<f64>().ok()).filter(|s| *s > 0.0 && s.is_finite());
            Duration::from_secs_f64(s.unwrap_or(10.0))
        };
        Self {
            cache_dir,
            endpoint,
            token,
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
            metadata_timeout: seconds("HF_HUB_ETAG_TIMEOUT"),
            download_timeout: seconds("HF_HUB_DOWNLOAD_TIMEOUT"),
            progress,
        }
    }
}

/// `huggingface_hub`'s reading of a boolean variable.
fn truthy(value: &str) -> bool {
    matches!(value.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

#[cfg(test)]
mod tests {
    use super::truthy;

    #[test]
    fn booleans_read_as_huggingface_hub_reads_them() {
        for yes in ["1", "on", "YES", "True"] {
            assert!(truthy(yes));
        }
        for no in ["0", "off", "no", "false", ""] {
            assert!(!truthy(no));
        }
    }
}
