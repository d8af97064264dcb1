//! What the visualizer remembers between frames: the latest KV view, a history of counters
//! for the time plots, the event log, and recent per-block marks (hit, evicted, preempted).

use std::collections::{HashMap, VecDeque};

use crate::ids::BlockId;
use crate::viz::model::{Counters, KvView, StepRecord, VizEvent};

/// Counter samples kept for the time plots.
pub const HISTORY_LEN: usize = 400;
/// Events kept in the log.
pub const EVENT_LOG_LEN: usize = 300;
/// Steps a block keeps the outline of what just happened to it.
pub const MARK_STEPS: u64 = 6;

/// Counters at one step, for the time plots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Step number.
    pub step: u64,
    /// Engine time, seconds.
    pub time_s: f64,
    /// Counters after the step.
    pub counters: Counters,
    /// Generated tokens per second of engine time since the previous sample.
    pub tokens_per_s: f64,
}

/// What recently happened to a block, drawn as its outline for a few steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMark {
    /// It was hit in the prefix cache.
    Hit,
    /// It was evicted (reallocated and lost its hash).
    Evicted,
    /// It was released by a preemption.
    Preempted,
}

/// The visualizer's memory.
#[derive(Debug, Clone, Default)]
pub struct VizState {
    /// The latest KV cache view.
    pub kv: KvView,
    /// Step of the latest record.
    pub step: u64,
    /// Engine time of the latest record, seconds.
    pub time_s: f64,
    /// Counters of the latest record.
    pub counters: Counters,
    /// Recent counter samples, oldest first.
    pub history: VecDeque<Sample>,
    /// Recent events with their step, oldest first.
    pub events: VecDeque<(u64, VizEvent)>,
    /// Blocks with a recent mark and the step it was set.
    pub marks: HashMap<BlockId, (BlockMark, u64)>,
    /// True once the feed said it will send nothing more.
    pub ended: bool,
}

impl VizState {
    /// Takes in one step's record.
    pub fn apply(&mut self, record: StepRecord) {
        let tokens_per_s = match self.history.back() {
            Some(prev) if record.time_s > prev.time_s => {
                record.counters.generated_tokens.saturating_sub(prev.counters.generated_tokens) as f64
                    / (record.time_s - prev.time_s)
            }
            Some(prev) => prev.tokens_per_s,
            None => 0.0,
        };
        self.history.push_back(Sample {
            step: record.step,
            time_s: record.time_s,
            counters: record.counters,
            tokens_per_s,
        });
        while self.history.len() > HISTORY_LEN {
            self.history.pop_front();
        }
        for event in record.events {
            self.mark_blocks(&event, record.step);
            self.events.push_back((record.step, event));
        }
        while self.events.len() > EVENT_LOG_LEN {
            self.events.pop_front();
        }
        self.step = record.step;
        self.time_s = record.time_s;
        self.counters = record.counters;
        self.marks.retain(|_, (_, at)| record.step.saturating_sub(*at) < MARK_STEPS);
        if let Some(kv) = record.kv {
            self.kv = kv;
        }
    }

    /// The mark a block shows now, if any.
    pub fn mark(&self, block: BlockId) -> Option<BlockMark> {
        self.marks.get(&block).map(|(mark, _)| *mark)
    }

    /// Generated tokens per second at the latest sample.
    pub fn tokens_per_s(&self) -> f64 {
        self.history.back().map_or(0.0, |s| s.tokens_per_s)
    }

    fn mark_blocks(&mut self, event: &VizEvent, step: u64) {
        let (mark, blocks): (BlockMark, &[BlockId]) = match event {
            VizEvent::CacheHit { blocks, .. } => (BlockMark::Hit, blocks),
            VizEvent::Resume { hit_blocks, .. } => (BlockMark::Hit, hit_blocks),
            VizEvent::Preempt { blocks, .. } => (BlockMark::Preempted, blocks),
            VizEvent::Evict { block, .. } => (BlockMark::Evicted, std::slice::from_ref(block)),
            VizEvent::InvalidBlocks { blocks } => (BlockMark::Evicted, blocks),
            VizEvent::Allocate { .. } | VizEvent::Free { .. } | VizEvent::Finish { .. } => return,
        };
        for &block in blocks {
            self.marks.insert(block, (mark, step));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, time_s: f64, generated: u64, events: Vec<VizEvent>) -> StepRecord {
        StepRecord {
            step,
            time_s,
            counters: Counters { generated_tokens: generated, ..Counters::default() },
            events,
            kv: None,
        }
    }

    #[test]
    fn tokens_per_second_from_consecutive_samples() {
        let mut state = VizState::default();
        state.apply(record(1, 0.5, 10, vec![]));
        state.apply(record(2, 1.0, 30, vec![]));
        assert_eq!(state.tokens_per_s(), 40.0);
        assert_eq!(state.history.len(), 2);
    }

    #[test]
    fn marks_expire_after_mark_steps() {
        let mut state = VizState::default();
        state.apply(record(
            1,
            0.1,
            0,
            vec![VizEvent::Preempt { request: 3, needed_by: 1, blocks: vec![4, 5] }],
        ));
        assert_eq!(state.mark(4), Some(BlockMark::Preempted));
        assert_eq!(state.mark(6), None);
        for step in 2..=MARK_STEPS {
            state.apply(record(step, step as f64, 0, vec![]));
        }
        assert_eq!(state.mark(5), Some(BlockMark::Preempted));
        state.apply(record(MARK_STEPS + 1, 10.0, 0, vec![]));
        assert_eq!(state.mark(5), None);
    }

    #[test]
    fn history_and_log_are_bounded() {
        let mut state = VizState::default();
        for step in 1..=(HISTORY_LEN as u64 + 50) {
            state.apply(record(step, step as f64, step, vec![VizEvent::Finish { request: step }]));
        }
        assert_eq!(state.history.len(), HISTORY_LEN);
        assert_eq!(state.events.len(), EVENT_LOG_LEN);
        assert_eq!(state.events.back().map(|(s, _)| *s), Some(HISTORY_LEN as u64 + 50));
    }
}
