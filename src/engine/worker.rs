//! The executor on a thread of its own: the engine hands it steps in order and takes their
//! outputs back in order, so with async scheduling it schedules step n+1 and processes
//! step n's outputs while the executor runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::core::host_tier::StepTiming;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::executor::{ExecutorError, ModelExecutor, StepMasks};
use crate::gpu::GpuCounters;
use crate::ids::RequestId;
use crate::structured::TokenMask;

/// An executor that can move to the worker thread.
pub type BoxedExecutor = Box<dyn ModelExecutor + Send>;

/// A call on the executor, made on its thread between steps.
type Call = Box<dyn FnOnce(&mut (dyn ModelExecutor + Send)) + Send>;

enum Job {
    Step(Arc<SchedulerOutput>, HashMap<RequestId, Vec<TokenMask>>),
    Call(Call),
}

/// One step's result from the worker.
#[derive(Debug)]
pub struct StepResult {
    /// What the executor returned.
    pub output: Result<ModelRunnerOutput, ExecutorError>,
    /// The executor's measurements of the step, where it makes them.
    pub timing: Option<StepTiming>,
    /// When the executor started the step.
    pub started: Instant,
    /// When it returned.
    pub ended: Instant,
    /// The device layer's counters after it (executors on a device).
    pub counters: Option<GpuCounters>,
}

/// The executor's thread, fed through a queue.
pub struct ExecutorWorker {
    jobs: Option<Sender<Job>>,
    results: Receiver<StepResult>,
    thread: Option<JoinHandle<()>>,
    supports_async_scheduling: bool,
    computes_prompt_logprobs: bool,
}

impl std::fmt::Debug for ExecutorWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorWorker").finish_non_exhaustive()
    }
}

impl ExecutorWorker {
    /// Moves `executor` to a new thread.
    pub fn spawn(mut executor: BoxedExecutor) -> Self {
        let supports_async_scheduling = executor.supports_async_scheduling();
        let computes_prompt_logprobs = executor.computes_prompt_logprobs();
        let (jobs, job_queue) = channel::<Job>();
        let (results, result_queue) = channel();
        let thread = std::thread::Builder::new()
            .name("pagoda-executor".into())
            .spawn(move || {
                for job in job_queue {
                    match job {
                        Job::Step(scheduled, masks) => {
                            let started = Instant::now();
                            let output = executor.execute(&scheduled, &mut StepMasks::ready(masks));
                            let timing = executor.last_step_timing();
                            let ended = Instant::now();
                            let counters = executor.device_counters();
                            let result = StepResult { output, timing, started, ended, counters };
                            if results.send(result).is_err() {
                                break;
                            }
                        }
                        Job::Call(call) => call(executor.as_mut()),
                    }
                }
            })
            .expect("the executor thread starts");
        Self {
            jobs: Some(jobs),
            results: result_queue,
            thread: Some(thread),
            supports_async_scheduling,
            computes_prompt_logprobs,
        }
    }

    /// True when the executor runs steps scheduled one ahead.
    pub fn supports_async_scheduling(&self) -> bool {
        self.supports_async_scheduling
    }

    /// True when the executor computes prompt logprobs.
    pub fn computes_prompt_logprobs(&self) -> bool {
        self.computes_prompt_logprobs
    }

    /// Queues a step (its constrained requests' masks computed).
    pub fn submit(&self, scheduled: Arc<SchedulerOutput>, masks: HashMap<RequestId, Vec<TokenMask>>) {
        if let Some(jobs) = &self.jobs {
            // A stopped thread shows in `wait`.
            let _ = jobs.send(Job::Step(scheduled, masks));
        }
    }

    /// The result of the oldest step submitted and not waited for.
    pub fn wait(&self) -> StepResult {
        self.results.recv().unwrap_or_else(|_| {
            let now = Instant::now();
            StepResult {
                output: Err(ExecutorError::DeviceLost("the executor thread stopped".into())),
                timing: None,
                started: now,
                ended: now,
                counters: None,
            }
        })
    }

    /// Runs `call` on the executor after the steps queued before it; `None` when the
    /// executor thread is gone.
    pub fn call<R: Send + 'static>(
        &self,
        call: impl FnOnce(&mut (dyn ModelExecutor + Send)) -> R + Send + 'static,
    ) -> Option<R> {
        let (reply, answer) = channel();
        let job = Job::Call(Box::new(move |executor| {
            let _ = reply.send(call(executor));
        }));
        self.jobs.as_ref()?.send(job).ok()?;
        answer.recv().ok()
    }
}

impl Drop for ExecutorWorker {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
