//! What a workload run measured, and the latency bookkeeping every runner shares.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::host_tier::HostTierStats;
use crate::core::metrics::{SchedulerStats, SpecDecodingStats};
use crate::engine::overlap::HostOverlap;
use crate::gpu::{GpuCounters, KernelTimes};
use crate::ids::RequestId;

/// What a workload run measured, in seconds of the runner's clock (simulated or wall).
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
    /// Seconds from the first arrival to the last token.
    pub duration_s: f64,
    /// Prompt tokens of the admitted requests.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
    /// Requests finished per second.
    pub request_throughput: f64,
    /// Generated tokens per second.
    pub output_throughput: f64,
    /// Prompt and generated tokens per second.
    pub total_throughput: f64,
    /// Time to first token, median, seconds.
    pub ttft_p50_s: f64,
    /// Time to first token, 99th percentile, seconds.
    pub ttft_p99_s: f64,
    /// Median TTFT of returning conversations' requests (a prompt extending an earlier
    /// one's), when the workload has any.
    pub ttft_p50_returning_s: Option<f64>,
    /// Inter-token latency, mean, seconds.
    pub itl_mean_s: f64,
    /// Inter-token latency, median, seconds.
    pub itl_p50_s: f64,
    /// Inter-token latency, 99th percentile, seconds.
    pub itl_p99_s: f64,
    /// Time per output token after the first (vLLM's TPOT: a finished request's time from
    /// its first token to its last over its tokens after the first), mean over the finished
    /// requests with two tokens or more, seconds. Unlike ITL it counts every token a step
    /// brings, so it is the decode speed with speculative decoding too.
    #[serde(default)]
    pub tpot_mean_s: f64,
    /// Preemptions.
    pub num_preemptions: u64,
    /// Tokens computed a second time after preemptions.
    pub num_recomputed_tokens: u64,
    /// Prefix-cache hit rate over first admissions (hit tokens / looked-up tokens).
    pub prefix_cache_hit_rate: f64,
    /// Highest KV cache usage seen, 0..=1.
    pub peak_kv_cache_usage: f64,
    /// Speculative decoding's proposals and acceptances (when anything was proposed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decoding: Option<SpecDecodingReport>,
    /// What the device layer did over the run (GPU executors only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceReport>,
    /// Device time per kernel variant over the run, the longest first (`pagoda bench
    /// --profile-kernels`; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelReport>,
    /// The host KV tier's counters over the run (`--kv-offloading-size`; none when off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tier: Option<HostTierStats>,
    /// The runner's host time per step, hidden behind steps or exposed between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_overlap: Option<HostOverlapReport>,
}

/// Host time per step over a run: hidden while a step ran, exposed while none did (the
/// executor idle, waiting for the host).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostOverlapReport {
    /// True when the run scheduled one step ahead (async scheduling).
    pub async_scheduling: bool,
    /// Host microseconds per step while a step ran, mean.
    pub hidden_us_per_step: f64,
    /// Host microseconds per step while no step ran, mean.
    pub exposed_us_per_step: f64,
}

impl HostOverlapReport {
    /// The report of `overlap`, measured over a run.
    pub fn of(async_scheduling: bool, overlap: &HostOverlap) -> Self {
        Self {
            async_scheduling,
            hidden_us_per_step: overlap.hidden_us_per_step(),
            exposed_us_per_step: overlap.exposed_us_per_step(),
        }
    }
}

/// The device layer's work over a run: host time per step and what it created.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Host time recording and submitting a step, mean, microseconds.
    pub host_us_per_step: f64,
    /// The same, median over the engine steps that ran one device step each: on a shared
    /// machine one descheduled step moves the mean, not this.
    #[serde(default)]
    pub host_us_p50: f64,
    /// Compute dispatches per step, mean.
    pub dispatches_per_step: f64,
    /// Command buffers per step, mean (1 unless steps are submitted in chunks).
    #[serde(default)]
    pub command_buffers_per_step: f64,
    /// Pipelines built during the run (none once the warm-up has built every one).
    pub pipelines_created: u64,
    /// Device buffers created during the run (first sight of each shape only).
    pub buffers_created: u64,
    /// Bind groups created during the run (first sight of each shape only).
    pub bind_groups_created: u64,
    /// How long the device sat idle before an engine step's submit (from the host seeing
    /// the step before it done), mean over the run's engine steps after its first,
    /// microseconds: 0 where each step is submitted before the one ahead is done.
    #[serde(default)]
    pub idle_us_per_step: f64,
    /// The same, median.
    #[serde(default)]
    pub idle_us_p50: f64,
}

impl DeviceReport {
    /// The report of the device counters `c`, taken over a run, and `step_host_times`, the
    /// host time of each engine step that ran one device step.
    pub fn of(c: &GpuCounters, step_host_times: &[Duration]) -> Self {
        let mut micros: Vec<f64> = step_host_times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
        let per_step = |n: u64| if c.steps == 0 { 0.0 } else { n as f64 / c.steps as f64 };
        Self {
            host_us_per_step: c.host_us_per_step(),
            host_us_p50: percentile(&mut micros, 0.5),
            dispatches_per_step: per_step(c.dispatches),
            command_buffers_per_step: per_step(c.command_buffers),
            pipelines_created: c.pipelines_created,
            buffers_created: c.buffers_created,
            bind_groups_created: c.bind_groups_created,
            idle_us_per_step: 0.0,
            idle_us_p50: 0.0,
        }
    }

    /// The report with `step_idle_times`, the device's idle time before each engine step.
    pub fn with_idle(self, step_idle_times: &[Duration]) -> Self {
        let mut micros: Vec<f64> = step_idle_times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
        let mean = micros.iter().sum::<f64>() / micros.len().max(1) as f64;
        Self { idle_us_per_step: mean, idle_us_p50: percentile(&mut micros, 0.5), ..self }
    }
}

/// One kernel variant's device time over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    /// The variant's label (`linear/q4_1@texture/seq-sg8-sgtree8/tm1/rms-gated-silu`).
    pub kernel: String,
    /// Dispatches of it.
    pub dispatches: u64,
    /// Their device time, summed, milliseconds.
    pub device_ms: f64,
    /// Device time per dispatch, mean, microseconds.
    pub mean_us: f64,
    /// Its share of all the kernels' device time, 0..=1.
    pub share: f64,
}

impl KernelReport {
    /// One row per variant of `times`, the longest total first.
    pub fn rows(times: &KernelTimes) -> Vec<Self> {
        let total = times.total().device_time.as_secs_f64();
        times
            .by_time()
            .into_iter()
            .map(|(kernel, t)| {
                let seconds = t.device_time.as_secs_f64();
                Self {
                    kernel: kernel.to_owned(),
                    dispatches: t.dispatches,
                    device_ms: seconds * 1e3,
                    mean_us: seconds * 1e6 / t.dispatches.max(1) as f64,
                    share: if total > 0.0 { seconds / total } else { 0.0 },
                }
            })
            .collect()
    }
}

/// The counts a runner keeps while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Requests in the workload.
    pub num_requests: usize,
    /// Requests that finished.
    pub num_finished: usize,
    /// Requests refused at admission.
    pub num_rejected: usize,
    /// Prompt tokens of the admitted requests.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

/// Speculative decoding over a run, as vLLM's spec-decode logger reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecDecodingReport {
    /// Verify passes that carried proposals (per request and step).
    pub num_drafts: u64,
    /// Tokens proposed.
    pub num_draft_tokens: u64,
    /// Proposed tokens accepted.
    pub num_accepted_tokens: u64,
    /// Accepted over proposed tokens.
    pub acceptance_rate: f64,
    /// Tokens a verify pass yields per request: 1 + accepted per draft.
    pub mean_acceptance_length: f64,
    /// Per proposal position, the share of drafts that had it accepted.
    pub acceptance_rate_per_pos: Vec<f64>,
}

impl SpecDecodingReport {
    /// The report of `stats`; `None` when nothing was proposed.
    pub fn of(stats: &SpecDecodingStats) -> Option<Self> {
        if stats.num_drafts == 0 {
            return None;
        }
        let per_pos = &stats.num_accepted_tokens_per_pos;
        let positions = per_pos.iter().rposition(|&count| count > 0).map_or(1, |last| last + 1);
        Some(Self {
            num_drafts: stats.num_drafts,
            num_draft_tokens: stats.num_draft_tokens,
            num_accepted_tokens: stats.num_accepted_tokens,
            acceptance_rate: stats.acceptance_rate(),
            mean_acceptance_length: stats.mean_acceptance_length(),
            acceptance_rate_per_pos: per_pos[..positions]
                .iter()
                .map(|&count| count as f64 / stats.num_drafts as f64)
                .collect(),
        })
    }
}

impl WorkloadReport {
    /// The report of a run of `workload` that took `duration_s`, from its counts, its
    /// latencies and the scheduler's statistics over the run (`stats`, counters since the
    /// run began).
    pub fn new(
        workload: &str,
        counts: &RunCounts,
        duration_s: f64,
        latencies: &Latencies,
        stats: &SchedulerStats,
    ) -> Self {
        let per_second = |count: f64| if duration_s > 0.0 { count / duration_s } else { 0.0 };
        let mut ttfts = latencies.ttfts.clone();
        let mut itls = latencies.itls.clone();
        Self {
            workload: workload.to_owned(),
            num_requests: counts.num_requests,
            num_finished: counts.num_finished,
            num_rejected: counts.num_rejected,
            num_steps: stats.num_steps,
            duration_s,
            prompt_tokens: counts.prompt_tokens,
            output_tokens: counts.output_tokens,
            request_throughput: per_second(counts.num_finished as f64),
            output_throughput: per_second(counts.output_tokens as f64),
            total_throughput: per_second((counts.prompt_tokens + counts.output_tokens) as f64),
            ttft_p50_s: percentile(&mut ttfts, 0.50),
            ttft_p99_s: percentile(&mut ttfts, 0.99),
            ttft_p50_returning_s: (!latencies.returning_ttfts.is_empty())
                .then(|| percentile(&mut latencies.returning_ttfts.clone(), 0.50)),
            itl_mean_s: mean(&itls),
            itl_p50_s: percentile(&mut itls, 0.50),
            itl_p99_s: percentile(&mut itls, 0.99),
            tpot_mean_s: mean(&latencies.tpots),
            num_preemptions: stats.num_preemptions,
            num_recomputed_tokens: stats.num_recomputed_tokens,
            prefix_cache_hit_rate: stats.prefix_cache.hit_rate(),
            peak_kv_cache_usage: stats.peak_kv_cache_usage,
            spec_decoding: SpecDecodingReport::of(&stats.spec_decoding),
            device: None,
            kernels: Vec::new(),
            host_tier: stats.host_tier,
            host_overlap: None,
        }
    }
}

/// One latency a step's output recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// Time to first token: from arrival to the step that brought the first tokens.
    FirstToken(f64),
    /// Inter-token latency: from the previous step with tokens to this one.
    InterToken(f64),
}

/// Time to first token and inter-token latency per request on one clock (seconds), by vLLM
/// V1's rule: the step that brings a request's first tokens records one TTFT from its
/// arrival; every later step that brings tokens records one ITL, the gap since the previous
/// one, however many tokens it brought.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    clocks: HashMap<RequestId, RequestClock>,
    first_arrival_s: Option<f64>,
    ttfts: Vec<f64>,
    itls: Vec<f64>,
    /// Each finished request's time per output token after the first.
    tpots: Vec<f64>,
    /// Requests of conversations coming back ([`Latencies::returning`]), and their TTFTs.
    returning: HashSet<RequestId>,
    returning_ttfts: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
struct RequestClock {
    arrival_s: f64,
    first_tokens_s: Option<f64>,
    last_tokens_s: Option<f64>,
    num_tokens: usize,
}

impl Latencies {
    /// Starts the clock of `request_id`, which arrived at `arrival_s`.
    pub fn arrive(&mut self, request_id: RequestId, arrival_s: f64) {
        self.clocks.insert(
            request_id,
            RequestClock { arrival_s, first_tokens_s: None, last_tokens_s: None, num_tokens: 0 },
        );
        self.first_arrival_s = Some(self.first_arrival_s.map_or(arrival_s, |first| first.min(arrival_s)));
    }

    /// Records a step at `now_s` that brought `num_tokens` tokens to `request_id`; returns
    /// the latency it recorded (none without tokens or for an unknown request).
    pub fn record(&mut self, request_id: RequestId, num_tokens: usize, now_s: f64) -> Option<Latency> {
        let clock = self.clocks.get_mut(&request_id).filter(|_| num_tokens > 0)?;
        let latency = match clock.last_tokens_s {
            None => Latency::FirstToken(now_s - clock.arrival_s),
            Some(last) => Latency::InterToken(now_s - last),
        };
        clock.first_tokens_s.get_or_insert(now_s);
        clock.last_tokens_s = Some(now_s);
        clock.num_tokens += num_tokens;
        match latency {
            Latency::FirstToken(seconds) if self.returning.contains(&request_id) => {
                self.ttfts.push(seconds);
                self.returning_ttfts.push(seconds);
            }
            Latency::FirstToken(seconds) => self.ttfts.push(seconds),
            Latency::InterToken(seconds) => self.itls.push(seconds),
        }
        Some(latency)
    }

    /// Marks `request_id` as a returning conversation's (see `Workload::returning`): its
    /// TTFT is also reported on its own.
    pub fn returning(&mut self, request_id: RequestId) {
        self.returning.insert(request_id);
    }

    /// Stops the clock of a finished request, recording its time per output token after the
    /// first when it had two tokens or more.
    pub fn finish(&mut self, request_id: RequestId) {
        let Some(clock) = self.clocks.remove(&request_id) else {
            return;
        };
        if let (Some(first), Some(last)) = (clock.first_tokens_s, clock.last_tokens_s)
            && clock.num_tokens > 1
        {
            self.tpots.push((last - first) / (clock.num_tokens - 1) as f64);
        }
    }

    /// The earliest arrival seen, if any.
    pub fn first_arrival_s(&self) -> Option<f64> {
        self.first_arrival_s
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_counts_every_token_a_step_brings() {
        let mut latencies = Latencies::default();
        let (spec, single): (RequestId, RequestId) = (1, 2);
        latencies.arrive(spec, 0.0);
        latencies.arrive(single, 0.0);
        assert_eq!(latencies.record(spec, 1, 1.0), Some(Latency::FirstToken(1.0)));
        // A verify step bringing three tokens is one inter-token latency, three tokens of TPOT.
        assert_eq!(latencies.record(spec, 3, 2.0), Some(Latency::InterToken(1.0)));
        assert_eq!(latencies.record(spec, 2, 2.5), Some(Latency::InterToken(0.5)));
        latencies.record(single, 1, 3.0);
        latencies.finish(spec);
        latencies.finish(single);
        // (2.5 - 1.0) over the 5 tokens after the first; the one-token request has no TPOT.
        assert_eq!(latencies.tpots, vec![0.3]);
        assert_eq!(latencies.itls, vec![1.0, 0.5]);
    }

    #[test]
    fn device_report_has_the_mean_over_steps_and_the_median_step() {
        let counters = GpuCounters {
            steps: 4,
            command_buffers: 12,
            dispatches: 980,
            host_time: Duration::from_micros(2000),
            ..GpuCounters::default()
        };
        let steps = [400, 300, 1000, 300].map(Duration::from_micros);
        let report = DeviceReport::of(&counters, &steps);
        assert_eq!(report.host_us_per_step, 500.0);
        // The nearest-rank median, as the latency percentiles take it: the lower middle of four.
        assert_eq!(report.host_us_p50, 300.0);
        assert_eq!(report.dispatches_per_step, 245.0);
        assert_eq!(report.command_buffers_per_step, 3.0);
        assert_eq!(DeviceReport::of(&GpuCounters::default(), &[]).host_us_p50, 0.0);
        let idle = report.with_idle(&[0, 0, 900].map(Duration::from_micros));
        assert_eq!((idle.idle_us_per_step, idle.idle_us_p50), (300.0, 0.0));
    }
}
