//! The identifiers every layer shares: tokens, requests, KV blocks and block hashes.
//!
//! A leaf module: it imports nothing from the crate, so any module may use it.

/// A token id of the model's vocabulary.
pub type TokenId = u32;

/// Identifies a request inside one engine.
pub type RequestId = u64;

/// Index of a KV block in the pool; block 0 is the null block.
pub type BlockId = u32;

/// A full block's chained 128-bit hash (see `core::block_hash`).
pub type BlockHash = u128;
