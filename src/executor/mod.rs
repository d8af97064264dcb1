//! Executors turn a `SchedulerOutput` into sampled tokens.

pub mod draft;
pub mod fault;
pub mod gpu_runner;
pub mod host_kv;
pub mod lora;
pub mod masks;
pub mod pipeline;
pub mod sim;
pub mod step;

pub use self::masks::StepMasks;
pub use self::pipeline::StepPipeline;
pub use self::step::{FailedStep, MaskJob, run_step};
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};

/// Something that runs the model for one scheduler step.
pub trait ModelExecutor {
    /// Compute every scheduled token and sample for each request whose known tokens are
    /// all computed after this step. A constrained request (one with
    /// `structured_outputs`) samples only among the tokens its mask in `masks` allows.
    fn execute(
        &mut self,
        scheduler_output: &SchedulerOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError>;

    /// What the last step cost (forward pass and host KV copies), for the scheduler's
    /// load-or-recompute choice; `None` where the executor does not measure it.
    fn last_step_timing(&self) -> Option<crate::core::host_tier::StepTiming> {
        None
    }

    /// True when it can run a step scheduled one step ahead (async scheduling): it keeps the
    /// tokens it samples and fills a request's placeholder positions (those past its
    /// `new_token_ids`) from them.
    fn supports_async_scheduling(&self) -> bool {
        false
    }

    /// Its step pipeline, where it launches steps without waiting for them (async
    /// scheduling then records and submits a step while the one before it runs).
    fn pipeline(&mut self) -> Option<&mut dyn StepPipeline> {
        None
    }

    /// True when it computes prompt logprobs (`SamplingParams::prompt_logprobs`); the engine
    /// refuses requests asking for them where it does not.
    fn computes_prompt_logprobs(&self) -> bool {
        false
    }

    /// The device layer's counters, for executors that run on one.
    fn device_counters(&self) -> Option<crate::gpu::GpuCounters> {
        None
    }

    /// Device time per kernel variant, for executors that run on a device opened with
    /// [`crate::gpu::GpuOptions::profile_kernels`].
    fn kernel_times(&self) -> Option<crate::gpu::KernelTimes> {
        None
    }

    /// Reads the LoRA adapter at `path` as adapter `id`, for requests that name it.
    fn load_lora(&mut self, id: u32, path: &std::path::Path) -> Result<(), ExecutorError> {
        let _ = (id, path);
        Err(ExecutorError::Config(
            "this executor does not serve LoRA adapters (start it with LoRA enabled)".into(),
        ))
    }

    /// Forgets LoRA adapter `id`.
    fn unload_lora(&mut self, id: u32) -> Result<(), ExecutorError> {
        let _ = id;
        Err(ExecutorError::Config("this executor does not serve LoRA adapters".into()))
    }
}

/// Why a step could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The step failed on the device (out of memory, validation, a failed submit); the
    /// device still works, so later steps may succeed.
    #[error("device error: {0}")]
    Device(String),
    /// The device is gone: no later step can succeed.
    #[error("the device was lost: {0}")]
    DeviceLost(String),
    /// The executor's configuration cannot work (a KV pool too small to hold anything).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The scheduler output asked for something the executor cannot do.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// The step carries host KV copies but the executor was built without a host tier.
    #[error("the step copies KV blocks to or from host memory but the executor has no host tier")]
    HostTierUnsupported,
    /// The draft model (draft-model speculation) cannot be opened or loaded, or does not fit
    /// the model.
    #[error("draft model: {0}")]
    DraftModel(String),
    /// A constrained request came without its token mask.
    #[error("request {0} has structured outputs but no token mask this step")]
    MissingMask(crate::ids::RequestId),
}

impl ExecutorError {
    /// True when the device is gone and the engine must stop.
    pub fn is_device_lost(&self) -> bool {
        matches!(self, Self::DeviceLost(_))
    }
}
