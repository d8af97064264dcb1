//! One engine step, the one place every loop that drives a scheduler goes through: the
//! engine, the workload runners and the visualizer.

use std::collections::HashMap;

use super::{ExecutorError, ModelExecutor, StepMasks};
use crate::core::output::{EngineCoreOutput, SchedulerOutput};
use crate::core::scheduler::Scheduler;
use crate::ids::RequestId;
use crate::structured::TokenMask;

/// Computes the token masks of a step's constrained requests, one per sampled position (on a
/// thread of its own).
pub type MaskJob<'a> = Box<dyn FnOnce() -> HashMap<RequestId, Vec<TokenMask>> + Send + 'a>;

/// A step whose executor failed: what was scheduled (the scheduler has not seen an output
/// for it) and the error.
#[derive(Debug)]
pub struct FailedStep {
    /// What the scheduler scheduled.
    pub scheduled: Box<SchedulerOutput>,
    /// What the executor reported.
    pub error: ExecutorError,
}

/// Schedules one step, runs it on `executor` and hands the sampled tokens back to the
/// scheduler; returns what was scheduled and each moved request's output.
///
/// `masks_for` sees the schedule and may return a job that computes the constrained
/// requests' token masks: it runs on a second thread while the executor runs the model
/// (which waits for the masks only when it samples).
pub fn run_step<'a>(
    scheduler: &mut Scheduler,
    executor: &mut (impl ModelExecutor + ?Sized),
    masks_for: impl FnOnce(&Scheduler, &SchedulerOutput) -> Option<MaskJob<'a>>,
) -> Result<(SchedulerOutput, Vec<EngineCoreOutput>), FailedStep> {
    let scheduled = scheduler.schedule();
    let job = masks_for(scheduler, &scheduled);
    let executed = match job {
        Some(job) => std::thread::scope(|scope| {
            executor.execute(&scheduled, &mut StepMasks::pending(scope.spawn(job)))
        }),
        None => executor.execute(&scheduled, &mut StepMasks::none()),
    };
    match executed {
        Ok(runner_output) => {
            if let Some(timing) = executor.last_step_timing() {
                scheduler.observe_step_timing(&timing);
            }
            let mut outputs = scheduler.update_from_output(&scheduled, &runner_output);
            let failed = &runner_output.failed_kv_transfers;
            outputs.extend(scheduler.handle_failed_transfers(&failed.stores, &failed.loads));
            Ok((scheduled, outputs))
        }
        Err(error) => Err(FailedStep { scheduled: Box::new(scheduled), error }),
    }
}
