//! The host KV tier on the wgpu executor: blocks stored to host memory and loaded back give
//! the same tokens and the same logprob bits as recomputing them, for SmolLM2 with f32 and
//! f16 KV (greedy and seeded requests, repeated preemption on a tiny pool, prefix caching,
//! returning requests), for every family pagoda runs, and when a store fails for real.

mod smollm2_support;

use std::collections::HashMap;
use std::path::PathBuf;

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::metrics::SchedulerStats;
use pagoda::core::request::Request;
use pagoda::core::scheduler::Scheduler;
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::run_step;
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::ModelFiles;
use pagoda::sampling::SamplingParams;
use smollm2_support::{greedy_cases, smollm2};

/// Tokens per block: small, so that short prompts fill several.
const BLOCK: usize = 4;
/// Blocks in the executor's pools; the schedulers use fewer.
const EXECUTOR_BLOCKS: usize = 64;
/// Host tier size, GiB (a few hundred SmolLM2 blocks).
const HOST_GIB: f64 = 0.125;

fn cache(num_blocks: usize, dtype: KvCacheDtype, host_gib: f64, block_bytes: u64) -> CacheConfig {
    CacheConfig {
        block_size: BLOCK,
        num_gpu_blocks: num_blocks,
        enable_prefix_caching: true,
        kv_cache_dtype: dtype,
        kv_offloading_size: host_gib,
        kv_block_bytes: block_bytes,
        ..CacheConfig::default()
    }
}

fn scheduler_config() -> SchedulerConfig {
    SchedulerConfig { max_num_batched_tokens: 64, max_num_seqs: 4, max_model_len: 128, ..Default::default() }
}

/// `files` on the test device with a host tier, its pools [`EXECUTOR_BLOCKS`] blocks.
fn executor(files: &ModelFiles, dtype: KvCacheDtype) -> WgpuExecutor {
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    WgpuExecutor::new(ctx, files, &cache(EXECUTOR_BLOCKS, dtype, HOST_GIB, 0), &scheduler_config(), false)
        .expect("executor")
}

/// Request `i`'s sampling: greedy, or seeded at temperature 0.8; both with the sampled
/// token's logprob, whose bits the runs compare.
fn params(i: usize, max_tokens: usize) -> SamplingParams {
    let greedy = SamplingParams { logprobs: Some(0), ..SamplingParams::greedy(max_tokens) };
    match i % 2 {
        0 => greedy,
        _ => SamplingParams { temperature: 0.8, seed: Some(1000 + i as u64), ..greedy },
    }
}

/// Each request's tokens and their logprobs' bits, in request order.
type Outputs = Vec<(Vec<u32>, Vec<u32>)>;

/// Runs `waves` of prompts through a scheduler over `num_blocks` blocks (each wave arrives
/// once the one before has finished: returning requests), with or without the host tier.
fn run(
    exec: &mut WgpuExecutor,
    waves: &[Vec<Vec<u32>>],
    num_blocks: usize,
    dtype: KvCacheDtype,
    tier: bool,
    max_tokens: usize,
) -> (Outputs, SchedulerStats) {
    let host_gib = if tier { HOST_GIB } else { 0.0 };
    let cache = cache(num_blocks, dtype, host_gib, exec.kv_block_bytes());
    let mut scheduler = Scheduler::new(scheduler_config(), cache).unwrap();
    let mut outputs: HashMap<u64, (Vec<u32>, Vec<u32>)> = HashMap::new();
    let mut next_id = 0u64;
    for wave in waves {
        for prompt in wave {
            let i = next_id as usize;
            let request = Request::new(next_id, prompt.clone(), params(i, max_tokens), None, i as f64);
            scheduler.add_request(request).unwrap();
            next_id += 1;
        }
        while scheduler.has_unfinished_requests() {
            let (_, outs) = run_step(&mut scheduler, exec, |_, _| None).expect("step");
            for out in outs {
                let entry = outputs.entry(out.request_id).or_default();
                entry.0.extend(&out.new_token_ids);
                entry.1.extend(out.new_logprobs.iter().map(|l| l.logprob.to_bits()));
            }
        }
    }
    let outputs = (0..next_id).map(|id| outputs.remove(&id).unwrap_or_default()).collect();
    (outputs, scheduler.stats())
}

/// Four of the fixture's prompts (37, 7, 38 and 10 tokens), twice: the second wave returns
/// after the first filled the pool.
fn smollm2_waves() -> Vec<Vec<Vec<u32>>> {
    let prompts: Vec<Vec<u32>> = greedy_cases().into_iter().skip(1).take(4).map(|case| case.prompt).collect();
    vec![prompts.clone(), prompts]
}

/// Blocks of the SmolLM2 runs' pool: the longest request alone takes 11.
const SMOLLM2_BLOCKS: usize = 14;
/// Tokens each SmolLM2 request generates.
const SMOLLM2_TOKENS: usize = 4;

/// Runs SmolLM2 with and without the tier on a tiny pool and checks the outputs agree bit
/// for bit while the tier stored, loaded and saved recomputation; returns the executor and
/// the outputs without the tier.
fn smollm2_matches(dtype: KvCacheDtype) -> (WgpuExecutor, Outputs) {
    let files = smollm2();
    let mut exec = executor(&files, dtype);
    let waves = smollm2_waves();
    let (plain, plain_stats) = run(&mut exec, &waves, SMOLLM2_BLOCKS, dtype, false, SMOLLM2_TOKENS);
    let (tiered, stats) = run(&mut exec, &waves, SMOLLM2_BLOCKS, dtype, true, SMOLLM2_TOKENS);
    let host = stats.host_tier.expect("the tier is on");
    eprintln!(
        "{dtype:?}: {} preemptions; recomputed {} -> {} tokens; host stored {}, loaded {}, copy {:.2} ms",
        stats.num_preemptions,
        plain_stats.num_recomputed_tokens,
        stats.num_recomputed_tokens,
        host.num_stored_blocks,
        host.num_loaded_blocks,
        host.copy_seconds * 1e3
    );
    assert!(plain_stats.num_preemptions > 0 && stats.num_preemptions > 0, "the pool must preempt");
    assert!(host.num_stored_blocks > 0 && host.num_loaded_blocks > 0, "{host:?}");
    assert_eq!(host.num_failed_copies, 0);
    assert!(stats.num_recomputed_tokens < plain_stats.num_recomputed_tokens);
    assert_eq!(tiered, plain, "{dtype:?}: the tier changed an output");
    assert!(plain.iter().all(|(tokens, _)| tokens.len() == SMOLLM2_TOKENS));
    (exec, plain)
}

#[test]
fn smollm2_f32_kv_outputs_are_the_same_bits_with_the_tier_and_when_a_store_fails() {
    let dtype = KvCacheDtype::F32;
    let (mut exec, plain) = smollm2_matches(dtype);
    // The first stores' command buffer is invalid: those blocks are forgotten (a returning
    // request recomputes them), later ones still load.
    assert!(exec.fail_next_host_store());
    let (tiered, stats) = run(&mut exec, &smollm2_waves(), SMOLLM2_BLOCKS, dtype, true, SMOLLM2_TOKENS);
    let host = stats.host_tier.unwrap();
    assert!(host.num_failed_copies > 0, "{host:?}");
    assert!(host.num_loaded_blocks > 0, "later stores still load: {host:?}");
    assert_eq!(tiered, plain);
}

#[test]
fn smollm2_f16_kv_outputs_are_the_same_bits_with_the_tier() {
    smollm2_matches(KvCacheDtype::F16);
}

/// The families pagoda runs (as tests/model_families.rs), with Gemma 2's sliding-window
/// layers beside full ones (a uniform window is refused: tests/core_host_tier.rs).
const FAMILIES: [&str; 7] = ["llama", "llama-rope-parameters", "qwen2", "qwen3", "gemma3", "phi3", "gemma2"];

/// Prompts of `len` tokens over the first ids of the vocabulary, sharing their first half.
fn family_waves(len: usize) -> Vec<Vec<Vec<u32>>> {
    let prompt = |salt: u32| -> Vec<u32> {
        (0..len as u32).map(|i| if i < len as u32 / 2 { 100 + i } else { 300 + 7 * i + 31 * salt }).collect()
    };
    let first: Vec<Vec<u32>> = (0..3).map(prompt).collect();
    vec![first.clone(), first]
}

#[test]
fn every_family_gives_the_same_bits_with_the_tier() {
    let dir = std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints");
    let dtype = KvCacheDtype::F16;
    for name in FAMILIES {
        let files = ModelFiles::open(dir.join(name).join(format!("{name}.f16.gguf"))).unwrap();
        let mut exec = executor(&files, dtype);
        let waves = family_waves(16);
        let (plain, plain_stats) = run(&mut exec, &waves, 9, dtype, false, 3);
        let (tiered, stats) = run(&mut exec, &waves, 9, dtype, true, 3);
        let host = stats.host_tier.unwrap();
        eprintln!(
            "{name}: {} preemptions, recomputed {} -> {}, loaded {} blocks",
            stats.num_preemptions,
            plain_stats.num_recomputed_tokens,
            stats.num_recomputed_tokens,
            host.num_loaded_blocks
        );
        assert!(host.num_loaded_blocks > 0, "{name}: {host:?}");
        assert_eq!(tiered, plain, "{name}: the tier changed an output");
    }
}
