//! A model id to files on disk: from the cache when it holds the whole model (no request),
//! else from the Hub (the revision's commit, its listing, then each file the id needs), with
//! the cache as the fallback when the Hub cannot be reached.

use std::path::{Path, PathBuf};

use super::client::{Failure, HubClient};
use super::download::fetch_file;
use super::error::HubError;
use super::id::HubId;
use super::layout::{RepoLayout, is_commit_hash};
use super::select::{Plan, SAFETENSORS_INDEX, index_shards, plan};
use super::settings::HubSettings;
use super::tree_cache;

/// A model in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// What to open: the snapshot directory of a safetensors model, or a GGUF's first part.
    pub path: PathBuf,
    /// The commit.
    pub commit: String,
    /// The files of the repository it took, as paths in the snapshot.
    pub files: Vec<String>,
}

/// Whether a cached copy is used without asking the Hub for the revision's latest commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// A complete cached copy is used as it is (`--model`).
    CacheFirst,
    /// The Hub is asked which commit the revision is at now (`pagoda pull`); the cache is
    /// the fallback only when the Hub cannot be reached.
    Latest,
}

/// The model `id` names, from the cache or the Hub.
pub fn fetch(id: &HubId, settings: &HubSettings, freshness: Freshness) -> Result<Fetched, HubError> {
    let layout = RepoLayout::new(&settings.cache_dir, &id.repo);
    if freshness == Freshness::CacheFirst || settings.offline {
        if let Some(found) = cached(id, &layout) {
            return Ok(found);
        }
        if settings.offline {
            return Err(HubError::Offline { id: id.to_string(), cache: settings.cache_dir.clone() });
        }
    }
    let client = HubClient::new(settings);
    match download(id, &layout, &client, settings) {
        Ok(found) => Ok(found),
        Err(Failure::Hub(error)) => Err(error),
        Err(Failure::Network(reason)) => cached(id, &layout).ok_or_else(|| HubError::Unreachable {
            id: id.to_string(),
            endpoint: client.endpoint().to_owned(),
            reason,
            cache: settings.cache_dir.clone(),
        }),
    }
}

/// The model from the cache alone, when every file it needs is there.
pub fn cached(id: &HubId, layout: &RepoLayout) -> Option<Fetched> {
    let commit = layout.commit_of(id.revision())?;
    let snapshot = layout.snapshot(&commit);
    let listing = tree_cache::read(layout, &commit).unwrap_or_else(|| snapshot_files(&snapshot));
    let plan = plan(id, &listing).ok()?;
    let files = complete(&plan, &snapshot)?;
    Some(Fetched { path: model_path(&plan, &snapshot), commit, files })
}

/// Every file `plan` needs, when the snapshot holds them all.
fn complete(plan: &Plan, snapshot: &Path) -> Option<Vec<String>> {
    let mut files = match plan {
        Plan::Safetensors(files) | Plan::Gguf(files) => files.clone(),
    };
    if files.iter().any(|f| f == SAFETENSORS_INDEX) {
        let index = std::fs::read_to_string(snapshot.join(SAFETENSORS_INDEX)).ok()?;
        files.extend(index_shards(&index).ok()?);
    }
    files.iter().all(|f| snapshot.join(f).is_file()).then_some(files)
}

/// The path a plan's model is opened at.
fn model_path(plan: &Plan, snapshot: &Path) -> PathBuf {
    match plan {
        Plan::Safetensors(_) => snapshot.to_owned(),
        Plan::Gguf(parts) => snapshot.join(&parts[0]),
    }
}

fn download(
    id: &HubId,
    layout: &RepoLayout,
    client: &HubClient,
    settings: &HubSettings,
) -> Result<Fetched, Failure> {
    let id_text = id.to_string();
    let revision = id.revision();
    let commit = if is_commit_hash(revision) {
        revision.to_owned()
    } else {
        let repo = hf_hub::Repo::with_revision(id.repo.clone(), hf_hub::RepoType::Model, revision.to_owned());
        client.commit(&repo, &id_text)?
    };
    let listing = match tree_cache::read(layout, &commit) {
        Some(listing) => listing,
        None => {
            let entries = client.tree(layout.repo(), &id_text, &commit)?;
            tree_cache::write(layout, &commit, &entries)?;
            entries.into_iter().map(|e| e.path).collect()
        }
    };
    let plan = plan(id, &listing)?;
    layout.write_ref(revision, &commit)?;
    let snapshot = layout.snapshot(&commit);
    let mut files = match &plan {
        Plan::Safetensors(files) | Plan::Gguf(files) => files.clone(),
    };
    let mut next = 0;
    while next < files.len() {
        let file = files[next].clone();
        fetch_file(client, layout, &id_text, &commit, &file, settings.progress)?;
        if file == SAFETENSORS_INDEX {
            let path = snapshot.join(&file);
            let text = std::fs::read_to_string(&path).map_err(super::error::io_error(&path))?;
            let shards =
                index_shards(&text).map_err(|reason| HubError::Protocol { url: file.clone(), reason })?;
            for shard in shards {
                if !listing.contains(&shard) {
                    return Err(HubError::FileNotFound { id: id_text, file: shard }.into());
                }
                files.push(shard);
            }
        }
        next += 1;
    }
    Ok(Fetched { path: model_path(&plan, &snapshot), commit, files })
}

/// The files a snapshot directory holds (links whose blob is there), as relative paths.
fn snapshot_files(snapshot: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![snapshot.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.is_file()
                && let Ok(relative) = path.strip_prefix(snapshot)
            {
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    files
}
