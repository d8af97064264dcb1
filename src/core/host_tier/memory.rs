//! Free host memory, so a host tier larger than the machine can hold is refused at start.

use super::HostTierError;

/// Bytes of memory available now (`MemAvailable` in /proc/meminfo); `None` where the
/// system does not say.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses `size_bytes` when more than the free memory (allowed where unknown).
pub fn check_free(size_bytes: u64) -> Result<(), HostTierError> {
    match available_bytes() {
        Some(available_bytes) if size_bytes > available_bytes => {
            Err(HostTierError::ExceedsFreeMemory { size_bytes, available_bytes })
        }
        _ => Ok(()),
    }
}
