//! Hash maps keyed by request id with a cheap multiplicative hash: ids are engine-assigned
//! integers, not attacker-chosen strings, so SipHash's DoS resistance buys nothing on the
//! scheduler's per-step path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::ids::RequestId;

/// A Fibonacci-multiplicative hasher for integer keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map from request id to `V` using `IdHasher`.
pub type IdMap<V> = HashMap<RequestId, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_small_ids_spread_over_buckets() {
        let hashes: std::collections::HashSet<u64> = (0..1000u64)
            .map(|id| {
                let mut hasher = IdHasher::default();
                hasher.write_u64(id);
                hasher.finish() >> 57
            })
            .collect();
        assert_eq!(hashes.len(), 128);
    }
}
