//! One file of a commit into the cache: its metadata asked of the Hub, its blob downloaded
//! under the blob's lock into `blobs/ETAG.incomplete` (resumed with a range request after an
//! interruption, in this run or a later one), checked against its ETag and size, renamed to
//! `blobs/ETAG`, and linked from `snapshots/COMMIT/PATH`.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use super::client::{Failure, FileMetadata, HubClient};
use super::error::{HubError, io_error};
use super::layout::{RepoLayout, relative_to};
use super::lock::BlobLock;
use super::progress::Progress;
use super::settings::ProgressStyle;
use super::verify::check_etag;

/// Attempts in a row that may fail without a byte arriving before a download gives up.
const MAX_FAILURES: u32 = 4;

/// Fetches `file` of `id` at `commit` unless the snapshot already holds it.
pub fn fetch_file(
    client: &HubClient,
    layout: &RepoLayout,
    id: &str,
    commit: &str,
    file: &str,
    style: ProgressStyle,
) -> Result<(), Failure> {
    let pointer = layout.snapshot(commit).join(file);
    if pointer.exists() {
        return Ok(());
    }
    let url = client.file_url(layout.repo(), commit, file);
    let meta = client.metadata(&url, id, commit, file)?;
    let blob = layout.blob(&meta.etag);
    layout.write_cachedir_tag()?;
    let _lock = BlobLock::acquire(&layout.lock(&meta.etag), file)?;
    if !blob.exists() {
        download_blob(client, &meta, &blob, id, file, style)?;
    }
    link(&blob, &pointer)?;
    Ok(())
}

/// Downloads the blob `meta` describes to `blob` (the caller holds its lock).
fn download_blob(
    client: &HubClient,
    meta: &FileMetadata,
    blob: &Path,
    id: &str,
    file: &str,
    style: ProgressStyle,
) -> Result<(), Failure> {
    let dir = blob.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let incomplete = blob.with_file_name(format!("{}.incomplete", meta.etag));
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&incomplete)
        .map_err(io_error(&incomplete))?;
    let mut have = out.metadata().map_err(io_error(&incomplete))?.len();
    if meta.size.is_some_and(|size| have > size) {
        out.set_len(0).map_err(io_error(&incomplete))?;
        have = 0;
    }
    let mut progress = Progress::start(style, file, meta.size, have);
    let mut failures = 0;
    let mut last_error = String::new();
    while meta.size != Some(have) {
        if failures >= MAX_FAILURES {
            return Err(HubError::Download { file: file.into(), reason: last_error }.into());
        }
        let before = have;
        match client.open(&meta.location, have, id, file) {
            Ok((status, mut body)) => {
                if status == 200 && have > 0 {
                    out.set_len(0).map_err(io_error(&incomplete))?;
                    have = 0;
                    progress.restart_at(0);
                }
                match copy(&mut body, &mut out, &mut have, &mut progress) {
                    Ok(()) if meta.size.is_none() => break,
                    Ok(()) => last_error = format!("the connection closed at {have} bytes"),
                    Err(CopyError::Network(e)) => last_error = e,
                    Err(CopyError::Disk(source)) => {
                        return Err(HubError::Io { path: incomplete.clone(), source }.into());
                    }
                }
            }
            Err(Failure::Network(e)) => last_error = e,
            Err(failure) => return Err(failure),
        }
        if have > before {
            failures = 0;
        } else {
            failures += 1;
            std::thread::sleep(Duration::from_millis(200 << failures.min(4)));
        }
        if meta.size.is_some_and(|size| have > size) {
            break;
        }
        tracing::debug!(target: "pagoda::hub", "{file}: {last_error}; resuming at {have} bytes");
    }
    out.flush().map_err(io_error(&incomplete))?;
    drop(out);
    let checked = match meta.size {
        Some(size) if size != have => Err(HubError::Checksum {
            file: file.into(),
            expected: format!("{size} bytes"),
            actual: format!("{have} bytes"),
        }),
        _ => check_etag(&incomplete, &meta.etag, file),
    };
    if let Err(error) = checked {
        let _ = std::fs::remove_file(&incomplete);
        return Err(error.into());
    }
    std::fs::rename(&incomplete, blob).map_err(io_error(blob))?;
    progress.finish();
    Ok(())
}

enum CopyError {
    Network(String),
    Disk(std::io::Error),
}

/// Copies the body to the file until it ends, counting in `have`.
fn copy(
    body: &mut dyn Read,
    out: &mut std::fs::File,
    have: &mut u64,
    progress: &mut Progress,
) -> Result<(), CopyError> {
    let mut buffer = vec![0u8; 256 << 10];
    loop {
        let n = match body.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Network(e.to_string())),
        };
        out.write_all(&buffer[..n]).map_err(CopyError::Disk)?;
        *have += n as u64;
        progress.advance(n as u64);
    }
}

/// Links `pointer` to `blob` with a relative symbolic link (a copy where the file system
/// has no links).
fn link(blob: &Path, pointer: &Path) -> Result<(), HubError> {
    let dir = pointer.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    if std::fs::symlink_metadata(pointer).is_ok() {
        std::fs::remove_file(pointer).map_err(io_error(pointer))?;
    }
    let target = relative_to(blob, dir);
    #[cfg(unix)]
    let linked = std::os::unix::fs::symlink(&target, pointer);
    #[cfg(windows)]
    let linked = std::os::windows::fs::symlink_file(&target, pointer);
    #[cfg(not(any(unix, windows)))]
    let linked: std::io::Result<()> = Err(std::io::ErrorKind::Unsupported.into());
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(_) => std::fs::copy(blob, pointer).map(drop).map_err(io_error(pointer)),
    }
}
