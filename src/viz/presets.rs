//! The core's built-in workloads (`workload::BuiltinWorkload`) sized for watching:
//! how many requests, and the cache and scheduler that make sharing, eviction and preemption
//! show up in a pool small enough to see block by block.

use crate::core::cache_config::CacheConfig;
use crate::core::scheduler_config::SchedulerConfig;
use crate::workload::BuiltinWorkload;

/// A workload's size and the cache and scheduler it is meant to run on.
#[derive(Debug, Clone, PartialEq)]
pub struct VizPreset {
    /// Requests drawn from the workload.
    pub num_requests: usize,
    /// KV cache sizes.
    pub cache: CacheConfig,
    /// Scheduler limits.
    pub scheduler: SchedulerConfig,
}

/// The preset of `workload`.
pub fn preset(workload: BuiltinWorkload) -> VizPreset {
    // (requests, blocks of 16 tokens, batched tokens, running requests, max model length)
    let (num_requests, num_gpu_blocks, max_num_batched_tokens, max_num_seqs, max_model_len) = match workload {
        // Four 256-token system prompts (16 blocks each) shared by every request.
        BuiltinWorkload::SharedPrefix => (64, 384, 512, 24, 1024),
        // Prompts of 8..32 blocks and outputs of 16..32 more, all at once, in 159 blocks.
        BuiltinWorkload::MemoryPressure => (24, 160, 256, 16, 1024),
        // Independent prompts and outputs of mixed lengths.
        BuiltinWorkload::Random => (48, 320, 512, 16, 1024),
        // Prompts of 64..256 blocks, prefilled in 512-token chunks.
        BuiltinWorkload::LongPrompt => (12, 384, 512, 8, 4224),
        // Prompts of 9..18 blocks that the answers copy, outputs of 2..8 blocks.
        BuiltinWorkload::InputGrounded => (16, 320, 512, 16, 1024),
        // Twelve conversations of up to 30 blocks coming back four times, in 96 blocks.
        BuiltinWorkload::MultiTurnChat => (48, 96, 512, 8, 1024),
    };
    VizPreset {
        num_requests,
        cache: CacheConfig { block_size: 16, num_gpu_blocks, ..CacheConfig::default() },
        scheduler: SchedulerConfig {
            max_num_batched_tokens,
            max_num_seqs,
            max_model_len,
            ..SchedulerConfig::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_of_every_preset_fits_its_cache_and_model_length() {
        for workload in BuiltinWorkload::ALL {
            let preset = preset(workload);
            let usable = preset.cache.num_gpu_blocks - 1;
            let generated = workload.generate(preset.num_requests, 32_000, 0);
            assert_eq!(generated.arrivals.len(), preset.num_requests);
            for arrival in &generated.arrivals {
                let prompt = arrival.prompt_token_ids.len();
                assert!(prompt <= preset.scheduler.max_model_len, "{}: prompt {prompt}", workload.name());
                assert!(prompt.div_ceil(preset.cache.block_size) <= usable, "{}", workload.name());
            }
        }
    }
}
