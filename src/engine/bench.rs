//! A workload run through a whole [`Engine`] on wall-clock time: what `pagoda bench` measures
//! on a real executor (the simulated executor runs workloads on simulated time in
//! [`crate::executor::workload`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Engine, EngineError};
use crate::core::metrics::PrefixCacheStats;
use crate::executor::workload::{Workload, WorkloadReport, mean, percentile};
use crate::ids::RequestId;
use crate::sampling::SamplingParams;

/// Per-request wall-clock timing.
struct Timing {
    arrival: Instant,
    last_token: Option<Instant>,
}

/// Adds each arrival when its time comes (greedy, as many tokens as it asks for), steps
/// until every request finished, and reports throughput and latencies in seconds.
pub fn run_engine_workload(engine: &mut Engine, workload: &Workload) -> Result<WorkloadReport, EngineError> {
    let mut pending: Vec<_> = workload.arrivals.iter().collect();
    pending.sort_by(|a, b| b.time_s.total_cmp(&a.time_s));
    let stats_before = engine.metrics().scheduler;
    let start = Instant::now();
    let mut timings: HashMap<RequestId, Timing> = HashMap::new();
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    let (mut num_finished, mut num_rejected, mut prompt_tokens, mut output_tokens) = (0, 0, 0u64, 0u64);
    let mut peak_usage: f64 = 0.0;
    loop {
        let now = start.elapsed().as_secs_f64();
        while let Some(arrival) = pending.last().filter(|arrival| arrival.time_s <= now) {
            let params = SamplingParams {
                ignore_eos: arrival.ignore_eos,
                ..SamplingParams::greedy(arrival.max_tokens.max(1))
            };
            match engine.add_tokens_request(arrival.prompt_token_ids.clone(), params) {
                Ok(request_id) => {
                    let arrival_instant = start + Duration::from_secs_f64(arrival.time_s);
                    timings.insert(request_id, Timing { arrival: arrival_instant, last_token: None });
                    prompt_tokens += arrival.prompt_token_ids.len() as u64;
                }
                Err(error) => {
                    tracing::warn!(%error, "benchmark request rejected");
                    num_rejected += 1;
                }
            }
            pending.pop();
        }
        if engine.has_unfinished_requests() {
            let outputs = engine.step()?;
            let now = Instant::now();
            peak_usage = peak_usage.max(engine.scheduler().kv_cache_manager().usage());
            for output in outputs {
                let Some(timing) = timings.get_mut(&output.request_id) else { continue };
                let new_tokens = output.new_token_ids.len();
                output_tokens += new_tokens as u64;
                match timing.last_token {
                    None if new_tokens > 0 => ttfts.push((now - timing.arrival).as_secs_f64()),
                    Some(last) if new_tokens > 0 => {
                        let gap = (now - last).as_secs_f64() / new_tokens as f64;
                        itls.extend(std::iter::repeat_n(gap, new_tokens));
                    }
                    _ => {}
                }
                if new_tokens > 0 {
                    timing.last_token = Some(now);
                }
                if output.finished() {
                    num_finished += 1;
                }
            }
        } else if let Some(next) = pending.last() {
            std::thread::sleep(Duration::from_secs_f64((next.time_s - now).max(0.0)));
        } else {
            break;
        }
    }
    let duration_s = start.elapsed().as_secs_f64();
    let stats = engine.metrics().scheduler;
    let prefix_cache = PrefixCacheStats {
        queries: stats.prefix_cache.queries - stats_before.prefix_cache.queries,
        hits: stats.prefix_cache.hits - stats_before.prefix_cache.hits,
        ..PrefixCacheStats::default()
    };
    let per_second = |count: f64| if duration_s > 0.0 { count / duration_s } else { 0.0 };
    Ok(WorkloadReport {
        workload: workload.name.clone(),
        num_requests: workload.arrivals.len(),
        num_finished,
        num_rejected,
        num_steps: stats.num_steps - stats_before.num_steps,
        duration_s,
        prompt_tokens,
        output_tokens,
        request_throughput: per_second(num_finished as f64),
        output_throughput: per_second(output_tokens as f64),
        total_throughput: per_second((prompt_tokens + output_tokens) as f64),
        ttft_p50_s: percentile(&mut ttfts, 0.5),
        ttft_p99_s: percentile(&mut ttfts, 0.99),
        itl_mean_s: mean(&itls),
        itl_p50_s: percentile(&mut itls, 0.5),
        itl_p99_s: percentile(&mut itls, 0.99),
        num_preemptions: stats.num_preemptions - stats_before.num_preemptions,
        num_recomputed_tokens: stats.num_recomputed_tokens - stats_before.num_recomputed_tokens,
        prefix_cache_hit_rate: prefix_cache.hit_rate(),
        peak_kv_cache_usage: peak_usage,
    })
}
