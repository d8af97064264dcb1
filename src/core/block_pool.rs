//! The KV block pool.

/// Index of a KV block in the pool; block 0 is the null block.
pub type BlockId = u32;
