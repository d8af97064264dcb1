//! A downloaded blob checked against its ETag before it enters the cache: the Hub's ETag of
//! an LFS file is the SHA-256 of its content, that of a small git file its git blob id
//! (SHA-1 of `blob SIZE\0` and the content).

use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::error::{HubError, io_error};

/// Checks the file at `path` against `etag`; an ETag of neither form is not checked (the
/// size was). `Err` names what the bytes hash to.
pub fn check_etag(path: &Path, etag: &str, file: &str) -> Result<(), HubError> {
    let hex = |text: &str| text.bytes().all(|b| b.is_ascii_hexdigit());
    let actual = match etag.len() {
        64 if hex(etag) => digest::<Sha256>(path, None)?,
        40 if hex(etag) => {
            let size = std::fs::metadata(path).map_err(io_error(path))?.len();
            digest::<Sha1>(path, Some(format!("blob {size}\0").as_bytes()))?
        }
        _ => {
            tracing::debug!(target: "pagoda::hub", "{file}: ETag {etag} is no hash; only its size was checked");
            return Ok(());
        }
    };
    if actual.eq_ignore_ascii_case(etag) {
        Ok(())
    } else {
        Err(HubError::Checksum { file: file.into(), expected: etag.into(), actual })
    }
}

/// The hex digest of `prefix` followed by the file's bytes.
fn digest<D: Digest>(path: &Path, prefix: Option<&[u8]>) -> Result<String, HubError> {
    let mut hasher = D::new();
    if let Some(prefix) = prefix {
        hasher.update(prefix);
    }
    let mut file = std::fs::File::open(path).map_err(io_error(path))?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_of_both_forms_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        // `git hash-object` and `sha256sum` of "hello\n".
        check_etag(&path, "ce013625030ba8dba906f756967f9e9ca394464a", "f").unwrap();
        check_etag(&path, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", "f").unwrap();
        check_etag(&path, "not-a-hash", "f").unwrap();
        let wrong = "0".repeat(64);
        assert!(matches!(check_etag(&path, &wrong, "f"), Err(HubError::Checksum { .. })));
    }
}
