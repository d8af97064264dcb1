//! Drives a scheduler and an executor step by step for the visualizer, through the engine's
//! one loop ([`StepLoop`]: the executor on its own thread, one step ahead with async
//! scheduling, host time measured hidden or exposed): requests arrive on the engine clock,
//! what the engine did becomes [`StepRecord`]s (one per step for traces and snapshots, one
//! per window frame live), and a live run follows the window's pause/step/speed controls.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::core::request::RequestStatus;
use crate::core::scheduler::{AddRequestError, Scheduler};
use crate::engine::step_loop::StepLoop;
use crate::executor::{ExecutorError, ModelExecutor, StepMasks};
use crate::ids::{RequestId, TokenId};
use crate::viz::VizError;
use crate::viz::control::SimControl;
use crate::viz::feed::VizFeed;
use crate::viz::model::StepRecord;
use crate::viz::source::{EngineReport, HostLoad, RecordBuilder, SchedulerProbe};
use crate::viz::trace::TraceWriter;
use crate::workload::Arrival;

/// Reads an executor's engine time in seconds (after each step, on the executor's thread).
pub type EngineClock<E> = Box<dyn Fn(&E) -> f64 + Send>;

/// Why a driven step failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The scheduler rejected a request.
    #[error("request rejected: {0}")]
    Rejected(#[from] AddRequestError),
    /// The executor failed.
    #[error("executor failed: {0}")]
    Executor(#[from] ExecutorError),
}

/// A scheduler, the engine's step loop around an executor, the requests still to arrive,
/// and the probe that reports steps.
pub struct Driver {
    scheduler: Scheduler,
    steps: StepLoop,
    /// The executor's clock after each step it ran, in order.
    step_clocks: Receiver<f64>,
    /// The executor's clock after the last step whose outputs were taken.
    clock_s: f64,
    pending: VecDeque<(RequestId, Arrival)>,
    eos_token_id: Option<TokenId>,
    probe: SchedulerProbe,
    idle_s: f64,
}

impl Driver {
    /// A driver; `clock` reads the executor's engine time in seconds (simulated time for the
    /// sim executor, wall time for a real one). The executor moves to the step loop's thread;
    /// steps go one ahead when the scheduler's `async_scheduling` is on and the executor runs
    /// such steps. Arrivals (with their request ids, see
    /// [`crate::workload::Workload::numbered`]) are taken in time order; requests stop at
    /// `eos_token_id` unless they ignore EOS.
    pub fn new<E: ModelExecutor + Send + 'static>(
        scheduler: Scheduler,
        executor: E,
        clock: EngineClock<E>,
        mut arrivals: Vec<(RequestId, Arrival)>,
        eos_token_id: Option<TokenId>,
    ) -> Self {
        arrivals.sort_by(|a, b| a.1.time_s.total_cmp(&b.1.time_s));
        let probe = SchedulerProbe::attach(&scheduler);
        let (clocks, step_clocks) = channel();
        let clocked = Box::new(Clocked { executor, clock, clocks });
        let steps = StepLoop::new(clocked, scheduler.async_scheduling());
        Self {
            scheduler,
            steps,
            step_clocks,
            clock_s: 0.0,
            pending: arrivals.into(),
            eos_token_id,
            probe,
            idle_s: 0.0,
        }
    }

    /// Engine time, seconds: the executor's clock after the last step whose outputs were
    /// taken, plus any idle time skipped waiting for arrivals.
    pub fn time_s(&self) -> f64 {
        self.clock_s + self.idle_s
    }

    /// True when it schedules one step ahead of the executor (async scheduling).
    pub fn async_scheduling(&self) -> bool {
        self.steps.async_scheduling()
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// True when every request has arrived and finished.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && !self.scheduler.has_unfinished_requests()
    }

    /// Runs one engine step (takes the outputs of the oldest step in flight, scheduling one
    /// ahead with async scheduling), admitting what has arrived and skipping idle time to the
    /// next arrival when nothing is left to run. Returns false, doing nothing, when
    /// everything is done. A failed step fails every live request (as the engine does); a
    /// lost device is an error.
    pub fn advance(&mut self) -> Result<bool, DriverError> {
        if self.is_done() {
            return Ok(false);
        }
        if !self.scheduler.has_unfinished_requests()
            && let Some(next) = self.pending.front()
        {
            self.idle_s += (next.1.time_s - self.time_s()).max(0.0);
        }
        let now = self.time_s();
        while self.pending.front().is_some_and(|(_, arrival)| arrival.time_s <= now) {
            if let Some((request_id, arrival)) = self.pending.pop_front() {
                self.scheduler.add_request(arrival.request(request_id, self.eos_token_id))?;
            }
        }
        let taken_before = self.steps.host_overlap().steps;
        let stepped = self.steps.step(&mut self.scheduler, |_, _| HashMap::new());
        self.steps.processed();
        // The clock after each step taken (a failure also takes the steps in flight).
        for _ in taken_before..self.steps.host_overlap().steps {
            if let Ok(clock_s) = self.step_clocks.recv() {
                self.clock_s = clock_s;
            }
        }
        if let Err(error) = stepped {
            if error.is_device_lost() {
                return Err(error.into());
            }
            self.fail_live_requests(&error);
        }
        Ok(true)
    }

    /// What the engine does when the executor fails a step (the step loop undid it and the
    /// steps in flight): every live request ends with an error; later arrivals still run.
    fn fail_live_requests(&mut self, error: &ExecutorError) {
        tracing::warn!(%error, "step failed; failing every live request");
        let mut live = self.scheduler.waiting_ids();
        live.extend_from_slice(self.scheduler.running_ids());
        self.scheduler
            .finish_requests(live, RequestStatus::FinishedError)
            .expect("FinishedError is a finished status");
    }

    /// Everything since the previous report (events, counters now), with a snapshot when
    /// `with_kv`.
    pub fn report(&self, with_kv: bool) -> EngineReport {
        let host = HostLoad { async_scheduling: self.async_scheduling(), overlap: self.steps.host_overlap() };
        self.probe.report(&self.scheduler, self.time_s(), host, with_kv)
    }
}

/// An executor that sends its clock after every step it runs, so the driver knows the engine
/// time of each step it takes while the executor is on the step loop's thread.
struct Clocked<E> {
    executor: E,
    clock: EngineClock<E>,
    clocks: Sender<f64>,
}

impl<E: ModelExecutor> ModelExecutor for Clocked<E> {
    fn execute(
        &mut self,
        scheduler_output: &SchedulerOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        let output = self.executor.execute(scheduler_output, masks);
        // The driver may be gone (its step loop outlives it while joining).
        let _ = self.clocks.send((self.clock)(&self.executor));
        output
    }

    fn last_step_timing(&self) -> Option<crate::core::host_tier::StepTiming> {
        self.executor.last_step_timing()
    }

    fn supports_async_scheduling(&self) -> bool {
        self.executor.supports_async_scheduling()
    }

    fn computes_prompt_logprobs(&self) -> bool {
        self.executor.computes_prompt_logprobs()
    }

    fn device_counters(&self) -> Option<crate::gpu::GpuCounters> {
        self.executor.device_counters()
    }

    fn kernel_times(&self) -> Option<crate::gpu::KernelTimes> {
        self.executor.kernel_times()
    }

    fn load_lora(&mut self, id: u32, path: &std::path::Path) -> Result<(), ExecutorError> {
        self.executor.load_lora(id, path)
    }

    fn unload_lora(&mut self, id: u32) -> Result<(), ExecutorError> {
        self.executor.unload_lora(id)
    }
}

/// Where a live run sends its steps.
pub struct LiveSinks<'a> {
    /// The window's feed.
    pub feed: &'a VizFeed,
    /// The controls the window changes.
    pub control: &'a SimControl,
    /// A trace file that gets every step with a full KV view.
    pub recorder: Option<TraceWriter>,
}

/// Runs `driver` to the end at the pace the controls set; ends the feed. With a recorder,
/// every step goes to the trace with a KV view and to the window as a record. Without one,
/// the window gets one raw report per frame it asks for, covering every step since the
/// last (the window keeps asking while paused, so every step taken shows), and one at the
/// end. Stops early, without error, when the window closes; on an engine or trace error the
/// window still gets every step taken before it.
pub fn drive_live(driver: &mut Driver, mut sinks: LiveSinks<'_>) -> Result<(), VizError> {
    let mut next_due = Instant::now();
    let mut builder = RecordBuilder::default();
    let mut unreported = false;
    let mut delivered = true;
    let mut failure = None;
    while delivered && !sinks.control.is_stopped() {
        let now = Instant::now();
        if now < next_due || !sinks.control.take_step() {
            if unreported && sinks.feed.wants_frame() {
                delivered = sinks.feed.send_engine(driver.report(true));
                unreported = false;
            }
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        next_due = now + Duration::from_secs_f32(1.0 / sinks.control.speed());
        match driver.advance() {
            Ok(true) => {}
            Ok(false) => break,
            Err(error) => {
                failure = Some(VizError::Engine(error.to_string()));
                break;
            }
        }
        if let Some(recorder) = sinks.recorder.as_mut() {
            let record = builder.build(&driver.report(true));
            if let Err(error) = recorder.write(&record) {
                failure = Some(error);
            }
            delivered = sinks.feed.send(record);
            if failure.is_some() {
                break;
            }
        } else if sinks.feed.wants_frame() {
            delivered = sinks.feed.send_engine(driver.report(true));
        } else {
            unreported = true;
        }
    }
    if unreported && delivered {
        sinks.feed.send_engine(driver.report(true));
    }
    sinks.feed.end();
    if let Some(error) = failure {
        return Err(error);
    }
    if let Some(recorder) = sinks.recorder {
        recorder.finish()?;
    }
    Ok(())
}

/// Runs `driver` without pacing until step `step` (or the end, whichever is first) and
/// returns every record, the last one with a KV view (all of them when `kv_every_step`, as
/// a trace needs): the input of an offscreen snapshot.
pub fn run_to_step(driver: &mut Driver, step: u64, kv_every_step: bool) -> Result<Vec<StepRecord>, VizError> {
    let mut records = Vec::new();
    let mut builder = RecordBuilder::default();
    loop {
        let last = records.last().map_or(0, |r: &StepRecord| r.step);
        if last >= step || driver.is_done() {
            break;
        }
        if !driver.advance().map_err(|e| VizError::Engine(e.to_string()))? {
            break;
        }
        let with_kv = kv_every_step || last + 1 >= step;
        records.push(builder.build(&driver.report(with_kv)));
    }
    if let Some(last) = records.last_mut()
        && last.kv.is_none()
    {
        last.kv = Some(crate::viz::source::kv_view(&driver.scheduler().snapshot()));
    }
    Ok(records)
}
