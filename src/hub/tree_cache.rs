//! A commit's file listing kept in the cache as `trees/COMMIT.json`, in the format
//! `huggingface_hub` writes and reads (`format_version` 1), so a listing either tool fetched
//! serves both, and a cached model is checked complete without asking the Hub.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::client::TreeEntry;
use super::error::HubError;
use super::layout::{RepoLayout, write_atomic};

const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct TreeFile {
    format_version: u32,
    files: BTreeMap<String, Entry>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    size: u64,
    blob_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lfs_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lfs_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    xet_hash: Option<String>,
}

/// The file paths of the listing cached for `commit`, if one is (and is readable).
pub fn read(layout: &RepoLayout, commit: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(layout.tree(commit)).ok()?;
    let tree: TreeFile = serde_json::from_str(&text).ok()?;
    (tree.format_version == FORMAT_VERSION).then(|| tree.files.into_keys().collect())
}

/// Caches the listing of `commit` (byte for byte what `huggingface_hub` writes: one-space
/// indents, paths sorted).
pub fn write(layout: &RepoLayout, commit: &str, entries: &[TreeEntry]) -> Result<(), HubError> {
    let files = entries
        .iter()
        .map(|e| {
            let entry = Entry {
                size: e.size,
                blob_id: e.oid.clone(),
                lfs_sha256: e.lfs.as_ref().map(|l| l.oid.clone()),
                lfs_size: e.lfs.as_ref().map(|l| l.size),
                xet_hash: e.xet_hash.clone(),
            };
            (e.path.clone(), entry)
        })
        .collect();
    let tree = TreeFile { format_version: FORMAT_VERSION, files };
    let mut bytes = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
    tree.serialize(&mut serializer).map_err(|e| HubError::Protocol {
        url: layout.tree(commit).display().to_string(),
        reason: e.to_string(),
    })?;
    write_atomic(&layout.tree(commit), &bytes)
}
