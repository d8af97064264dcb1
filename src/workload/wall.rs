//! A workload run through a whole [`Engine`] on wall-clock time: what `pagoda bench`
//! measures on a real executor.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Workload;
use super::releases::Releases;
use super::report::{DeviceReport, HostOverlapReport, KernelReport, Latencies, RunCounts, WorkloadReport};
use crate::core::metrics::{PrefixCacheStats, SchedulerStats};
use crate::engine::{Engine, EngineError};

/// Adds each arrival when its time comes (a follow-up turn: its think time after the turn
/// it follows finished), steps until every request finished, and reports throughput and
/// latencies in seconds (an arrival's clock starts at its release time).
pub fn run_engine_workload(engine: &mut Engine, workload: &Workload) -> Result<WorkloadReport, EngineError> {
    let mut pending = Releases::new(workload.numbered());
    let returning = workload.returning();
    // The engine's request ids -> arrival indices.
    let mut arrival_of = HashMap::new();
    let before = engine.metrics().scheduler;
    let overlap_before = engine.metrics().host_overlap;
    let device_before = engine.device_counters();
    let kernels_before = engine.kernel_times();
    let mut device_last = device_before;
    let mut step_host_times = Vec::new();
    // The device's idle time before each engine step but the run's first (which waited for
    // the run to start).
    let mut step_idle_times = Vec::new();
    let start = Instant::now();
    let mut latencies = Latencies::default();
    let mut counts = RunCounts { num_requests: workload.arrivals.len(), ..RunCounts::default() };
    let mut peak_usage: f64 = 0.0;
    loop {
        let now = start.elapsed().as_secs_f64();
        while let Some((index, arrival)) = pending.pop_due(now) {
            match engine
                .add_tokens_request(arrival.prompt_token_ids.clone(), workload.sampling_params(&arrival))
            {
                Ok(request_id) => {
                    latencies.arrive(request_id, arrival.time_s);
                    if returning.get(index as usize) == Some(&true) {
                        latencies.returning(request_id);
                    }
                    counts.prompt_tokens += arrival.prompt_token_ids.len() as u64;
                    arrival_of.insert(request_id, index);
                }
                Err(error) => {
                    tracing::warn!(%error, "benchmark request rejected");
                    counts.num_rejected += 1;
                    pending.finished(index, now);
                }
            }
        }
        if engine.has_unfinished_requests() {
            let outputs = engine.step()?;
            let now = start.elapsed().as_secs_f64();
            if let (Some(after), Some(last)) = (engine.device_counters(), device_last) {
                let step = after.since(&last);
                if step.steps == 1 {
                    step_host_times.push(step.host_time);
                }
                if device_last != device_before {
                    step_idle_times.push(step.idle_time);
                }
                device_last = Some(after);
            }
            peak_usage = peak_usage.max(engine.scheduler().kv_cache_manager().usage());
            for output in outputs {
                latencies.record(output.request_id, output.new_token_ids.len(), now);
                counts.output_tokens += output.new_token_ids.len() as u64;
                if output.finished() {
                    latencies.finish(output.request_id);
                    counts.num_finished += 1;
                    if let Some(index) = arrival_of.remove(&output.request_id) {
                        pending.finished(index, now);
                    }
                }
            }
        } else if let Some(next_s) = pending.next_due_s() {
            std::thread::sleep(Duration::from_secs_f64((next_s - now).max(0.0)));
        } else {
            break;
        }
    }
    let stats = since(&engine.metrics().scheduler, &before, peak_usage);
    let mut report =
        WorkloadReport::new(&workload.name, &counts, start.elapsed().as_secs_f64(), &latencies, &stats);
    let overlap = engine.metrics().host_overlap.since(&overlap_before);
    report.host_overlap = Some(HostOverlapReport::of(engine.async_scheduling(), &overlap));
    if let (Some(after), Some(before)) = (engine.device_counters(), device_before) {
        report.device =
            Some(DeviceReport::of(&after.since(&before), &step_host_times).with_idle(&step_idle_times));
    }
    if let (Some(after), Some(before)) = (engine.kernel_times(), kernels_before) {
        report.kernels = KernelReport::rows(&after.since(&before));
    }
    Ok(report)
}

/// The counters of `after` since `before`, with the run's peak KV usage.
fn since(after: &SchedulerStats, before: &SchedulerStats, peak_kv_cache_usage: f64) -> SchedulerStats {
    SchedulerStats {
        num_steps: after.num_steps - before.num_steps,
        num_preemptions: after.num_preemptions - before.num_preemptions,
        num_recomputed_tokens: after.num_recomputed_tokens - before.num_recomputed_tokens,
        prefix_cache: PrefixCacheStats {
            queries: after.prefix_cache.queries - before.prefix_cache.queries,
            hits: after.prefix_cache.hits - before.prefix_cache.hits,
            ..PrefixCacheStats::default()
        },
        spec_decoding: after.spec_decoding.since(&before.spec_decoding),
        peak_kv_cache_usage,
        ..*after
    }
}
