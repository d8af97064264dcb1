//! Helpers shared by the engine-core integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

use pagoda::core::output::{EngineCoreOutput, ModelRunnerOutput, SchedulerOutput};
use pagoda::core::scheduler::Scheduler;
use pagoda::executor::sim::{SimConfig, SimExecutor};
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::{CacheConfig, Request, RequestId, SamplingParams, SchedulerConfig, TokenId};

/// A cache of `num_gpu_blocks` blocks of 16 tokens with prefix caching on.
pub fn cache(num_gpu_blocks: usize) -> CacheConfig {
    CacheConfig { block_size: 16, num_gpu_blocks, ..CacheConfig::default() }
}

/// A scheduler with a budget of `budget` tokens.
pub fn scheduler(budget: usize, num_gpu_blocks: usize) -> Scheduler {
    let config = SchedulerConfig { max_num_batched_tokens: budget, ..SchedulerConfig::default() };
    Scheduler::new(config, cache(num_gpu_blocks)).unwrap()
}

/// A greedy request that ignores EOS.
pub fn request(id: RequestId, prompt: Vec<TokenId>, max_tokens: usize) -> Request {
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(max_tokens) };
    Request::new(id, prompt, params, Some(2), id as f64)
}

/// `len` distinct tokens starting at `start`.
pub fn tokens(start: u32, len: usize) -> Vec<TokenId> {
    (start..start + len as u32).collect()
}

/// Per-request chunk sizes of a step, in scheduling order.
pub fn chunks(output: &SchedulerOutput) -> Vec<(RequestId, usize)> {
    let ids = output
        .scheduled_cached_reqs
        .iter()
        .map(|data| data.req_id)
        .chain(output.scheduled_new_reqs.iter().map(|data| data.req_id));
    ids.map(|id| (id, output.num_scheduled_tokens[&id])).collect()
}

/// Samples `1000 + id` for every request whose known tokens are all computed.
pub fn fake_model_output(scheduler: &Scheduler, output: &SchedulerOutput) -> ModelRunnerOutput {
    let mut result = ModelRunnerOutput::default();
    for &id in output.num_scheduled_tokens.keys() {
        if let Some(request) = scheduler.get_request(id)
            && request.num_computed_tokens == request.num_tokens()
        {
            result.sampled_token_ids.insert(id, vec![1000 + id as TokenId]);
        }
    }
    result
}

/// One step with the fake model.
pub fn fake_step(scheduler: &mut Scheduler) -> (SchedulerOutput, Vec<EngineCoreOutput>) {
    let output = scheduler.schedule();
    let model_output = fake_model_output(scheduler, &output);
    let core_outputs = scheduler.update_from_output(&output, &model_output);
    (output, core_outputs)
}

/// One step with a simulated model; collects generated tokens per request.
pub fn sim_step(
    scheduler: &mut Scheduler,
    executor: &mut SimExecutor,
    generated: &mut HashMap<RequestId, Vec<TokenId>>,
) -> SchedulerOutput {
    let output = scheduler.schedule();
    let model_output = executor.execute(&output, &mut StepMasks::none()).unwrap();
    for core_output in scheduler.update_from_output(&output, &model_output) {
        generated.entry(core_output.request_id).or_default().extend(core_output.new_token_ids);
    }
    output
}

/// What the simulated model generates for `prompt` alone: `max_tokens` greedy tokens.
pub fn alone_output(config: &SimConfig, prompt: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
    let mut history = prompt.to_vec();
    for _ in 0..max_tokens {
        history.push(pagoda::executor::sim::next_token(config, &history));
    }
    history.split_off(prompt.len())
}

/// A simulated model with a large vocabulary and no EOS.
pub fn sim() -> (SimConfig, SimExecutor) {
    let config = SimConfig { eos_token_id: None, ..SimConfig::default() };
    (config, SimExecutor::new(config).unwrap())
}
