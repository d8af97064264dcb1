//! The engine core: block pool, prefix cache, KV cache manager and scheduler. No GPU code.

pub mod block_hash;
pub mod block_pool;
pub mod output;
