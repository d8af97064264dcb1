//! A workload on simulated time: a scheduler and the simulated executor, one step at a time
//! (the visualizer watches it between steps). With async scheduling the next step is
//! scheduled before the last one's outputs are taken, and the host's time per step
//! ([`crate::executor::sim::CostModel::host_step_s`]) runs behind the step in flight.

use std::collections::{HashMap, VecDeque};

use super::Workload;
use super::releases::Releases;
use super::report::{HostOverlapReport, Latencies, RunCounts, WorkloadReport};
use crate::core::cache_config::CacheConfig;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::core::scheduler::{Scheduler, SchedulerConfigError};
use crate::core::scheduler_config::SchedulerConfig;
use crate::engine::overlap::HostOverlap;
use crate::executor::sim::{SimConfig, SimConfigError, SimExecutor};
use crate::executor::{ExecutorError, ModelExecutor, StepMasks};
use crate::ids::{RequestId, TokenId};

/// Why a workload could not run to completion.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The scheduler configuration is invalid.
    #[error(transparent)]
    Scheduler(#[from] SchedulerConfigError),
    /// The simulated model configuration is invalid.
    #[error(transparent)]
    Sim(#[from] SimConfigError),
    /// The executor failed a step.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// Requests remain but nothing was scheduled for several steps.
    #[error("no progress: {0} requests unfinished and nothing schedulable")]
    Stalled(usize),
}

/// Steps a workload through a scheduler and the simulated executor, one step at a time
/// (the visualizer watches it between steps).
#[derive(Debug)]
pub struct WorkloadRunner {
    name: String,
    scheduler: Scheduler,
    executor: SimExecutor,
    pending: Releases,
    /// Per request id, whether it is a returning conversation's (`Workload::returning`).
    returning: Vec<bool>,
    eos_token_id: Option<TokenId>,
    clock_s: f64,
    latencies: Latencies,
    outputs: HashMap<RequestId, Vec<TokenId>>,
    counts: RunCounts,
    empty_steps: usize,
    /// Steps run whose outputs have not been taken, oldest first.
    in_flight: VecDeque<Submitted>,
    /// When the last step submitted started and ends, simulated seconds.
    last_step_s: (f64, f64),
    overlap: HostOverlap,
}

/// A step the simulated executor has run, waiting for its outputs to be taken.
#[derive(Debug)]
struct Submitted {
    scheduled: SchedulerOutput,
    output: ModelRunnerOutput,
    /// When it ends, simulated seconds.
    end_s: f64,
}

const MAX_EMPTY_STEPS: usize = 3;

impl WorkloadRunner {
    /// A runner for `workload`; request ids are the arrivals' indices.
    pub fn new(
        workload: &Workload,
        scheduler_config: SchedulerConfig,
        mut cache_config: CacheConfig,
        sim_config: SimConfig,
    ) -> Result<Self, WorkloadError> {
        if cache_config.kv_block_bytes == 0 {
            cache_config.kv_block_bytes = sim_config.cost.kv_bytes_per_token * cache_config.block_size as u64;
        }
        let pending = Releases::new(workload.numbered());
        Ok(Self {
            name: workload.name.clone(),
            executor: SimExecutor::new(sim_config)?.with_kv_block_bytes(cache_config.kv_block_bytes),
            scheduler: Scheduler::new(scheduler_config, cache_config)?,
            pending,
            returning: workload.returning(),
            eos_token_id: sim_config.eos_token_id,
            clock_s: 0.0,
            latencies: Latencies::default(),
            outputs: HashMap::new(),
            counts: RunCounts { num_requests: workload.arrivals.len(), ..RunCounts::default() },
            empty_steps: 0,
            in_flight: VecDeque::new(),
            last_step_s: (0.0, 0.0),
            overlap: HostOverlap::default(),
        })
    }

    /// The scheduler (for snapshots and events).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Simulated seconds so far.
    pub fn clock_seconds(&self) -> f64 {
        self.clock_s
    }

    /// Tokens generated per request so far.
    pub fn outputs(&self) -> &HashMap<RequestId, Vec<TokenId>> {
        &self.outputs
    }

    /// True when every request finished or was rejected.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && !self.scheduler.has_unfinished_requests()
    }

    /// Admits what has arrived and runs one step; returns false once everything is done.
    pub fn step(&mut self) -> Result<bool, WorkloadError> {
        if !self.scheduler.has_unfinished_requests()
            && let Some(next_s) = self.pending.next_due_s()
        {
            self.clock_s = self.clock_s.max(next_s);
        }
        self.admit_arrivals();
        if self.is_done() {
            return Ok(false);
        }
        if self.in_flight.is_empty() {
            self.submit()?;
        }
        if self.scheduler.async_scheduling() && self.scheduler.has_unfinished_requests() {
            self.submit()?;
        }
        let Some(Submitted { scheduled: scheduler_output, output, end_s }) = self.in_flight.pop_front()
        else {
            return Ok(!self.is_done());
        };
        let mut outputs = self.scheduler.update_from_output(&scheduler_output, &output);
        let failed = &output.failed_kv_transfers;
        outputs.extend(self.scheduler.handle_failed_transfers(&failed.stores, &failed.loads));
        if scheduler_output.is_empty() && scheduler_output.preempted_req_ids.is_empty() {
            self.empty_steps += 1;
            if self.empty_steps >= MAX_EMPTY_STEPS {
                return Err(WorkloadError::Stalled(
                    self.scheduler.num_running() + self.scheduler.num_waiting(),
                ));
            }
        } else {
            self.empty_steps = 0;
        }
        self.clock_s = self.clock_s.max(end_s);
        for output in outputs {
            let tokens = &output.new_token_ids;
            self.latencies.record(output.request_id, tokens.len(), self.clock_s);
            self.counts.output_tokens += tokens.len() as u64;
            self.outputs.entry(output.request_id).or_default().extend(tokens);
            if output.finish_reason.is_some() {
                self.latencies.finish(output.request_id);
                self.counts.num_finished += 1;
                self.pending.finished(output.request_id, self.clock_s);
            }
        }
        Ok(!self.is_done())
    }

    /// Schedules a step and runs it on the simulated executor, on the simulated clock: the
    /// host's time before it is exposed, unless a step in flight covers it.
    fn submit(&mut self) -> Result<(), WorkloadError> {
        let scheduled = self.scheduler.schedule();
        let output = self.executor.execute(&scheduled, &mut StepMasks::none())?;
        if let Some(timing) = self.executor.last_step_timing() {
            self.scheduler.observe_step_timing(&timing);
        }
        let host_s = if scheduled.is_empty() { 0.0 } else { self.executor.config().cost.host_step_s };
        let (previous_start_s, previous_end_s) = self.last_step_s;
        // Scheduled while the previous step ran, unless that step ended before the clock
        // (an idle gap jumped to the next arrival): then the host starts from the clock.
        let start_s = match self.in_flight.is_empty() || previous_end_s <= self.clock_s {
            true => self.clock_s.max(previous_end_s) + host_s,
            false => previous_end_s.max(previous_start_s + host_s),
        };
        let exposed_s = (start_s - previous_end_s.max(self.clock_s)).clamp(0.0, host_s);
        self.overlap.steps += 1;
        self.overlap.exposed_seconds += exposed_s;
        self.overlap.hidden_seconds += host_s - exposed_s;
        let end_s = start_s + self.executor.last_step_seconds();
        self.last_step_s = (start_s, end_s);
        self.in_flight.push_back(Submitted { scheduled, output, end_s });
        Ok(())
    }

    /// Runs to completion and reports.
    pub fn run(mut self) -> Result<WorkloadReport, WorkloadError> {
        while self.step()? {}
        Ok(self.report())
    }

    /// The figures so far.
    pub fn report(&self) -> WorkloadReport {
        let duration_s = self.latencies.first_arrival_s().map_or(0.0, |first| self.clock_s - first);
        let mut report = WorkloadReport::new(
            &self.name,
            &self.counts,
            duration_s,
            &self.latencies,
            &self.scheduler.stats(),
        );
        report.host_overlap = Some(HostOverlapReport::of(self.scheduler.async_scheduling(), &self.overlap));
        report
    }

    /// Adds every arrival whose time has come.
    fn admit_arrivals(&mut self) {
        while let Some((request_id, arrival)) = self.pending.pop_due(self.clock_s) {
            match self.scheduler.add_request(arrival.request(request_id, self.eos_token_id)) {
                Ok(()) => {
                    self.counts.prompt_tokens += arrival.prompt_token_ids.len() as u64;
                    self.latencies.arrive(request_id, arrival.time_s);
                    if self.returning.get(request_id as usize) == Some(&true) {
                        self.latencies.returning(request_id);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "workload request rejected");
                    self.counts.num_rejected += 1;
                    self.pending.finished(request_id, self.clock_s);
                }
            }
        }
    }
}

/// Runs `workload` to completion on the simulated executor.
pub fn run_workload(
    workload: &Workload,
    scheduler_config: SchedulerConfig,
    cache_config: CacheConfig,
    sim_config: SimConfig,
) -> Result<WorkloadReport, WorkloadError> {
    WorkloadRunner::new(workload, scheduler_config, cache_config, sim_config)?.run()
}
