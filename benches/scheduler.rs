//! Scheduler step time: one `schedule` + `update_from_output` with N running decode
//! requests, and with 1000 requests waiting behind a full running queue.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pagoda::core::output::ModelRunnerOutput;
use pagoda::core::scheduler::Scheduler;
use pagoda::{CacheConfig, Request, SamplingParams, SchedulerConfig, TokenId};

const PROMPT_LEN: usize = 128;
/// Steps measured on one scheduler before it is rebuilt (requests grow one token a step).
const STEPS_PER_SETUP: u64 = 64;

/// A scheduler whose `num_running` requests have finished their prefill and decode, with
/// `num_waiting` more requests queued behind `max_num_seqs = num_running`.
fn decoding_scheduler(num_running: usize, num_waiting: usize) -> Scheduler {
    let block_size = 16;
    let blocks_per_request = (PROMPT_LEN + STEPS_PER_SETUP as usize + 8).div_ceil(block_size) + 1;
    let config = SchedulerConfig {
        max_num_batched_tokens: 8192,
        max_num_seqs: num_running,
        max_model_len: 4096,
        ..SchedulerConfig::default()
    };
    let cache = CacheConfig {
        block_size,
        num_gpu_blocks: num_running * blocks_per_request + 1,
        ..CacheConfig::default()
    };
    let mut scheduler = Scheduler::new(config, cache).unwrap();
    for id in 0..(num_running + num_waiting) as u64 {
        let prompt: Vec<TokenId> =
            (0..PROMPT_LEN as u32).map(|i| (id as u32).wrapping_mul(7919) ^ i).collect();
        let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(100_000) };
        scheduler.add_request(Request::new(id, prompt, params, None, id as f64)).unwrap();
    }
    while scheduler.running_ids().iter().any(|&id| is_prefilling(&scheduler, id))
        || scheduler.num_running() == 0
    {
        step(&mut scheduler);
    }
    scheduler
}

fn is_prefilling(scheduler: &Scheduler, id: u64) -> bool {
    scheduler.get_request(id).is_some_and(|r| r.output_token_ids.is_empty())
}

fn model_output(scheduler: &Scheduler, output: &pagoda::core::output::SchedulerOutput) -> ModelRunnerOutput {
    let mut result = ModelRunnerOutput::default();
    for &id in output.num_scheduled_tokens.keys() {
        if scheduler.get_request(id).is_some_and(|r| r.num_computed_tokens == r.num_tokens()) {
            result.sampled_token_ids.insert(id, vec![(id % 1000) as TokenId]);
        }
    }
    result
}

fn step(scheduler: &mut Scheduler) {
    let output = scheduler.schedule();
    let model_output = model_output(scheduler, &output);
    scheduler.update_from_output(&output, &model_output);
}

/// Times only `schedule` + `update_from_output`, rebuilding the scheduler untimed.
fn timed_steps(iters: u64, num_running: usize, num_waiting: usize) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let mut scheduler = decoding_scheduler(num_running, num_waiting);
        for _ in 0..STEPS_PER_SETUP.min(iters - done) {
            let start = Instant::now();
            let output = scheduler.schedule();
            total += start.elapsed();
            let model_output = model_output(&scheduler, &output);
            let start = Instant::now();
            black_box(scheduler.update_from_output(&output, &model_output));
            total += start.elapsed();
            done += 1;
        }
    }
    total
}

fn bench_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler_step");
    group.sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for num_running in [64, 256, 1024] {
        group.bench_with_input(BenchmarkId::new("running_decode", num_running), &num_running, |b, &n| {
            b.iter_custom(|iters| timed_steps(iters, n, 0));
        });
    }
    group.bench_function(BenchmarkId::new("waiting_behind_256_running", 1000), |b| {
        b.iter_custom(|iters| timed_steps(iters, 256, 1000));
    });
    group.finish();
}

criterion_group!(benches, bench_step);
criterion_main!(benches);
