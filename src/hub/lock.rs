//! The per-blob lock: an exclusive `flock` on `.locks/models--ORG--NAME/ETAG.lock`, the file
//! `huggingface_hub` locks, so pagoda processes and Python tools fetching the same file take
//! turns instead of writing it together.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::{HubError, io_error};

/// How often a waiting process tries the lock again.
const POLL: Duration = Duration::from_millis(100);
/// How often a waiting process says it is still waiting.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// A held lock; dropping it releases it (so does the process ending, however it ends).
#[derive(Debug)]
pub struct BlobLock {
    _file: File,
}

impl BlobLock {
    /// Takes the lock at `path`, waiting for whoever holds it (another download of the same
    /// file) however long it takes; `what` names the file in the waiting message.
    pub fn acquire(path: &Path, what: &str) -> Result<Self, HubError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io_error(path))?;
        let started = Instant::now();
        let mut reported = started;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Self { _file: file }),
                Err(TryLockError::WouldBlock) => {
                    if reported.elapsed() >= REPORT_EVERY {
                        reported = Instant::now();
                        tracing::info!(
                            target: "pagoda::hub",
                            "waiting for another process downloading {what} ({} s)",
                            started.elapsed().as_secs()
                        );
                    }
                    std::thread::sleep(POLL);
                }
                Err(TryLockError::Error(source)) => {
                    return Err(HubError::Io { path: path.to_owned(), source });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".locks/x/e.lock");
        let first = BlobLock::acquire(&path, "e").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let _second = BlobLock::acquire(&path, "e").unwrap();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "took a held lock");
        drop(first);
        rx.recv_timeout(Duration::from_secs(5)).expect("never got the released lock");
        waiter.join().unwrap();
    }
}
