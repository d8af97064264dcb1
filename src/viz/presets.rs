//! The core's built-in workloads (`workload::BuiltinWorkload`) sized for watching:
//! how many requests, and the cache and scheduler that make sharing, eviction and preemption
//! show up in a pool small enough to see block by block.

use crate::config::{CacheConfig, SchedulerConfig};
use crate::ids::TokenId;
use crate::viz::driver::RequestArrival;
use crate::workload::{BuiltinWorkload, Workload};

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

/// The workload's requests as driver arrivals: ids are the arrivals' indices (as the core's
/// workload runner numbers them), greedy with each arrival's output length, priority and EOS
/// setting, stopping at `eos_token_id` unless told to ignore it.
pub fn arrivals(workload: &Workload, eos_token_id: Option<TokenId>) -> Vec<RequestArrival> {
    let requests = workload.arrivals.iter().enumerate();
    requests
        .map(|(index, arrival)| RequestArrival {
            at_s: arrival.time_s,
            request: arrival.request(index as u64, eos_token_id),
        })
        .collect()
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

    #[test]
    fn arrivals_keep_order_ids_and_settings() {
        let workload = BuiltinWorkload::SharedPrefix.generate(5, 1000, 3);
        let arrivals = arrivals(&workload, Some(2));
        let ids: Vec<u64> = arrivals.iter().map(|a| a.request.request_id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        for (arrival, source) in arrivals.iter().zip(&workload.arrivals) {
            assert_eq!(arrival.at_s, source.time_s);
            assert_eq!(arrival.request.prompt_token_ids, source.prompt_token_ids);
            assert_eq!(arrival.request.sampling_params.max_tokens, source.max_tokens);
            assert!(arrival.request.sampling_params.ignore_eos);
        }
    }
}
