//! Built-in workloads for watching the cache on the simulated executor: prefix sharing and
//! memory pressure, each with the cache and scheduler sizes that make it visible.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{CacheConfig, SchedulerConfig};
use crate::request::{Request, TokenId};
use crate::sampling::SamplingParams;
use crate::viz::driver::Arrival;

/// A built-in workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VizWorkload {
    /// Groups of requests share long system prompts and hit each other's blocks; late
    /// arrivals revive cached-free blocks.
    SharedPrefix,
    /// Long generations in a small pool: blocks run out, the newest requests are preempted
    /// and later resume, re-hitting what is still cached of their own blocks.
    MemoryPressure,
}

/// A workload with the cache and scheduler it is meant to run on.
#[derive(Debug, Clone)]
pub struct WorkloadSetup {
    /// KV cache sizes.
    pub cache: CacheConfig,
    /// Scheduler limits.
    pub scheduler: SchedulerConfig,
    /// Requests and their arrival times.
    pub arrivals: Vec<Arrival>,
}

/// Vocabulary the prompts are drawn from (the sim executor's default).
const VOCAB: u32 = 32_000;

/// The requests and sizes of `workload`; the same seed gives the same workload.
pub fn build(workload: VizWorkload, seed: u64) -> WorkloadSetup {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    match workload {
        VizWorkload::SharedPrefix => shared_prefix(&mut rng),
        VizWorkload::MemoryPressure => memory_pressure(&mut rng),
    }
}

fn tokens(rng: &mut ChaCha8Rng, n: usize) -> Vec<TokenId> {
    (0..n).map(|_| rng.random_range(3..VOCAB)).collect()
}

fn arrival(id: u64, at_s: f64, prompt: Vec<TokenId>, max_tokens: usize) -> Arrival {
    let mut params = SamplingParams::greedy(max_tokens);
    params.ignore_eos = true;
    Arrival { at_s, request: Request::new(id, prompt, params, None, at_s) }
}

/// Arrivals spread with exponential gaps of mean `mean_gap_s`.
fn next_time(rng: &mut ChaCha8Rng, now: f64, mean_gap_s: f64) -> f64 {
    let u: f64 = rng.random_range(1e-6..1.0);
    now - mean_gap_s * u.ln()
}

fn shared_prefix(rng: &mut ChaCha8Rng) -> WorkloadSetup {
    let groups: Vec<Vec<TokenId>> = (0..4).map(|g| tokens(rng, 48 + 16 * g)).collect();
    let mut arrivals = Vec::new();
    let mut at = 0.0;
    for id in 1..=64u64 {
        let mut prompt = groups[(id as usize) % groups.len()].clone();
        let user = rng.random_range(8..40);
        prompt.extend(tokens(rng, user));
        let max_tokens = rng.random_range(16..72);
        arrivals.push(arrival(id, at, prompt, max_tokens));
        at = next_time(rng, at, 0.015);
    }
    WorkloadSetup {
        cache: CacheConfig { block_size: 16, num_gpu_blocks: 384, ..CacheConfig::default() },
        scheduler: SchedulerConfig {
            max_num_batched_tokens: 512,
            max_num_seqs: 24,
            max_model_len: 1024,
            ..SchedulerConfig::default()
        },
        arrivals,
    }
}

fn memory_pressure(rng: &mut ChaCha8Rng) -> WorkloadSetup {
    let groups: Vec<Vec<TokenId>> = (0..2).map(|_| tokens(rng, 32)).collect();
    let mut arrivals = Vec::new();
    let mut at = 0.0;
    for id in 1..=28u64 {
        let mut prompt = groups[(id as usize) % groups.len()].clone();
        let user = rng.random_range(24..120);
        prompt.extend(tokens(rng, user));
        let max_tokens = rng.random_range(120..320);
        arrivals.push(arrival(id, at, prompt, max_tokens));
        at = next_time(rng, at, 0.02);
    }
    WorkloadSetup {
        cache: CacheConfig { block_size: 16, num_gpu_blocks: 160, ..CacheConfig::default() },
        scheduler: SchedulerConfig {
            max_num_batched_tokens: 256,
            max_num_seqs: 16,
            max_model_len: 1024,
            ..SchedulerConfig::default()
        },
        arrivals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload() {
        let a = build(VizWorkload::SharedPrefix, 3);
        let b = build(VizWorkload::SharedPrefix, 3);
        let prompts = |s: &WorkloadSetup| {
            s.arrivals.iter().map(|a| a.request.prompt_token_ids.clone()).collect::<Vec<_>>()
        };
        assert_eq!(prompts(&a), prompts(&b));
        assert_ne!(prompts(&a), prompts(&build(VizWorkload::SharedPrefix, 4)));
    }

    #[test]
    fn arrivals_are_ordered_and_ids_unique() {
        for workload in [VizWorkload::SharedPrefix, VizWorkload::MemoryPressure] {
            let setup = build(workload, 0);
            assert!(setup.arrivals.windows(2).all(|w| w[0].at_s <= w[1].at_s));
            let mut ids: Vec<u64> = setup.arrivals.iter().map(|a| a.request.request_id).collect();
            ids.dedup();
            assert_eq!(ids.len(), setup.arrivals.len());
        }
    }
}
