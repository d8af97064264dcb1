//! The Hugging Face cache layout of one repository, as `huggingface_hub` writes it:
//!
//! ```text
//! HF_HUB_CACHE/
//!   CACHEDIR.TAG
//!   .locks/models--ORG--NAME/ETAG.lock
//!   models--ORG--NAME/
//!     blobs/ETAG                      the files' bytes, named by ETag (sha256 or git sha1)
//!     refs/REVISION                   the commit a branch or tag pointed at
//!     snapshots/COMMIT/PATH -> ../../blobs/ETAG
//!     trees/COMMIT.json               the commit's file listing
//! ```
//!
//! The names come from `hf-hub`'s `Cache` and `Repo`; the rest (refs written atomically,
//! locks and tree listings where `huggingface_hub` keeps them) is here.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, CacheRepo, Repo, RepoType};

use super::error::{HubError, io_error};

/// What `huggingface_hub` writes into `CACHEDIR.TAG` (the Cache Directory Tagging Standard).
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by huggingface_hub.\n\
# For information about cache directory tags, see:\n\
#\thttps://bford.info/cachedir/\n";

/// One model repository's place in the cache.
#[derive(Debug)]
pub struct RepoLayout {
    cache_dir: PathBuf,
    repo: Repo,
    cache_repo: CacheRepo,
}

impl RepoLayout {
    /// The layout of model repository `repo_id` (`ORG/NAME`) in `cache_dir`.
    pub fn new(cache_dir: &Path, repo_id: &str) -> Self {
        let repo = Repo::new(repo_id.to_owned(), RepoType::Model);
        let cache_repo = Cache::new(cache_dir.to_owned()).repo(repo.clone());
        Self { cache_dir: cache_dir.to_owned(), repo, cache_repo }
    }

    /// The hf-hub repository (its URL parts).
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// `models--ORG--NAME`.
    pub fn folder(&self) -> PathBuf {
        self.cache_dir.join(self.repo.folder_name())
    }

    /// The blob named `etag`.
    pub fn blob(&self, etag: &str) -> PathBuf {
        self.cache_repo.blob_path(etag)
    }

    /// The snapshot directory of `commit`.
    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.cache_repo.pointer_path(commit)
    }

    /// The lock of the blob named `etag`.
    pub fn lock(&self, etag: &str) -> PathBuf {
        self.locks_folder().join(format!("{etag}.lock"))
    }

    /// `.locks/models--ORG--NAME`.
    pub fn locks_folder(&self) -> PathBuf {
        self.cache_dir.join(".locks").join(self.repo.folder_name())
    }

    /// `trees/COMMIT.json`.
    pub fn tree(&self, commit: &str) -> PathBuf {
        self.folder().join("trees").join(format!("{commit}.json"))
    }

    /// The commit `revision` names: itself when it is a full commit hash, else what
    /// `refs/REVISION` holds.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) {
            return Some(revision.to_owned());
        }
        let text = std::fs::read_to_string(self.folder().join("refs").join(revision)).ok()?;
        let commit = text.trim();
        is_commit_hash(commit).then(|| commit.to_owned())
    }

    /// Records that `revision` points at `commit` (nothing for a commit itself), replacing
    /// the ref atomically and only when it changed.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit || self.commit_of(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        let path = self.folder().join("refs").join(revision);
        write_atomic(&path, commit.as_bytes())
    }

    /// Writes `CACHEDIR.TAG` at the cache's root unless it is there.
    pub fn write_cachedir_tag(&self) -> Result<(), HubError> {
        let path = self.cache_dir.join("CACHEDIR.TAG");
        if path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.cache_dir).map_err(io_error(&self.cache_dir))?;
        std::fs::write(&path, CACHEDIR_TAG).map_err(io_error(path))
    }
}

/// A full 40-digit lowercase hex commit hash.
pub fn is_commit_hash(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename, so a reader
/// sees the old or the new content, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HubError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        HubError::Io { path: path.to_owned(), source }
    })
}

/// The path of `target` relative to the directory `from` (both inside the cache), as the
/// snapshot links are written: `../../blobs/ETAG`.
pub fn relative_to(target: &Path, from: &Path) -> PathBuf {
    let target: Vec<_> = target.components().collect();
    let from: Vec<_> = from.components().collect();
    let common = target.iter().zip(&from).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &target[common..] {
        path.push(part);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_huggingface_hub() {
        let layout = RepoLayout::new(Path::new("/c"), "Org/Name");
        assert_eq!(layout.folder(), Path::new("/c/models--Org--Name"));
        assert_eq!(layout.blob("abc"), Path::new("/c/models--Org--Name/blobs/abc"));
        assert_eq!(layout.snapshot("c0"), Path::new("/c/models--Org--Name/snapshots/c0"));
        assert_eq!(layout.lock("abc"), Path::new("/c/.locks/models--Org--Name/abc.lock"));
        assert_eq!(layout.tree("c0"), Path::new("/c/models--Org--Name/trees/c0.json"));
        let link = relative_to(Path::new("/c/m/blobs/e"), Path::new("/c/m/snapshots/c0/sub"));
        assert_eq!(link, Path::new("../../../blobs/e"));
    }

    #[test]
    fn refs_resolve_to_commits() {
        let dir = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(dir.path(), "o/n");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(layout.commit_of("main"), None);
        layout.write_ref("main", commit).unwrap();
        layout.write_ref("refs/pr/1", commit).unwrap();
        assert_eq!(layout.commit_of("main").as_deref(), Some(commit));
        assert_eq!(layout.commit_of("refs/pr/1").as_deref(), Some(commit));
        assert_eq!(layout.commit_of(commit).as_deref(), Some(commit));
        assert_eq!(std::fs::read_to_string(layout.folder().join("refs/main")).unwrap(), commit);
    }
}
