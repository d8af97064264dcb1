//! Turns what the engine core reports (its `KvEvent` stream, `KvSnapshot` and stats) into
//! the visualizer's step records.

use crate::core::events::{EventLog, KvEvent};
use crate::core::metrics::SchedulerStats;
use crate::core::request::RequestStatus;
use crate::core::scheduler::Scheduler;
use crate::core::snapshot::KvSnapshot;
use crate::engine::overlap::HostOverlap;
use crate::viz::model::{
    BlockView, Counters, HostTierView, KvView, RequestPhase, RequestView, StepRecord, VizEvent,
};

/// What the engine hands over since its previous report (one step or many), unconverted:
/// building it costs the engine a copy of its stats and a move of the events (plus a
/// snapshot when asked).
#[derive(Debug, Clone)]
pub struct EngineReport {
    /// Engine time at the latest step, seconds.
    pub time_s: f64,
    /// The scheduler's counters after the latest step.
    pub stats: SchedulerStats,
    /// The events since the previous report, in order.
    pub events: Vec<KvEvent>,
    /// The engine loop's host time so far, and whether it schedules one step ahead.
    pub host: HostLoad,
    /// The cache and queues after the latest step, when asked for.
    pub kv: Option<Box<KvSnapshot>>,
}

/// The engine loop's host time around its steps (scheduling, output processing), and
/// whether it schedules one step ahead of the executor (async scheduling).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostLoad {
    /// True when the next step is scheduled while the current one runs.
    pub async_scheduling: bool,
    /// Host seconds hidden behind running steps and exposed between them, cumulative.
    pub overlap: HostOverlap,
}

/// Records one scheduler's events and hands them over, with the counters, as an
/// [`EngineReport`] whenever asked; stops the recording when dropped. One probe per
/// scheduler: probes share the scheduler's one log.
#[derive(Debug)]
pub struct SchedulerProbe {
    events: EventLog,
}

impl SchedulerProbe {
    /// Starts recording `scheduler`'s events; attach before its first step.
    pub fn attach(scheduler: &Scheduler) -> Self {
        let events = scheduler.event_log();
        events.start();
        Self { events }
    }

    /// Everything since the previous call, with the engine loop's `host` time and a
    /// snapshot when `with_kv` (the only O(blocks) part, so callers take it only on demand).
    pub fn report(&self, scheduler: &Scheduler, time_s: f64, host: HostLoad, with_kv: bool) -> EngineReport {
        EngineReport {
            time_s,
            stats: scheduler.stats(),
            events: self.events.take(),
            host,
            kv: with_kv.then(|| Box::new(scheduler.snapshot())),
        }
    }
}

impl Drop for SchedulerProbe {
    fn drop(&mut self) {
        self.events.stop();
    }
}

/// Turns engine reports into step records, counting the tokens computed so far.
#[derive(Debug, Clone, Default)]
pub struct RecordBuilder {
    computed_tokens: u64,
}

impl RecordBuilder {
    /// The record of `step`, numbered by the engine's latest step; reports must come in
    /// order.
    pub fn build(&mut self, step: &EngineReport) -> StepRecord {
        for event in &step.events {
            if let KvEvent::Step { num_scheduled_tokens, .. } = event {
                self.computed_tokens += *num_scheduled_tokens as u64;
            }
        }
        StepRecord {
            step: step.stats.num_steps,
            time_s: step.time_s,
            counters: counters(&step.stats, self.computed_tokens, &step.host),
            events: convert_events(&step.events),
            kv: step.kv.as_deref().map(kv_view),
        }
    }
}

/// The visualizer's counters from the scheduler's stats, the tokens computed so far and the
/// engine loop's host time.
pub fn counters(stats: &SchedulerStats, computed_tokens: u64, host: &HostLoad) -> Counters {
    Counters {
        kv_usage: stats.kv_cache_usage,
        prefix_queries: stats.prefix_cache.queries,
        prefix_hits: stats.prefix_cache.hits,
        preemptions: stats.num_preemptions,
        recomputed_tokens: stats.num_recomputed_tokens,
        computed_tokens,
        generated_tokens: stats.num_generated_tokens,
        num_running: stats.num_running,
        num_waiting: stats.num_waiting,
        num_finished: stats.num_finished,
        host: stats.host_tier.map(|host| HostTierView {
            num_blocks: host.num_blocks,
            num_used_blocks: host.num_used_blocks,
            num_loaded_blocks: host.num_loaded_blocks,
            num_stored_blocks: host.num_stored_blocks,
            num_evicted_blocks: host.num_evicted_blocks,
        }),
        spec_draft_tokens: stats.spec_decoding.num_draft_tokens,
        spec_accepted_tokens: stats.spec_decoding.num_accepted_tokens,
        async_scheduling: host.async_scheduling,
        host_steps: host.overlap.steps,
        host_hidden_s: host.overlap.hidden_seconds,
        host_exposed_s: host.overlap.exposed_seconds,
    }
}

/// The visualizer's view of a core snapshot.
pub fn kv_view(snapshot: &KvSnapshot) -> KvView {
    let blocks = snapshot
        .blocks
        .iter()
        .map(|b| BlockView {
            id: b.block_id,
            state: b.state,
            ref_cnt: b.ref_cnt,
            hash: b.block_hash,
            owners: b.owners.clone(),
        })
        .collect();
    let requests = snapshot
        .requests
        .iter()
        .filter_map(|r| {
            let phase = match r.status {
                RequestStatus::Waiting => RequestPhase::Waiting,
                RequestStatus::Running => RequestPhase::Running,
                RequestStatus::Preempted => RequestPhase::Preempted,
                _ => return None,
            };
            Some(RequestView {
                id: r.request_id,
                phase,
                block_ids: r.block_ids.clone(),
                num_prompt_tokens: r.num_prompt_tokens,
                num_tokens: r.num_prompt_tokens + r.num_output_tokens,
                num_computed_tokens: r.num_computed_tokens,
                num_cached_tokens: r.num_cached_tokens,
                num_preemptions: r.num_preemptions,
                num_spec_tokens: r.num_spec_tokens,
                num_rejected_tokens: r.num_rejected_tokens,
            })
        })
        .collect();
    KvView {
        block_size: snapshot.block_size,
        blocks,
        requests,
        running: snapshot.running.clone(),
        waiting: snapshot.waiting.clone(),
    }
}

/// The visualizer's events from a run of core events, in order. A preemption takes the
/// blocks of the victim's `Free` just before it (which it replaces), a resume the blocks of
/// its request's latest cache hit; step markers and cache insertions are left out.
pub fn convert_events(raw: &[KvEvent]) -> Vec<VizEvent> {
    let mut out: Vec<VizEvent> = Vec::with_capacity(raw.len());
    for event in raw {
        let converted = match event {
            KvEvent::Step { .. } | KvEvent::Cache { .. } => continue,
            KvEvent::Allocate { request_id, block_ids } => {
                VizEvent::Allocate { request: *request_id, blocks: block_ids.clone() }
            }
            KvEvent::CacheHit { request_id, block_ids, num_tokens } => VizEvent::CacheHit {
                request: *request_id,
                blocks: block_ids.clone(),
                num_tokens: *num_tokens,
            },
            KvEvent::Evict { block_id, block_hash } => {
                VizEvent::Evict { block: *block_id, hash: *block_hash }
            }
            KvEvent::Free { request_id, block_ids } => {
                VizEvent::Free { request: *request_id, blocks: block_ids.clone() }
            }
            KvEvent::Preempt { request_id, needed_by } => {
                let blocks = match out.last() {
                    Some(VizEvent::Free { request, .. }) if request == request_id => match out.pop() {
                        Some(VizEvent::Free { blocks, .. }) => blocks,
                        _ => Vec::new(),
                    },
                    _ => Vec::new(),
                };
                VizEvent::Preempt { request: *request_id, needed_by: *needed_by, blocks }
            }
            KvEvent::Resume { request_id, num_cached_tokens } => {
                let hit_blocks = out
                    .iter()
                    .rev()
                    .find_map(|e| match e {
                        VizEvent::CacheHit { request, blocks, .. } if request == request_id => {
                            Some(blocks.clone())
                        }
                        _ => None,
                    })
                    .unwrap_or_default();
                VizEvent::Resume { request: *request_id, hit_blocks, num_cached_tokens: *num_cached_tokens }
            }
            KvEvent::Finish { request_id, .. } => VizEvent::Finish { request: *request_id },
            KvEvent::InvalidBlocks { block_ids, .. } => VizEvent::InvalidBlocks { blocks: block_ids.clone() },
        };
        out.push(converted);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request::FinishReason;

    #[test]
    fn preemption_takes_the_victims_blocks_and_resume_its_hits() {
        let raw = vec![
            KvEvent::Free { request_id: 5, block_ids: vec![7, 8] },
            KvEvent::Preempt { request_id: 5, needed_by: 2 },
            KvEvent::Allocate { request_id: 2, block_ids: vec![8] },
            KvEvent::Step { step: 3, num_scheduled_tokens: 4, num_running: 1, num_waiting: 1 },
            KvEvent::CacheHit { request_id: 5, block_ids: vec![7], num_tokens: 16 },
            KvEvent::Resume { request_id: 5, num_cached_tokens: 16 },
            KvEvent::Finish { request_id: 2, reason: FinishReason::Length },
        ];
        assert_eq!(
            convert_events(&raw),
            vec![
                VizEvent::Preempt { request: 5, needed_by: 2, blocks: vec![7, 8] },
                VizEvent::Allocate { request: 2, blocks: vec![8] },
                VizEvent::CacheHit { request: 5, blocks: vec![7], num_tokens: 16 },
                VizEvent::Resume { request: 5, hit_blocks: vec![7], num_cached_tokens: 16 },
                VizEvent::Finish { request: 2 },
            ]
        );
    }

    #[test]
    fn a_free_of_another_request_is_kept() {
        let raw = vec![
            KvEvent::Free { request_id: 1, block_ids: vec![3] },
            KvEvent::Preempt { request_id: 5, needed_by: 2 },
        ];
        assert_eq!(
            convert_events(&raw),
            vec![
                VizEvent::Free { request: 1, blocks: vec![3] },
                VizEvent::Preempt { request: 5, needed_by: 2, blocks: vec![] },
            ]
        );
    }

    /// A verification that rejects two of three proposals: the view shows the rejected slots
    /// where they were (after the computed tokens), the next proposals past the known
    /// tokens, and the counters the drafted and accepted tokens.
    #[test]
    fn the_view_shows_proposed_and_rejected_slots() {
        use std::collections::HashMap;

        use crate::core::cache_config::CacheConfig;
        use crate::core::output::ModelRunnerOutput;
        use crate::core::request::Request;
        use crate::core::scheduler_config::SchedulerConfig;
        use crate::core::spec_decode::SpeculativeConfig;
        use crate::sampling::SamplingParams;
        use crate::viz::ui::speculative_slots;

        let config = SchedulerConfig {
            speculative_config: Some(SpeculativeConfig::ngram(3, 1, 2)),
            ..SchedulerConfig::default()
        };
        let cache = CacheConfig { block_size: 4, num_gpu_blocks: 20, ..CacheConfig::default() };
        let mut s = Scheduler::new(config, cache).unwrap();
        let prompt = vec![1, 2, 3, 4, 5, 6, 7, 1, 2];
        s.add_request(Request::new(1, prompt, SamplingParams::greedy(10), None, 0.0)).unwrap();
        let step = |s: &mut Scheduler, sampled: Vec<u32>| {
            let out = s.schedule();
            let result =
                ModelRunnerOutput { sampled_token_ids: HashMap::from([(1, sampled)]), ..Default::default() };
            s.update_from_output(&out, &result);
        };
        step(&mut s, vec![3]);
        let view = kv_view(&s.snapshot());
        // [.., 1, 2, 3] proposes 4, 5, 6 at positions 10..13.
        assert_eq!(speculative_slots(&view.requests[0]), ((10, 13), (9, 9)));
        // 4 accepted, 5 rejected (9 sampled there), 6 rejected; [.., 3, 4, 9] proposes nothing.
        step(&mut s, vec![4, 9]);
        let view = kv_view(&s.snapshot());
        let request = &view.requests[0];
        assert_eq!((request.num_spec_tokens, request.num_rejected_tokens), (0, 2));
        assert_eq!(speculative_slots(request), ((12, 12), (11, 13)));
        let counters = counters(&s.stats(), 0, &HostLoad::default());
        assert_eq!((counters.spec_draft_tokens, counters.spec_accepted_tokens), (3, 1));
    }
}
