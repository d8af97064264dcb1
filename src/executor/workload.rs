//! Workloads for the simulated executor: arrivals run to completion on simulated time,
//! reported as throughput, latency, preemption and cache figures.

use std::collections::HashMap;
use std::str::FromStr;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::{CacheConfig, SchedulerConfig};
use crate::core::request::Request;
use crate::core::scheduler::{Scheduler, SchedulerConfigError};
use crate::executor::sim::{SimConfig, SimConfigError, SimExecutor};
use crate::executor::{ExecutorError, ModelExecutor, StepMasks};
use crate::ids::{RequestId, TokenId};
use crate::sampling::SamplingParams;

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    /// Simulated seconds after the start.
    pub time_s: f64,
    /// The prompt.
    pub prompt_token_ids: Vec<TokenId>,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Lower runs first under PRIORITY.
    pub priority: i32,
    /// Keep generating past EOS (benchmarks usually do, so output lengths are as asked).
    pub ignore_eos: bool,
}

/// A named list of arrivals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The requests, in any order.
    pub arrivals: Vec<Arrival>,
}

impl Workload {
    /// The same arrivals with every prompt made `input_len` tokens long (cut, or repeated
    /// from its start) and every request generating `output_len` tokens at most; `None`
    /// keeps what the workload drew.
    pub fn with_lengths(mut self, input_len: Option<usize>, output_len: Option<usize>) -> Self {
        for arrival in &mut self.arrivals {
            if let Some(len) = input_len {
                arrival.prompt_token_ids =
                    arrival.prompt_token_ids.iter().copied().cycle().take(len).collect();
            }
            if let Some(len) = output_len {
                arrival.max_tokens = len;
            }
        }
        self
    }
}

/// The built-in workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuiltinWorkload {
    /// Independent prompts of 16..512 tokens and outputs of 16..256, Poisson arrivals at
    /// 20 requests/s, priorities 0..4.
    Random,
    /// Four 256-token system prompts shared by all requests, each with a 16..128-token
    /// question and 32..128 output tokens, 20 requests/s.
    SharedPrefix,
    /// Everything arrives at once with long outputs (256..512) so the KV cache overflows and
    /// requests are preempted.
    MemoryPressure,
    /// Prompts of 1024..4096 tokens with short outputs, 2 requests/s: chunked prefill.
    LongPrompt,
}

/// A workload name that is not built in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload {0:?}; known: random, shared-prefix, memory-pressure, long-prompt")]
pub struct UnknownWorkload(pub String);

impl BuiltinWorkload {
    /// Every built-in workload.
    pub const ALL: [Self; 4] = [Self::Random, Self::SharedPrefix, Self::MemoryPressure, Self::LongPrompt];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::SharedPrefix => "shared-prefix",
            Self::MemoryPressure => "memory-pressure",
            Self::LongPrompt => "long-prompt",
        }
    }

    /// `num_requests` arrivals drawn from `seed`, tokens in `3..vocab_size`.
    pub fn generate(self, num_requests: usize, vocab_size: u32, seed: u64) -> Workload {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let low = 3.min(vocab_size.saturating_sub(1));
        let tokens = |rng: &mut ChaCha8Rng, len: usize| -> Vec<TokenId> {
            (0..len).map(|_| rng.random_range(low..vocab_size.max(low + 1))).collect()
        };
        let system_prompts: Vec<Vec<TokenId>> = (0..4).map(|_| tokens(&mut rng, 256)).collect();
        let mut time_s = 0.0;
        let arrivals = (0..num_requests)
            .map(|_| {
                let (rate, prompt, max_tokens, priority) = match self {
                    Self::Random => {
                        let len = rng.random_range(16..=512);
                        (20.0, tokens(&mut rng, len), rng.random_range(16..=256), rng.random_range(0..4))
                    }
                    Self::SharedPrefix => {
                        let system = &system_prompts[rng.random_range(0..system_prompts.len())];
                        let len = rng.random_range(16..=128);
                        let prompt = [system.clone(), tokens(&mut rng, len)].concat();
                        (20.0, prompt, rng.random_range(32..=128), 0)
                    }
                    Self::MemoryPressure => {
                        let len = rng.random_range(128..=512);
                        (f64::INFINITY, tokens(&mut rng, len), rng.random_range(256..=512), 0)
                    }
                    Self::LongPrompt => {
                        let len = rng.random_range(1024..=4096);
                        (2.0, tokens(&mut rng, len), rng.random_range(16..=64), 0)
                    }
                };
                let arrival =
                    Arrival { time_s, prompt_token_ids: prompt, max_tokens, priority, ignore_eos: true };
                let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
                time_s += -uniform.ln() / rate;
                arrival
            })
            .collect();
        Workload { name: self.name().to_owned(), arrivals }
    }
}

impl FromStr for BuiltinWorkload {
    type Err = UnknownWorkload;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|w| w.name() == name).ok_or_else(|| UnknownWorkload(name.to_owned()))
    }
}

/// Why a workload could not run to completion.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The scheduler configuration is invalid.
    #[error(transparent)]
    Scheduler(#[from] SchedulerConfigError),
    /// The simulated model configuration is invalid.
    #[error(transparent)]
    Sim(#[from] SimConfigError),
    /// The executor failed a step.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// Requests remain but nothing was scheduled for several steps.
    #[error("no progress: {0} requests unfinished and nothing schedulable")]
    Stalled(usize),
}

/// What a workload run measured, on simulated time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// The workload.
    pub workload: String,
    /// Requests in it.
    pub num_requests: usize,
    /// Requests that finished.
    pub num_finished: usize,
    /// Requests refused at admission (too long for the model or the cache).
    pub num_rejected: usize,
    /// Scheduler steps.
    pub num_steps: u64,
    /// Simulated seconds from the first arrival to the last token.
    pub duration_s: f64,
    /// Prompt tokens of the admitted requests.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
    /// Requests finished per simulated second.
    pub request_throughput: f64,
    /// Generated tokens per simulated second.
    pub output_throughput: f64,
    /// Prompt and generated tokens per simulated second.
    pub total_throughput: f64,
    /// Time to first token, median, seconds.
    pub ttft_p50_s: f64,
    /// Time to first token, 99th percentile, seconds.
    pub ttft_p99_s: f64,
    /// Inter-token latency, mean, seconds.
    pub itl_mean_s: f64,
    /// Inter-token latency, median, seconds.
    pub itl_p50_s: f64,
    /// Inter-token latency, 99th percentile, seconds.
    pub itl_p99_s: f64,
    /// Preemptions.
    pub num_preemptions: u64,
    /// Tokens computed a second time after preemptions.
    pub num_recomputed_tokens: u64,
    /// Prefix-cache hit rate over first admissions (hit tokens / looked-up tokens).
    pub prefix_cache_hit_rate: f64,
    /// Highest KV cache usage seen, 0..=1.
    pub peak_kv_cache_usage: f64,
}

#[derive(Debug)]
struct Timing {
    arrival_s: f64,
    last_token_s: Option<f64>,
}

/// Steps a workload through a scheduler and the simulated executor, one step at a time
/// (the visualizer watches it between steps).
#[derive(Debug)]
pub struct WorkloadRunner {
    name: String,
    scheduler: Scheduler,
    executor: SimExecutor,
    pending: Vec<(RequestId, Arrival)>,
    eos_token_id: Option<TokenId>,
    clock_s: f64,
    timings: HashMap<RequestId, Timing>,
    outputs: HashMap<RequestId, Vec<TokenId>>,
    ttfts: Vec<f64>,
    itls: Vec<f64>,
    num_requests: usize,
    num_finished: usize,
    num_rejected: usize,
    prompt_tokens: u64,
    empty_steps: usize,
}

const MAX_EMPTY_STEPS: usize = 3;

impl WorkloadRunner {
    /// A runner for `workload`; request ids are the arrivals' indices.
    pub fn new(
        workload: &Workload,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        sim_config: SimConfig,
    ) -> Result<Self, WorkloadError> {
        let mut pending: Vec<(RequestId, Arrival)> =
            workload.arrivals.iter().cloned().enumerate().map(|(i, a)| (i as RequestId, a)).collect();
        pending.sort_by(|a, b| b.1.time_s.total_cmp(&a.1.time_s).then(b.0.cmp(&a.0)));
        Ok(Self {
            name: workload.name.clone(),
            scheduler: Scheduler::new(scheduler_config, cache_config)?,
            executor: SimExecutor::new(sim_config)?,
            pending,
            eos_token_id: sim_config.eos_token_id,
            clock_s: 0.0,
            timings: HashMap::new(),
            outputs: HashMap::new(),
            ttfts: Vec::new(),
            itls: Vec::new(),
            num_requests: workload.arrivals.len(),
            num_finished: 0,
            num_rejected: 0,
            prompt_tokens: 0,
            empty_steps: 0,
        })
    }

    /// The scheduler (for snapshots and events).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Simulated seconds so far.
    pub fn clock_seconds(&self) -> f64 {
        self.clock_s
    }

    /// Tokens generated per request so far.
    pub fn outputs(&self) -> &HashMap<RequestId, Vec<TokenId>> {
        &self.outputs
    }

    /// True when every request finished or was rejected.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && !self.scheduler.has_unfinished_requests()
    }

    /// Admits what has arrived and runs one step; returns false once everything is done.
    pub fn step(&mut self) -> Result<bool, WorkloadError> {
        if !self.scheduler.has_unfinished_requests()
            && let Some((_, next)) = self.pending.last()
        {
            self.clock_s = self.clock_s.max(next.time_s);
        }
        self.admit_arrivals();
        if self.is_done() {
            return Ok(false);
        }
        let scheduler_output = self.scheduler.schedule();
        if scheduler_output.is_empty() && scheduler_output.preempted_req_ids.is_empty() {
            self.empty_steps += 1;
            if self.empty_steps >= MAX_EMPTY_STEPS {
                return Err(WorkloadError::Stalled(
                    self.scheduler.num_running() + self.scheduler.num_waiting(),
                ));
            }
        } else {
            self.empty_steps = 0;
        }
        let model_output = self.executor.execute(&scheduler_output, &mut StepMasks::none())?;
        self.clock_s += self.executor.last_step_seconds();
        for output in self.scheduler.update_from_output(&scheduler_output, &model_output) {
            let Some(timing) = self.timings.get_mut(&output.request_id) else {
                continue;
            };
            for _ in &output.new_token_ids {
                match timing.last_token_s {
                    None => self.ttfts.push(self.clock_s - timing.arrival_s),
                    Some(last) => self.itls.push(self.clock_s - last),
                }
                timing.last_token_s = Some(self.clock_s);
            }
            self.outputs.entry(output.request_id).or_default().extend(&output.new_token_ids);
            if output.finish_reason.is_some() {
                self.num_finished += 1;
            }
        }
        Ok(!self.is_done())
    }

    /// Runs to completion and reports.
    pub fn run(mut self) -> Result<WorkloadReport, WorkloadError> {
        while self.step()? {}
        Ok(self.report())
    }

    /// The figures so far.
    pub fn report(&self) -> WorkloadReport {
        let stats = self.scheduler.stats();
        let first_arrival = self.timings.values().map(|t| t.arrival_s).fold(f64::INFINITY, f64::min);
        let duration_s = if first_arrival.is_finite() { self.clock_s - first_arrival } else { 0.0 };
        let per_second = |count: f64| if duration_s > 0.0 { count / duration_s } else { 0.0 };
        let output_tokens = stats.num_generated_tokens;
        let mut ttfts = self.ttfts.clone();
        let mut itls = self.itls.clone();
        WorkloadReport {
            workload: self.name.clone(),
            num_requests: self.num_requests,
            num_finished: self.num_finished,
            num_rejected: self.num_rejected,
            num_steps: stats.num_steps,
            duration_s,
            prompt_tokens: self.prompt_tokens,
            output_tokens,
            request_throughput: per_second(self.num_finished as f64),
            output_throughput: per_second(output_tokens as f64),
            total_throughput: per_second((self.prompt_tokens + output_tokens) as f64),
            ttft_p50_s: percentile(&mut ttfts, 0.50),
            ttft_p99_s: percentile(&mut ttfts, 0.99),
            itl_mean_s: mean(&itls),
            itl_p50_s: percentile(&mut itls, 0.50),
            itl_p99_s: percentile(&mut itls, 0.99),
            num_preemptions: stats.num_preemptions,
            num_recomputed_tokens: stats.num_recomputed_tokens,
            prefix_cache_hit_rate: stats.prefix_cache.hit_rate(),
            peak_kv_cache_usage: stats.peak_kv_cache_usage,
        }
    }

    fn admit_arrivals(&mut self) {
        while self.pending.last().is_some_and(|(_, arrival)| arrival.time_s <= self.clock_s) {
            let Some((request_id, arrival)) = self.pending.pop() else {
                break;
            };
            let params = SamplingParams {
                ignore_eos: arrival.ignore_eos,
                ..SamplingParams::greedy(arrival.max_tokens)
            };
            let prompt_len = arrival.prompt_token_ids.len() as u64;
            let mut request =
                Request::new(request_id, arrival.prompt_token_ids, params, self.eos_token_id, arrival.time_s);
            request.priority = arrival.priority;
            match self.scheduler.add_request(request) {
                Ok(()) => {
                    self.prompt_tokens += prompt_len;
                    self.timings.insert(request_id, Timing { arrival_s: arrival.time_s, last_token_s: None });
                }
                Err(error) => {
                    tracing::warn!(%error, "workload request rejected");
                    self.num_rejected += 1;
                }
            }
        }
    }
}

/// Runs `workload` to completion on the simulated executor.
pub fn run_workload(
    workload: &Workload,
    scheduler_config: SchedulerConfig,
    cache_config: CacheConfig,
    sim_config: SimConfig,
) -> Result<WorkloadReport, WorkloadError> {
    WorkloadRunner::new(workload, scheduler_config, cache_config, sim_config)?.run()
}

/// The mean of `values`; 0 when empty.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// Nearest-rank percentile of `values` (sorted in place); 0 when empty.
pub fn percentile(values: &mut [f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (fraction * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}
