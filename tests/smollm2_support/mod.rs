//! Shared by the SmolLM2 tests: the default model's files and the fixture's `greedy_fp32`
//! reference (an f32 forward pass over the dequantized weights).

#![allow(dead_code)]

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::output::EngineCoreOutput;
use pagoda::core::request::Request;
use pagoda::core::scheduler::Scheduler;
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::{ModelFiles, default_model_path};
use pagoda::sampling::SamplingParams;
use serde_json::Value;

/// One `greedy_fp32` entry of the fixture.
#[derive(Clone)]
pub struct GreedyCase {
    /// The fixture's name for it ("A1", ...).
    pub id: String,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// The reference's greedy continuation.
    pub generated: Vec<u32>,
    /// The reference's ten largest first-position logits, as (token, logit).
    pub top10: Vec<(u32, f64)>,
    /// The reference's margin between its best and second-best logit at each step.
    pub margins: Vec<f64>,
}

/// Every `greedy_fp32` entry, in fixture order.
pub fn greedy_cases() -> Vec<GreedyCase> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/smollm2-135m-instruct-q4_1.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
    fixture["greedy_fp32"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| GreedyCase {
            id: e["id"].as_str().unwrap().to_owned(),
            prompt: ids(&e["prompt_ids"]),
            generated: ids(&e["generated_ids"]),
            top10: e["top10_first"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap()))
                .collect(),
            margins: e["step_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect(),
        })
        .collect()
}

/// The default model (SmolLM2-135M-Instruct Q4_1), fetched by `scripts/fetch-model.sh`.
pub fn smollm2() -> ModelFiles {
    ModelFiles::open(default_model_path().expect("default model")).expect("open SmolLM2")
}

/// Tokens per KV block in the scheduled SmolLM2 tests.
pub const BLOCK: usize = 4;
/// Blocks in the executor's pools; a test's schedulers use at most as many.
pub const EXECUTOR_BLOCKS: usize = 256;
/// Sequences per step, so a prompt longer than this has logits rows past the workspace's
/// head tile (the step's scratch tiles take them).
pub const MAX_SEQS: usize = 8;

/// The scheduled tests' limits: `budget` tokens a step, [`MAX_SEQS`] sequences, 256 tokens.
pub fn scheduler_config(budget: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        max_num_seqs: MAX_SEQS,
        max_model_len: 256,
        ..Default::default()
    }
}

/// A cache of `num_blocks` blocks of [`BLOCK`] tokens with f32 keys and values.
fn cache_config(num_blocks: usize, prefix_caching: bool) -> CacheConfig {
    CacheConfig {
        block_size: BLOCK,
        num_gpu_blocks: num_blocks,
        enable_prefix_caching: prefix_caching,
        kv_cache_dtype: KvCacheDtype::F32,
        ..Default::default()
    }
}

/// The default model on the test device, its pools [`EXECUTOR_BLOCKS`] blocks.
pub fn executor() -> WgpuExecutor {
    executor_for(&scheduler_config(1024))
}

/// [`executor`] sized for the steps `scheduler` makes (speculative decoding's extra logits
/// rows).
pub fn executor_for(scheduler: &SchedulerConfig) -> WgpuExecutor {
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    WgpuExecutor::new(ctx, &smollm2(), &cache_config(EXECUTOR_BLOCKS, true), scheduler, false)
        .expect("executor")
}

/// A scheduler over `num_blocks` of the executor's blocks with a token budget of `budget`.
pub fn scheduler(num_blocks: usize, budget: usize, prefix_caching: bool) -> Scheduler {
    scheduler_with(scheduler_config(budget), num_blocks, prefix_caching)
}

/// A scheduler of `config` over `num_blocks` of the executor's blocks.
pub fn scheduler_with(config: SchedulerConfig, num_blocks: usize, prefix_caching: bool) -> Scheduler {
    assert!(num_blocks <= EXECUTOR_BLOCKS);
    Scheduler::new(config, cache_config(num_blocks, prefix_caching)).unwrap()
}

/// SmolLM2's end-of-sequence token.
pub const EOS: u32 = 2;

/// Queues `requests` (prompt, parameters) on `scheduler` with ids from `first_id`, arriving
/// in the order given, ending at [`EOS`].
pub fn add_requests(scheduler: &mut Scheduler, requests: &[(Vec<u32>, SamplingParams)], first_id: u64) {
    for (i, (prompt, params)) in requests.iter().enumerate() {
        let request = Request::new(first_id + i as u64, prompt.clone(), params.clone(), Some(EOS), i as f64);
        scheduler.add_request(request).unwrap();
    }
}

/// Drives `scheduler` on `exec` until every request finished (schedule, execute without
/// masks, update), handing each output to `each`; returns the tokens computed.
pub fn run_to_completion(
    exec: &mut impl ModelExecutor,
    scheduler: &mut Scheduler,
    mut each: impl FnMut(EngineCoreOutput),
) -> usize {
    let mut computed = 0;
    while scheduler.has_unfinished_requests() {
        let plan = scheduler.schedule();
        computed += plan.total_num_scheduled_tokens;
        let result = if plan.is_empty() {
            Default::default()
        } else {
            exec.execute(&plan, &mut StepMasks::none()).unwrap()
        };
        scheduler.update_from_output(&plan, &result).into_iter().for_each(&mut each);
    }
    computed
}
