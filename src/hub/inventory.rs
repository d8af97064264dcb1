//! What the cache holds (`pagoda models`) and taking a model out of it (`pagoda rm`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::error::{HubError, io_error};
use super::id::{HubId, Selector};
use super::layout::RepoLayout;
use super::select::{Plan, plan};

/// One snapshot of a cached model repository.
#[derive(Debug, Clone)]
pub struct CachedSnapshot {
    /// `ORG/NAME`.
    pub repo: String,
    /// The commit.
    pub commit: String,
    /// The branches and tags (`refs/`) that point at it.
    pub refs: Vec<String>,
    /// Its directory.
    pub dir: PathBuf,
    /// Its files (paths in the snapshot) whose blobs are present, with their sizes.
    pub files: Vec<(String, u64)>,
}

/// Every snapshot of every model repository in `cache_dir`, sorted by repository.
pub fn scan(cache_dir: &Path) -> Vec<CachedSnapshot> {
    let mut snapshots = Vec::new();
    let Ok(entries) = std::fs::read_dir(cache_dir) else { return snapshots };
    let mut repos: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("models--").map(|r| r.replacen("--", "/", 1)))
        .collect();
    repos.sort();
    for repo in repos {
        let layout = RepoLayout::new(cache_dir, &repo);
        let refs = refs_of(&layout.folder().join("refs"));
        let Ok(commits) = std::fs::read_dir(layout.folder().join("snapshots")) else { continue };
        for commit in commits.flatten().filter_map(|e| e.file_name().to_str().map(str::to_owned)) {
            let dir = layout.snapshot(&commit);
            let files = files_of(&dir);
            let refs = refs.iter().filter(|(_, c)| *c == commit).map(|(r, _)| r.clone()).collect();
            snapshots.push(CachedSnapshot { repo: repo.clone(), commit, refs, dir, files });
        }
    }
    snapshots
}

/// `(ref, commit)` for every file under `refs/`.
fn refs_of(dir: &Path) -> Vec<(String, String)> {
    let read =
        |(name, path): (String, PathBuf)| Some((name, std::fs::read_to_string(path).ok()?.trim().to_owned()));
    let mut refs: Vec<_> = files_under(dir).into_iter().filter_map(read).collect();
    refs.sort();
    refs
}

/// The files of a snapshot whose blobs are present, with their sizes.
fn files_of(dir: &Path) -> Vec<(String, u64)> {
    let size = |(name, path): (String, PathBuf)| Some((name, std::fs::metadata(path).ok()?.len()));
    let mut files: Vec<_> = files_under(dir).into_iter().filter_map(size).collect();
    files.sort();
    files
}

/// Every file below `dir`: its `/`-separated path relative to `dir`, and its path.
fn files_under(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(name) = path.strip_prefix(dir) {
                let name = name.to_string_lossy().replace('\\', "/");
                files.push((name, path));
            }
        }
    }
    files
}

/// Takes `id` out of the cache: the whole repository for `ORG/NAME`; for `ORG/NAME:QUANT`
/// or `ORG/NAME/FILE.gguf`, that GGUF's links, and its blobs when no snapshot links them
/// any more (the repository goes when nothing is left). With `@REVISION`, only that
/// revision's snapshot. Returns the bytes freed.
pub fn remove(cache_dir: &Path, id: &HubId) -> Result<u64, HubError> {
    let layout = RepoLayout::new(cache_dir, &id.repo);
    let not_cached = || HubError::NotCached { id: id.to_string(), cache: cache_dir.to_owned() };
    if !layout.folder().is_dir() {
        return Err(not_cached());
    }
    let snapshots: Vec<CachedSnapshot> = scan(cache_dir)
        .into_iter()
        .filter(|s| s.repo == id.repo)
        .filter(|s| id.revision.is_none() || Some(&s.commit) == layout.commit_of(id.revision()).as_ref())
        .collect();
    if id.selector == Selector::Default && id.revision.is_none() {
        let freed = blob_bytes(&layout.folder().join("blobs"));
        remove_tree(&layout.folder())?;
        remove_tree(&layout.locks_folder())?;
        return Ok(freed);
    }
    let mut removed = 0;
    for snapshot in &snapshots {
        let listing: Vec<String> = snapshot.files.iter().map(|(f, _)| f.clone()).collect();
        let files = match (&id.selector, plan(id, &listing)) {
            (Selector::Default, _) => listing.clone(),
            (_, Ok(Plan::Gguf(parts))) => parts,
            _ => continue,
        };
        for file in files {
            let pointer = snapshot.dir.join(&file);
            std::fs::remove_file(&pointer).map_err(io_error(&pointer))?;
            removed += 1;
        }
    }
    if removed == 0 {
        return Err(not_cached());
    }
    collect_garbage(&layout)
}

/// Deletes the blobs no snapshot links, empty snapshot directories, and the repository
/// when no snapshot is left; returns the bytes freed.
fn collect_garbage(layout: &RepoLayout) -> Result<u64, HubError> {
    let snapshots = layout.folder().join("snapshots");
    let mut linked = HashSet::new();
    let mut any = false;
    for entry in std::fs::read_dir(&snapshots).into_iter().flatten().flatten() {
        let dir = entry.path();
        let mut stack = vec![dir.clone()];
        let mut holds = false;
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = e.path();
                if path.is_dir() && !path.is_symlink() {
                    stack.push(path);
                } else {
                    holds = true;
                    if let Ok(target) = std::fs::canonicalize(&path) {
                        linked.insert(target);
                    }
                }
            }
        }
        any |= holds;
        if !holds {
            remove_tree(&dir)?;
        }
    }
    let blobs = layout.folder().join("blobs");
    if !any {
        let freed = blob_bytes(&blobs);
        remove_tree(&layout.folder())?;
        remove_tree(&layout.locks_folder())?;
        return Ok(freed);
    }
    let mut freed = 0;
    for entry in std::fs::read_dir(&blobs).into_iter().flatten().flatten() {
        let path = entry.path();
        if std::fs::canonicalize(&path).is_ok_and(|p| !linked.contains(&p)) {
            freed += entry.metadata().map_or(0, |m| m.len());
            std::fs::remove_file(&path).map_err(io_error(&path))?;
        }
    }
    Ok(freed)
}

fn blob_bytes(blobs: &Path) -> u64 {
    std::fs::read_dir(blobs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn remove_tree(path: &Path) -> Result<(), HubError> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(HubError::Io { path: path.to_owned(), source: e })
        }
        _ => Ok(()),
    }
}
