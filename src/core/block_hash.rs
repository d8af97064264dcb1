//! Chained 128-bit hashes of full KV blocks.

/// A full block's chained hash.
pub type BlockHash = u128;
