//! The executor on a thread of its own: the engine hands it steps in order and takes their
//! outputs back in order, so with async scheduling it schedules step n+1 and processes
//! step n's outputs while the executor runs. Where the executor pipelines steps
//! ([`ModelExecutor::pipeline`]) and the engine runs ahead, a step is launched as it arrives
//! (recorded and submitted while the step before it still runs on the device) and collected
//! when the engine waits for it.

use std::collections::{HashMap, VecDeque};
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
    /// The engine waits for the oldest step's result.
    Collect,
    Call(Call),
}

/// A step handed to the executor whose result the engine has not taken.
enum Outstanding {
    /// Launched on the executor's pipeline at this instant, to be collected.
    Launched(Instant),
    /// Run (or failed to launch) already.
    Done(Box<StepResult>),
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
    /// Moves `executor` to a new thread; with `ahead` (the engine schedules one step ahead),
    /// steps go through its pipeline where it has one.
    pub fn spawn(mut executor: BoxedExecutor, ahead: bool) -> Self {
        let supports_async_scheduling = executor.supports_async_scheduling();
        let computes_prompt_logprobs = executor.computes_prompt_logprobs();
        let (jobs, job_queue) = channel::<Job>();
        let (results, result_queue) = channel();
        let thread = std::thread::Builder::new()
            .name("pagoda-executor".into())
            .spawn(move || {
                let mut outstanding = VecDeque::new();
                for job in job_queue {
                    match job {
                        Job::Step(scheduled, masks) => {
                            outstanding.push_back(run_or_launch(executor.as_mut(), ahead, &scheduled, masks));
                        }
                        Job::Collect => {
                            let result = match outstanding.pop_front() {
                                Some(Outstanding::Done(result)) => *result,
                                Some(Outstanding::Launched(started)) => {
                                    let output = match executor.pipeline() {
                                        Some(pipeline) => pipeline.collect(),
                                        None => Err(ExecutorError::Config(
                                            "the launched step has no pipeline".into(),
                                        )),
                                    };
                                    finished(executor.as_ref(), output, started)
                                }
                                None => finished(
                                    executor.as_ref(),
                                    Err(ExecutorError::Config("no step to wait for".into())),
                                    Instant::now(),
                                ),
                            };
                            if results.send(result).is_err() {
                                break;
                            }
                        }
                        Job::Call(call) => {
                            if let Some(pipeline) = executor.pipeline() {
                                pipeline.settle();
                            }
                            call(executor.as_mut())
                        }
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
        if let Some(jobs) = &self.jobs {
            // A stopped thread shows in the receive.
            let _ = jobs.send(Job::Collect);
        }
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

/// Runs `scheduled` on `executor`, or with `ahead` launches it on its pipeline where it has one.
fn run_or_launch(
    executor: &mut (dyn ModelExecutor + Send),
    ahead: bool,
    scheduled: &SchedulerOutput,
    masks: HashMap<RequestId, Vec<TokenMask>>,
) -> Outstanding {
    let started = Instant::now();
    let output = match executor.pipeline().filter(|_| ahead) {
        Some(pipeline) => match pipeline.launch(scheduled, masks) {
            Ok(()) => return Outstanding::Launched(started),
            Err(error) => Err(error),
        },
        None => executor.execute(scheduled, &mut StepMasks::ready(masks)),
    };
    Outstanding::Done(Box::new(finished(executor, output, started)))
}

/// The result of a step `executor` started at `started` and just finished with `output`.
fn finished(
    executor: &(dyn ModelExecutor + Send),
    output: Result<ModelRunnerOutput, ExecutorError>,
    started: Instant,
) -> StepResult {
    let timing = executor.last_step_timing();
    let ended = Instant::now();
    let counters = executor.device_counters();
    StepResult { output, timing, started, ended, counters }
}

impl Drop for ExecutorWorker {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
