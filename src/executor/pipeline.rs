//! Executors that launch a step without waiting for it: with async scheduling the step after
//! it is recorded and submitted while it runs, and its output is collected afterwards.

use std::collections::HashMap;

use super::ExecutorError;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::ids::RequestId;
use crate::structured::TokenMask;

/// Steps launched in order and collected in the same order. A step may be launched while the
/// one before it runs: its tokens whose ids that step samples come from the device where it
/// samples them there, and otherwise the executor waits for that step first.
pub trait StepPipeline {
    /// Starts `scheduled` (its constrained requests' token masks in `masks`) and returns once
    /// it is submitted; an error means it was not launched (and is not collected).
    fn launch(
        &mut self,
        scheduled: &SchedulerOutput,
        masks: HashMap<RequestId, Vec<TokenMask>>,
    ) -> Result<(), ExecutorError>;

    /// Waits for the oldest launched step not collected yet and returns its output.
    fn collect(&mut self) -> Result<ModelRunnerOutput, ExecutorError>;

    /// Waits for every launched step (their outputs kept for [`Self::collect`]), so that a call
    /// on the executor sees every request's tokens.
    fn settle(&mut self);
}
