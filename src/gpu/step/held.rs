//! A step encoded now and submitted later (async scheduling with host sampling): it is
//! recorded while the step before it runs, and submitted once the host has written the inputs
//! it reads from device buffers (the tokens the step before it sampled on the host), so only
//! those writes and the submit stand between the two steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Encoded, Step, StepInFlight};
use crate::gpu::bind_cache::Slotted;
use crate::gpu::error_scopes::ErrorScopes;
use crate::gpu::resource::DeviceBuffer;
use crate::gpu::{GpuContext, GpuError};

/// A step encoded whole into one command buffer and not submitted yet: its parameters and
/// inputs are written (they land with the next submit), its staging and scratch buffers taken.
/// No other step may be encoded until it is submitted or dropped.
pub struct HeldStep {
    command_buffer: Option<wgpu::CommandBuffer>,
    staging: Vec<DeviceBuffer>,
    sizes: Vec<u64>,
    scratch: Vec<DeviceBuffer>,
    /// What its dispatches hold (pipelines, bind groups, bindings), kept until the submit.
    encoded: Vec<Encoded>,
    bindings: Vec<Slotted>,
    dispatches: usize,
    /// Host time it took to record and encode.
    host: Duration,
    /// The context's held-step flag, cleared at the submit or the drop.
    held: Arc<AtomicBool>,
}

impl std::fmt::Debug for HeldStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldStep").field("dispatches", &self.dispatches).finish_non_exhaustive()
    }
}

impl Step<'_> {
    /// Encodes the step whole without submitting it; [`HeldStep::submit`] submits it later,
    /// after the host writes the last inputs it reads from device buffers
    /// ([`GpuContext::write_u32`]). Until then no other step can be encoded (a
    /// [`GpuError::Order`] error: its parameters and inputs are written where theirs would go).
    /// Not for a step submitted in part (use [`GpuContext::whole_step`] on a device that
    /// submits in chunks) nor on a context that times kernels.
    pub fn hold(mut self) -> Result<HeldStep, GpuError> {
        self.check_live()?;
        let ctx = self.ctx;
        if ctx.kernel_times().is_some() {
            return Err(GpuError::Order(
                "a step whose kernels are timed is read back as it is submitted".into(),
            ));
        }
        if self.command_buffers > 0 {
            return Err(GpuError::Order("a step submitted in part cannot be held".into()));
        }
        ctx.check_health()?;
        let scopes = ErrorScopes::push(&ctx.device);
        let mut resident = ctx.resident();
        let (command_buffer, staging, encoded) = self.encode(&mut resident, true, None)?;
        let held = resident.hold_step();
        drop(resident);
        ctx.count().step_held();
        let step = HeldStep {
            command_buffer: Some(command_buffer),
            staging,
            sizes: self.readbacks.iter().map(|r| r.size).collect(),
            scratch: std::mem::take(&mut self.scratch),
            encoded,
            bindings: std::mem::take(&mut self.bindings),
            dispatches: self.submitted,
            host: self.started.elapsed(),
            held,
        };
        if let Err(err) = scopes.pop("a held step's command buffer", GpuError::Device) {
            ctx.check_health()?;
            return Err(err);
        }
        Ok(step)
    }
}

impl HeldStep {
    /// Submits the step (after every write made since it was held) and returns at once, as
    /// [`Step::submit_async`] does.
    pub fn submit(mut self, ctx: &GpuContext) -> Result<StepInFlight, GpuError> {
        ctx.check_health()?;
        let command_buffer = self
            .command_buffer
            .take()
            .ok_or_else(|| GpuError::Order("a held step is submitted once".into()))?;
        let scopes = ErrorScopes::push(&ctx.device);
        ctx.count().device_fed();
        let submission = ctx.queue.submit([command_buffer]);
        self.held.store(false, Ordering::Release);
        ctx.count().step_submitted(self.dispatches, 1, self.host);
        for buf in &self.staging {
            buf.slice(..).map_async(wgpu::MapMode::Read, |_| ());
        }
        let in_flight = StepInFlight {
            staging: std::mem::take(&mut self.staging),
            sizes: std::mem::take(&mut self.sizes),
            scratch: std::mem::take(&mut self.scratch),
            submission: Some(submission),
        };
        // Dropped while the device runs.
        drop((std::mem::take(&mut self.encoded), std::mem::take(&mut self.bindings)));
        if let Err(err) = scopes.pop("a held step's command buffer", GpuError::Device) {
            ctx.check_health()?;
            return Err(err);
        }
        Ok(in_flight)
    }
}

impl Drop for HeldStep {
    fn drop(&mut self) {
        self.held.store(false, Ordering::Release);
    }
}
