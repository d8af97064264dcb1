//! How much of the engine's host work overlapped a step running on the executor (hidden)
//! and how much left the executor idle (exposed).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Host seconds the engine spent per step (scheduling, masks, output processing: what it
/// does outside the executor), split by whether a step was running meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostOverlap {
    /// Steps whose outputs were processed.
    pub steps: u64,
    /// Host seconds while the executor ran a step.
    pub hidden_seconds: f64,
    /// Host seconds while the executor had no step to run.
    pub exposed_seconds: f64,
}

impl HostOverlap {
    /// Mean hidden host microseconds per step.
    pub fn hidden_us_per_step(&self) -> f64 {
        self.hidden_seconds * 1e6 / self.steps.max(1) as f64
    }

    /// Mean exposed host microseconds per step.
    pub fn exposed_us_per_step(&self) -> f64 {
        self.exposed_seconds * 1e6 / self.steps.max(1) as f64
    }

    /// The totals of `self` since `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            steps: self.steps - before.steps,
            hidden_seconds: self.hidden_seconds - before.hidden_seconds,
            exposed_seconds: self.exposed_seconds - before.exposed_seconds,
        }
    }
}

/// Steps kept to measure host work against (two in flight at most, and their neighbours).
const KEPT_STEPS: usize = 4;

/// Matches the engine's host-work intervals against the executor's step intervals.
#[derive(Debug, Default)]
pub struct OverlapMeter {
    /// Host-work intervals not settled yet.
    pending: Vec<(Instant, Instant)>,
    /// The last steps' `(started, ended)` on the executor, oldest first.
    steps: VecDeque<(Instant, Instant)>,
    totals: HostOverlap,
}

impl OverlapMeter {
    /// The engine did host work from `start` to now.
    pub fn host(&mut self, start: Instant) {
        self.pending.push((start, Instant::now()));
    }

    /// A step ran on the executor from `started` to `ended`: every host interval that ended
    /// by then is settled (the executor runs one step at a time, so no later step can
    /// overlap it).
    pub fn step(&mut self, started: Instant, ended: Instant) {
        self.steps.push_back((started, ended));
        if self.steps.len() > KEPT_STEPS {
            self.steps.pop_front();
        }
        self.totals.steps += 1;
        let steps = &self.steps;
        let totals = &mut self.totals;
        self.pending.retain(|&(start, end)| {
            if end > ended {
                return true;
            }
            let hidden: Duration =
                steps.iter().map(|&(s, e)| e.min(end).saturating_duration_since(s.max(start))).sum();
            let total = end - start;
            totals.hidden_seconds += hidden.min(total).as_secs_f64();
            totals.exposed_seconds += total.saturating_sub(hidden).as_secs_f64();
            false
        });
    }

    /// The totals so far.
    pub fn totals(&self) -> HostOverlap {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_work_during_a_step_is_hidden_and_after_it_exposed() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut meter = OverlapMeter::default();
        meter.pending.push((at(2), at(6)));
        meter.pending.push((at(11), at(12)));
        meter.step(at(0), at(4));
        // Both end after the step: a later step may still overlap them.
        assert_eq!(meter.pending.len(), 2);
        meter.step(at(8), at(20));
        let totals = meter.totals();
        assert_eq!(totals.steps, 2);
        assert!((totals.hidden_seconds - 0.003).abs() < 1e-9, "{totals:?}");
        assert!((totals.exposed_seconds - 0.002).abs() < 1e-9, "{totals:?}");
    }
}
