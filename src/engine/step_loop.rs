//! The engine's one loop: a scheduler's steps handed to the executor's thread in order (one
//! step ahead with async scheduling), their outputs applied to the scheduler, and the host's
//! time between them measured as hidden behind a running step or exposed. [`super::Engine`]
//! runs its requests through it, and `pagoda viz` its workloads.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::overlap::{HostOverlap, OverlapMeter};
use super::worker::{BoxedExecutor, ExecutorWorker};
use crate::core::output::{EngineCoreOutput, SchedulerOutput};
use crate::core::scheduler::Scheduler;
use crate::executor::ExecutorError;
use crate::gpu::GpuCounters;
use crate::ids::RequestId;
use crate::structured::TokenMask;

/// The masks a scheduled step's constrained requests sample under, per request and position.
pub type StepMaskMap = HashMap<RequestId, Vec<TokenMask>>;

/// Steps in flight on the executor's thread, and the host time measured around them.
pub struct StepLoop {
    /// The executor, on a thread of its own.
    executor: ExecutorWorker,
    /// Steps handed to the executor whose outputs have not been taken, oldest first (two
    /// with async scheduling: the next one is scheduled before the last one's tokens are known).
    in_flight: VecDeque<Arc<SchedulerOutput>>,
    /// Schedule one step ahead (where the executor runs such steps).
    async_scheduling: bool,
    /// Host work hidden behind steps and exposed between them.
    overlap: OverlapMeter,
    /// The device counters after the last step whose outputs were taken.
    last_counters: Option<GpuCounters>,
    /// When the host began processing the outputs of the step last taken.
    processing_since: Option<Instant>,
}

impl std::fmt::Debug for StepLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepLoop")
            .field("in_flight", &self.in_flight.len())
            .field("async_scheduling", &self.async_scheduling)
            .finish_non_exhaustive()
    }
}

impl StepLoop {
    /// Moves `executor` to a thread of its own; steps go one ahead when `async_scheduling`
    /// (the scheduler's) and the executor runs such steps.
    pub fn new(executor: BoxedExecutor, async_scheduling: bool) -> Self {
        let async_scheduling = async_scheduling && executor.supports_async_scheduling();
        let executor = ExecutorWorker::spawn(executor, async_scheduling);
        Self {
            async_scheduling,
            executor,
            in_flight: VecDeque::new(),
            overlap: OverlapMeter::default(),
            last_counters: None,
            processing_since: None,
        }
    }

    /// True when it schedules one step ahead of the executor.
    pub fn async_scheduling(&self) -> bool {
        self.async_scheduling
    }

    /// The executor's thread, for calls between steps.
    pub fn executor(&self) -> &ExecutorWorker {
        &self.executor
    }

    /// The host time measured so far, and the steps it is per.
    pub fn host_overlap(&self) -> HostOverlap {
        self.overlap.totals()
    }

    /// The device counters after the last step whose outputs were taken (executors on a
    /// device), if any step was.
    pub fn last_counters(&self) -> Option<GpuCounters> {
        self.last_counters
    }

    /// Steps handed to the executor whose outputs have not been taken.
    pub fn num_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Takes the outputs of the oldest step in flight, first scheduling and handing over a
    /// step when none is in flight and, with async scheduling, the next one as well, so the
    /// executor runs it while these outputs are processed; `masks` gives each scheduled
    /// step's constrained requests their masks. Returns the scheduler's outputs (none when
    /// nothing was left to run); call [`Self::processed`] once they are processed. When the
    /// executor failed the step, every step in flight is waited for and all of them are
    /// undone in the scheduler before the error is returned.
    pub fn step(
        &mut self,
        scheduler: &mut Scheduler,
        mut masks: impl FnMut(&Scheduler, &SchedulerOutput) -> StepMaskMap,
    ) -> Result<Vec<EngineCoreOutput>, ExecutorError> {
        let mut start = Instant::now();
        if self.in_flight.is_empty() {
            start = self.submit_next(scheduler, &mut masks, start);
        }
        if self.async_scheduling && !self.in_flight.is_empty() {
            start = self.submit_next(scheduler, &mut masks, start);
        }
        self.overlap.host(start);
        let Some(scheduled) = self.in_flight.pop_front() else {
            return Ok(Vec::new());
        };
        let result = self.executor.wait();
        let start = Instant::now();
        self.overlap.step(result.started, result.ended);
        self.last_counters = result.counters.or(self.last_counters);
        let runner_output = match result.output {
            Ok(output) => output,
            Err(error) => {
                self.discard(scheduler, &scheduled);
                return Err(error);
            }
        };
        if let Some(timing) = result.timing {
            scheduler.observe_step_timing(&timing);
        }
        let mut outputs = scheduler.update_from_output(&scheduled, &runner_output);
        let failed = &runner_output.failed_kv_transfers;
        outputs.extend(scheduler.handle_failed_transfers(&failed.stores, &failed.loads));
        self.processing_since = Some(start);
        Ok(outputs)
    }

    /// The outputs of the step last taken are processed: the host time since it was taken
    /// is measured.
    pub fn processed(&mut self) {
        if let Some(start) = self.processing_since.take() {
            self.overlap.host(start);
        }
    }

    /// Schedules a step and hands it to the executor, with its constrained requests' masks
    /// (nothing while no request is live). The host work from `start` is measured up to the
    /// hand-over; returns when the host's work goes on.
    fn submit_next(
        &mut self,
        scheduler: &mut Scheduler,
        masks: &mut impl FnMut(&Scheduler, &SchedulerOutput) -> StepMaskMap,
        start: Instant,
    ) -> Instant {
        if !scheduler.has_unfinished_requests() {
            return start;
        }
        let scheduled = scheduler.schedule();
        let step_masks = masks(scheduler, &scheduled);
        let scheduled = Arc::new(scheduled);
        self.overlap.host(start);
        self.executor.submit(scheduled.clone(), step_masks);
        self.in_flight.push_back(scheduled);
        Instant::now()
    }

    /// After the executor failed `scheduled`: takes the steps still in flight and undoes
    /// them all in the scheduler.
    fn discard(&mut self, scheduler: &mut Scheduler, scheduled: &SchedulerOutput) {
        while let Some(later) = self.in_flight.pop_back() {
            let result = self.executor.wait();
            self.overlap.step(result.started, result.ended);
            scheduler.discard_step(&later);
        }
        scheduler.discard_step(scheduled);
    }
}
