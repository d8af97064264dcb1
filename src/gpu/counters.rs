//! What the device layer has created and run, counted as it happens: pipelines, buffers, bind
//! groups, steps, command buffers, dispatches and the host time spent recording and
//! submitting them. The counts make "a steady-state step creates nothing" and "the warm-up
//! builds every pipeline" tests; the host time is for benchmarks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Running totals since the context was opened (see [`GpuContext::counters`](super::GpuContext::counters)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// Compute pipelines built (one per kernel variant, the first time a step uses it).
    pub pipelines_created: u64,
    /// Device buffers created (weights, caches, workspaces, pools, parameter rings), weight
    /// textures included.
    pub buffers_created: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
    /// Steps submitted.
    pub steps: u64,
    /// Command buffers submitted (one a step, or more where steps are submitted in chunks).
    pub command_buffers: u64,
    /// Compute dispatches submitted.
    pub dispatches: u64,
    /// Host time from the start of each step's recording to its last submit returning (not
    /// the wait for the device), summed. A step submitted in chunks counts the time a driver
    /// blocks in a submit too (lavapipe waits there for the chunk before).
    pub host_time: Duration,
    /// Steps whose first command buffer was submitted to a device with no step left to run
    /// (the host had read every earlier step back): each starts after an idle gap.
    pub idle_gaps: u64,
    /// Those gaps, summed: from the host seeing the last step done to the next step's first
    /// submit (with async scheduling on a pipelining executor, steps are submitted before the
    /// one ahead is done, and no gap opens).
    pub idle_time: Duration,
    /// Steps recorded while the step before them ran and held for their submit until the
    /// host had sampled the tokens they read (async scheduling with host sampling).
    pub held_steps: u64,
}

impl GpuCounters {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &GpuCounters) -> GpuCounters {
        GpuCounters {
            pipelines_created: self.pipelines_created - earlier.pipelines_created,
            buffers_created: self.buffers_created - earlier.buffers_created,
            bind_groups_created: self.bind_groups_created - earlier.bind_groups_created,
            steps: self.steps - earlier.steps,
            command_buffers: self.command_buffers - earlier.command_buffers,
            dispatches: self.dispatches - earlier.dispatches,
            host_time: self.host_time.saturating_sub(earlier.host_time),
            idle_gaps: self.idle_gaps - earlier.idle_gaps,
            idle_time: self.idle_time.saturating_sub(earlier.idle_time),
            held_steps: self.held_steps - earlier.held_steps,
        }
    }

    /// Mean host time per step, in microseconds (0 without steps).
    pub fn host_us_per_step(&self) -> f64 {
        if self.steps == 0 { 0.0 } else { self.host_time.as_secs_f64() * 1e6 / self.steps as f64 }
    }
}

/// The live counters a context updates.
#[derive(Debug, Default)]
pub(crate) struct CounterCells {
    pipelines_created: AtomicU64,
    buffers_created: AtomicU64,
    bind_groups_created: AtomicU64,
    steps: AtomicU64,
    command_buffers: AtomicU64,
    dispatches: AtomicU64,
    host_nanos: AtomicU64,
    held_steps: AtomicU64,
    idle: Mutex<IdleClock>,
}

/// What the device has to run, as the host sees it.
#[derive(Debug, Default)]
struct IdleClock {
    /// Steps submitted and not yet seen done.
    outstanding: u64,
    /// When the host saw the device run out of steps.
    idle_since: Option<Instant>,
    gaps: u64,
    idle: Duration,
}

impl CounterCells {
    pub(crate) fn pipeline_created(&self) {
        self.pipelines_created.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn buffer_created(&self) {
        self.buffers_created.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bind_group_created(&self) {
        self.bind_groups_created.fetch_add(1, Ordering::Relaxed);
    }

    /// One submitted step of `dispatches` dispatches in `command_buffers` command buffers that
    /// took `host` to record and submit.
    pub(crate) fn step_submitted(&self, dispatches: usize, command_buffers: usize, host: Duration) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.command_buffers.fetch_add(command_buffers as u64, Ordering::Relaxed);
        self.dispatches.fetch_add(dispatches as u64, Ordering::Relaxed);
        self.host_nanos.fetch_add(host.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A step was held for its submit.
    pub(crate) fn step_held(&self) {
        self.held_steps.fetch_add(1, Ordering::Relaxed);
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, IdleClock> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A step's first command buffer is about to be submitted: a gap ends if the device was idle.
    pub(crate) fn device_fed(&self) {
        let mut clock = self.idle();
        if clock.outstanding == 0
            && let Some(since) = clock.idle_since.take()
        {
            clock.gaps += 1;
            clock.idle += since.elapsed();
        }
        clock.outstanding += 1;
    }

    /// The host saw one submitted step done.
    pub(crate) fn step_done(&self) {
        let mut clock = self.idle();
        clock.outstanding = clock.outstanding.saturating_sub(1);
        if clock.outstanding == 0 {
            clock.idle_since = Some(Instant::now());
        }
    }

    /// The host saw every submitted step done (it waited for the whole queue).
    pub(crate) fn device_drained(&self) {
        let mut clock = self.idle();
        clock.outstanding = 0;
        clock.idle_since = Some(Instant::now());
    }

    pub(crate) fn snapshot(&self) -> GpuCounters {
        let (idle_gaps, idle_time) = {
            let clock = self.idle();
            (clock.gaps, clock.idle)
        };
        GpuCounters {
            pipelines_created: self.pipelines_created.load(Ordering::Relaxed),
            buffers_created: self.buffers_created.load(Ordering::Relaxed),
            bind_groups_created: self.bind_groups_created.load(Ordering::Relaxed),
            steps: self.steps.load(Ordering::Relaxed),
            command_buffers: self.command_buffers.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
            host_time: Duration::from_nanos(self.host_nanos.load(Ordering::Relaxed)),
            idle_gaps,
            idle_time,
            held_steps: self.held_steps.load(Ordering::Relaxed),
        }
    }
}
