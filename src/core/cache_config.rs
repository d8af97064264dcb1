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
    /// True when some layers slide a window and others attend to every token (Gemma 2/3):
    /// the full layers need every block, so the pool bounds a sequence as under full
    /// attention, and a refusal for a pool too small says why.
    #[serde(default)]
    pub full_layers_beside_sliding: bool,
    /// GiB of host memory for the host KV tier (vLLM's `--kv-offloading-size`); 0 = off.
    #[serde(default)]
    pub kv_offloading_size: f64,
    /// Bytes of one KV block, every layer, K and V, in the cache's dtype: sizes the host
    /// tier in blocks. Set by whoever knows the model (the engine, the simulator).
    #[serde(default)]
    pub kv_block_bytes: u64,
}

impl CacheConfig {
    /// Tokens per KV block unless set (vLLM's default).
    pub const DEFAULT_BLOCK_SIZE: usize = 16;
    /// KV blocks in the pool unless set.
    pub const DEFAULT_NUM_GPU_BLOCKS: usize = 1024;

    /// The most blocks one request's block table holds, the null blocks standing in for
    /// freed ones included: `max_model_len`'s. Where every block stays (no uniform sliding
    /// window) a request never holds more than the pool, so the pool caps it; under a sliding
    /// window a sequence may outgrow the pool (the blocks behind its window are freed), so
    /// only `max_model_len` does. The scheduler and every executor size tables by this.
    pub fn max_blocks_per_seq(&self, max_model_len: usize) -> usize {
        let blocks = max_model_len.div_ceil(self.block_size.max(1));
        match self.sliding_window.filter(|&w| w > 0) {
            Some(_) => blocks,
            None => blocks.min(self.num_gpu_blocks),
        }
    }
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
            full_layers_beside_sliding: false,
            kv_offloading_size: 0.0,
            kv_block_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_tables_reach_max_model_len_under_a_window_and_the_pool_otherwise() {
        let full = CacheConfig { block_size: 4, num_gpu_blocks: 12, ..CacheConfig::default() };
        assert_eq!(full.max_blocks_per_seq(8192), 12);
        assert_eq!(full.max_blocks_per_seq(30), 8);
        let sliding = CacheConfig { sliding_window: Some(16), ..full.clone() };
        assert_eq!(sliding.max_blocks_per_seq(8192), 2048);
        let mixed = CacheConfig { full_layers_beside_sliding: true, ..full };
        assert_eq!(mixed.max_blocks_per_seq(8192), 12);
    }
}
