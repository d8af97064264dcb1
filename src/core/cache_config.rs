//! The paged KV cache's knobs (vLLM's `CacheConfig`): block size, pool size, prefix
//! caching and the K/V element type.

use serde::{Deserialize, Serialize};

/// Element type of the paged K/V pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    /// f16 where the adapter has SHADER_F16, else f32.
    #[default]
    Auto,
    /// Half precision.
    F16,
    /// Single precision.
    F32,
}

/// The paged KV cache: how many blocks of how many tokens, and whether they are shared by prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheConfig {
    /// Tokens per KV block.
    pub block_size: usize,
    /// Blocks in the pool, the null block 0 included.
    pub num_gpu_blocks: usize,
    /// Share full blocks between requests with the same prefix.
    pub enable_prefix_caching: bool,
    /// Element type of the K/V pools.
    pub kv_cache_dtype: KvCacheDtype,
    /// Bytes to give the K/V pools; when set, it decides `num_gpu_blocks` for a real model.
    pub kv_cache_memory: Option<u64>,
    /// Keys a query sees when every layer of the model slides this window (Mistral): blocks
    /// that fell out of a request's window are freed and a prefix-cache hit needs only the
    /// window's blocks. `None` keeps every block (full attention on some layer at least).
    #[serde(default)]
    pub sliding_window: Option<usize>,
}

impl CacheConfig {
    /// Tokens per KV block unless set (vLLM's default).
    pub const DEFAULT_BLOCK_SIZE: usize = 16;
    /// KV blocks in the pool unless set.
    pub const DEFAULT_NUM_GPU_BLOCKS: usize = 1024;
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            block_size: Self::DEFAULT_BLOCK_SIZE,
            num_gpu_blocks: Self::DEFAULT_NUM_GPU_BLOCKS,
            enable_prefix_caching: true,
            kv_cache_dtype: KvCacheDtype::Auto,
            kv_cache_memory: None,
            sliding_window: None,
        }
    }
}
