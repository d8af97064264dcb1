//! Executors turn a `SchedulerOutput` into sampled tokens.

pub mod sim;
pub mod wgpu;
pub mod workload;

use crate::core::output::{ModelRunnerOutput, SchedulerOutput};

/// Something that runs the model for one scheduler step.
pub trait ModelExecutor {
    /// Compute every scheduled token and sample for each request whose known tokens are
    /// all computed after this step.
    fn execute(&mut self, scheduler_output: &SchedulerOutput) -> Result<ModelRunnerOutput, ExecutorError>;
}

/// Why a step could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The GPU reported an error (out of memory, lost device, validation).
    #[error("device error: {0}")]
    Device(String),
    /// The scheduler output asked for something the executor cannot do.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}
