//! The per-step encoder: kernels record dispatches, and the step encodes them into command
//! buffers (the input copies first, then compute passes: one a command buffer, or with kernel
//! profiling one a dispatch; the readback copies last) and submits them: all at once in
//! `submit`, or in chunks as they are recorded (see [`SubmitStrategy`]).
//!
//! Nothing is created per step once the shapes have been seen: the kernels' parameter blocks
//! go into the context's persistent ring in one write a command buffer, the step's inputs
//! ([`Step::write_u32`]) into its upload buffer in one more (and are copied on from there),
//! bind groups come from its cache (whole buffers and weight textures are bound, so a tensor's
//! row views share one group), and readback staging and scratch tensors come from its pool by size class.

use std::num::NonZeroU64;
use std::ops::Range;
use std::time::Instant;

use super::GpuError;
use super::bind_cache::{BindKey, Binding, Slotted};
use super::context::{GpuContext, Kernel};
use super::error_scopes::ErrorScopes;
use super::kernel_timer::KernelTimer;
use super::options::SubmitStrategy;
use super::resident::Resident;
use super::resource::DeviceBuffer;
use super::shader::KernelVariant;
use super::shader::params::{KernelParams, PARAMS_BYTES};
use super::tensor::{Elem, Tensor};

mod held;
pub use held::HeldStep;

/// A buffer range copied back to the CPU after the step.
struct Readback {
    buffer: DeviceBuffer,
    size: u64,
}

/// Input bytes at `offset` of the step's uploads, copied to the start of `buffer`.
struct Upload {
    buffer: DeviceBuffer,
    offset: u64,
    size: u64,
}

/// A dispatch as encoded: its pipeline, bind group and workgroup counts.
type Encoded = (Kernel, wgpu::BindGroup, [u32; 3]);

struct Dispatch {
    kernel: Kernel,
    params_offset: u64,
    /// Its range of [`Step::bindings`].
    bindings: Range<usize>,
    groups: [u32; 3],
}

/// Usage of the parameter ring.
const PARAMS_RING: wgpu::BufferUsages = wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);
/// Usage of the upload buffer.
const UPLOADS: wgpu::BufferUsages = wgpu::BufferUsages::COPY_SRC.union(wgpu::BufferUsages::COPY_DST);
/// Usage of the pooled readback staging buffers.
const STAGING: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);
/// Usage of the pooled scratch tensors.
const SCRATCH: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// Identifies a readback recorded with [`Step::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadbackId(usize);

/// Dispatches in command buffer `index` (from 0) of a step submitted in chunks.
fn chunk_len(index: usize) -> usize {
    SubmitStrategy::FIRST_CHUNK.saturating_mul(1 << index.min(16)).min(SubmitStrategy::MAX_CHUNK)
}

/// One step's dispatches, recorded in order and submitted in one command buffer, or in chunks
/// as they are recorded (so the device runs the first layers while the host records the rest).
pub struct Step<'a> {
    pub(crate) ctx: &'a GpuContext,
    started: Instant,
    /// Submit in chunks as dispatches are recorded, instead of once in [`Step::submit`].
    chunked: bool,
    /// Command buffers submitted so far.
    command_buffers: usize,
    /// Dispatches in them.
    submitted: usize,
    /// Set once a command buffer of this step failed: the step's later calls fail too.
    failed: bool,
    /// Dispatches recorded since the last command buffer.
    pending: Vec<Dispatch>,
    /// Every dispatch's bindings at their slots, one after another (kept until the step is
    /// done, so dropping them is not host time before a submit).
    bindings: Vec<Slotted>,
    /// Every dispatch's parameter block, at its offset in the ring.
    params: Vec<u8>,
    /// Bytes of `params` already written to the ring.
    params_written: usize,
    uploads: Vec<u8>,
    copies: Vec<Upload>,
    readbacks: Vec<Readback>,
    scratch: Vec<DeviceBuffer>,
    /// The variant of each timed pass, in order.
    timed: Vec<KernelVariant>,
    /// The queue's index of the last command buffer submitted.
    submission: Option<wgpu::SubmissionIndex>,
}

/// The readbacks of a submitted step.
#[derive(Debug)]
pub struct StepOutput {
    data: Vec<Vec<u8>>,
}

impl StepOutput {
    /// The bytes of readback `id` (moves them out; a second take is empty).
    pub fn take(&mut self, id: ReadbackId) -> Vec<u8> {
        std::mem::take(&mut self.data[id.0])
    }

    /// Readback `id` as f32 values.
    pub fn f32s(&mut self, id: ReadbackId) -> Vec<f32> {
        self.take(id).chunks_exact(4).map(bytemuck::pod_read_unaligned).collect()
    }

    /// Readback `id` as u32 values.
    pub fn u32s(&mut self, id: ReadbackId) -> Vec<u32> {
        self.take(id).chunks_exact(4).map(bytemuck::pod_read_unaligned).collect()
    }
}

impl GpuContext {
    /// Starts recording a step (submitted in chunks where
    /// [`Capabilities::submit_strategy`](super::Capabilities::submit_strategy) says so).
    pub fn step(&self) -> Step<'_> {
        let step = self.whole_step();
        Step { chunked: self.capabilities().submit_strategy() == SubmitStrategy::Chunked, ..step }
    }

    /// Starts recording a step submitted whole, in one command buffer, whatever the device's
    /// submit strategy (a step to [`Step::hold`]).
    pub fn whole_step(&self) -> Step<'_> {
        Step {
            ctx: self,
            started: Instant::now(),
            chunked: false,
            command_buffers: 0,
            submitted: 0,
            failed: false,
            pending: Vec::new(),
            bindings: Vec::new(),
            params: Vec::new(),
            params_written: 0,
            uploads: Vec::new(),
            copies: Vec::new(),
            readbacks: Vec::new(),
            scratch: Vec::new(),
            timed: Vec::new(),
            submission: None,
        }
    }
}

impl<'c> Step<'c> {
    /// [`Self::submit`] in the middle of a step's work (a mixture of experts' read-back of its
    /// router's choices), returning a new step that goes on with it: this step's scratch
    /// tensors stay out of the pool until that one is submitted, so what the rest of the work
    /// reads from them (index lists written before this step's first dispatch) is kept.
    pub fn submit_and_continue(mut self) -> Result<(StepOutput, Step<'c>), GpuError> {
        let kept = std::mem::take(&mut self.scratch);
        let ctx = self.ctx;
        let out = self.submit()?;
        let mut next = ctx.step();
        next.scratch = kept;
        Ok((out, next))
    }
}

impl Step<'_> {
    /// Records one dispatch of `variant` with its parameter block `params` (the shader's `P`)
    /// and `bindings` at the slots of their names (a [`GpuError::Binding`] for a name the shader
    /// does not declare, and for one it declares that `bindings` lacks); in a chunked step,
    /// submits the dispatches recorded so far once they fill a chunk.
    pub(crate) fn dispatch<P: KernelParams>(
        &mut self,
        variant: KernelVariant,
        params: &P,
        bindings: impl IntoIterator<Item = Binding>,
        groups: [u32; 3],
    ) -> Result<(), GpuError> {
        debug_assert_eq!(variant.params(), P::LAYOUT, "{} takes other parameters", variant.label());
        self.check_live()?;
        let kernel = self.ctx.kernel(variant)?;
        let first = self.bindings.len();
        if let Err(e) = self.bind(&kernel, bindings) {
            self.bindings.truncate(first);
            return Err(e);
        }
        let bindings = first..self.bindings.len();
        let align = u64::from(self.ctx.capabilities().limits.min_uniform_buffer_offset_alignment).max(1);
        let params_offset = (self.params.len() as u64).next_multiple_of(align);
        self.params.resize(params_offset as usize, 0);
        self.params.extend_from_slice(bytemuck::bytes_of(params));
        self.params.resize((params_offset + PARAMS_BYTES) as usize, 0);
        self.pending.push(Dispatch { kernel, params_offset, bindings, groups });
        if self.chunked && self.pending.len() >= chunk_len(self.command_buffers) {
            self.submit_pending(false, None)?;
        }
        Ok(())
    }

    /// Puts `bindings` at the slots of their names in `kernel`'s shader after
    /// [`Self::bindings`]; an error (with some of them put there) unless they bind every
    /// resource the shader declares once.
    fn bind(&mut self, kernel: &Kernel, bindings: impl IntoIterator<Item = Binding>) -> Result<(), GpuError> {
        let first = self.bindings.len();
        let label = || kernel.variant.label();
        for b in bindings {
            let slot = kernel.reflection.slot_of(label, b.name)?;
            self.bindings.push(Slotted { slot, resource: b.resource });
        }
        kernel.reflection.check_bound(label, self.bindings[first..].iter().map(|b| b.slot))
    }

    /// Writes `data` to the start of `t` before this step's dispatches run, through the
    /// step's one upload (so each input costs no write of its own). Inputs are written before
    /// the step's first dispatch is recorded: later is a [`GpuError::Order`] error.
    pub fn write_u32(&mut self, t: &Tensor, data: &[u32]) -> Result<(), GpuError> {
        self.check_live()?;
        if !self.params.is_empty() {
            return Err(GpuError::Order("a step's inputs are written before its first dispatch".into()));
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        t.check_write(Elem::U32, bytes)?;
        if !bytes.is_empty() {
            let offset = self.uploads.len() as u64;
            self.uploads.extend_from_slice(bytes);
            self.copies.push(Upload { buffer: t.buffer.clone(), offset, size: bytes.len() as u64 });
        }
        Ok(())
    }

    /// A tensor for this step only, from the context's pool (its contents are whatever the
    /// last step left: write it before reading it). It goes back to the pool after `submit`.
    /// An error where its pooled buffer (a power of two) would exceed the binding limit.
    pub fn scratch(&mut self, elem: Elem, shape: &[usize]) -> Result<Tensor, GpuError> {
        let bytes = 4 * shape.iter().product::<usize>().max(1) as u64;
        let buffer = self.ctx.pooled_buffer("scratch", SCRATCH, bytes)?;
        self.scratch.push(buffer.clone());
        Ok(Tensor::from_buffer(buffer, shape, elem))
    }

    /// Workgroup counts covering `invocations` with the workgroup size `variant` is composed
    /// with (its `WG`), folded into y when x would exceed the per-dimension limit (kernels
    /// flatten with `wid.y * nwg.x + wid.x`).
    pub(crate) fn grid_1d(&self, variant: KernelVariant, invocations: usize) -> [u32; 3] {
        self.grid_groups(invocations.div_ceil(variant.workgroup_size() as usize))
    }

    /// Workgroup counts for `groups` workgroups, folded into y as `grid_1d` does.
    pub(crate) fn grid_groups(&self, groups: usize) -> [u32; 3] {
        let max = self.ctx.capabilities().limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let x = groups.clamp(1, max);
        [x as u32, groups.div_ceil(x).max(1) as u32, 1]
    }

    /// Copies `t` back to the CPU after this step's dispatches.
    pub fn read(&mut self, t: &Tensor) -> ReadbackId {
        self.read_buffer(&t.buffer, t.byte_len())
    }

    /// Copies the first `size` bytes of `buffer` back to the CPU after this step's dispatches.
    pub(crate) fn read_buffer(&mut self, buffer: &DeviceBuffer, size: u64) -> ReadbackId {
        self.readbacks.push(Readback { buffer: buffer.clone(), size });
        ReadbackId(self.readbacks.len() - 1)
    }

    /// Submits the dispatches not yet submitted, with the readback copies after them, and
    /// waits for the readbacks.
    pub fn submit(mut self) -> Result<StepOutput, GpuError> {
        let ctx = self.ctx;
        self.check_live()?;
        // Held until the timestamps are read, so another thread's step cannot take the queries.
        let mut timer = ctx.kernel_timer();
        let staging = self.submit_pending(true, timer.as_deref_mut())?;
        for buf in &staging {
            buf.slice(..).map_async(wgpu::MapMode::Read, |_| ());
        }
        if let Some(timer) = &mut timer {
            timer.map(self.timed.len());
        }
        ctx.wait_idle()?;
        ctx.count().device_drained();
        if let Some(timer) = &mut timer {
            timer.collect(&self.timed)?;
        }
        drop(timer);
        let sizes = self.readbacks.iter().map(|r| r.size).collect();
        StepInFlight { staging, sizes, scratch: std::mem::take(&mut self.scratch), submission: None }
            .read(ctx)
    }

    /// Submits the step as [`Self::submit`] does but returns at once: the device runs it while
    /// the host goes on (records the next step), and [`StepInFlight::wait`] reads it back. Not
    /// for a context that times kernels (their queries are read per step).
    pub fn submit_async(mut self) -> Result<StepInFlight, GpuError> {
        self.check_live()?;
        if self.ctx.kernel_times().is_some() {
            return Err(GpuError::Order(
                "a step whose kernels are timed is read back as it is submitted".into(),
            ));
        }
        let staging = self.submit_pending(true, None)?;
        for buf in &staging {
            buf.slice(..).map_async(wgpu::MapMode::Read, |_| ());
        }
        let sizes = self.readbacks.iter().map(|r| r.size).collect();
        let scratch = std::mem::take(&mut self.scratch);
        Ok(StepInFlight { staging, sizes, scratch, submission: self.submission.take() })
    }

    /// An error once a command buffer of this step has failed.
    fn check_live(&self) -> Result<(), GpuError> {
        match self.failed {
            true => Err(GpuError::Order("a command buffer of this step failed already".into())),
            false => Ok(()),
        }
    }

    /// Encodes the pending dispatches into one command buffer and submits it: after the step's
    /// input copies in its first command buffer, and in its `last`, before the readback copies,
    /// whose staging buffers it returns; each pass timed by `timer` when given. A failure marks
    /// the step failed.
    fn submit_pending(
        &mut self,
        last: bool,
        timer: Option<&mut KernelTimer>,
    ) -> Result<Vec<DeviceBuffer>, GpuError> {
        let submitted = self.encode_and_submit(last, timer);
        self.failed = submitted.is_err();
        submitted
    }

    /// [`Self::submit_pending`]'s work.
    fn encode_and_submit(
        &mut self,
        last: bool,
        timer: Option<&mut KernelTimer>,
    ) -> Result<Vec<DeviceBuffer>, GpuError> {
        let ctx = self.ctx;
        ctx.check_health()?;
        let scopes = ErrorScopes::push(&ctx.device);
        // Held until the submit: the ring's and the uploads' writes land before the next submit,
        // whichever thread makes it, so no other step may write them in between.
        let mut resident = ctx.resident();
        // The encoded dispatches (pipelines and bind groups) are dropped after the submit,
        // while the device runs.
        let (command_buffer, staging, _encoded) = self.encode(&mut resident, last, timer)?;
        if self.command_buffers == 0 {
            ctx.count().device_fed();
        }
        self.submission = Some(ctx.queue.submit([command_buffer]));
        drop(resident);
        self.command_buffers += 1;
        if last {
            ctx.count().step_submitted(self.submitted, self.command_buffers, self.started.elapsed());
        }
        if let Err(err) = scopes.pop("a step's command buffer", GpuError::Device) {
            ctx.check_health()?;
            return Err(err);
        }
        Ok(staging)
    }

    /// Encodes the pending dispatches into one command buffer: after the step's input copies
    /// in its first, before the readback copies in its `last` (their staging buffers
    /// returned); with what the dispatches hold, to keep until the submit. An error while a
    /// held step waits for its submit ([`Step::hold`]): its parameters and inputs are written
    /// where this step's would go.
    fn encode(
        &mut self,
        resident: &mut Resident,
        last: bool,
        timer: Option<&mut KernelTimer>,
    ) -> Result<(wgpu::CommandBuffer, Vec<DeviceBuffer>, Vec<Encoded>), GpuError> {
        let ctx = self.ctx;
        if resident.holds_step() {
            return Err(GpuError::Order(
                "a held step is not submitted yet: no step is encoded before it".into(),
            ));
        }
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") });
        if ctx.take_invalid_submit() {
            let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
            let buffer = ctx.create_buffer("invalid copy", 4, usage)?;
            encoder.copy_buffer_to_buffer(&buffer, 0, &buffer, 0, Some(4));
        }
        if self.command_buffers == 0 {
            self.encode_uploads(&mut encoder, resident)?;
        }
        let encoded = self.encode_dispatches(&mut encoder, resident, timer)?;
        let staging = match last {
            true => self.encode_readbacks(&mut encoder, resident)?,
            false => Vec::new(),
        };
        Ok((encoder.finish(), staging, encoded))
    }

    /// Copies the step's uploads, written to the pooled upload buffer, to their tensors (the
    /// first command buffer of a step).
    fn encode_uploads(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        resident: &mut Resident,
    ) -> Result<(), GpuError> {
        if self.copies.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx;
        let uploads = resident
            .uploads(self.uploads.len() as u64, |size| ctx.create_buffer("uploads", size, UPLOADS))?;
        ctx.queue.write_buffer(&uploads, 0, &self.uploads);
        for c in &self.copies {
            encoder.copy_buffer_to_buffer(&uploads, c.offset, &c.buffer, 0, Some(c.size));
        }
        Ok(())
    }

    /// Writes the pending dispatches' parameters to the ring, finds or makes their bind groups
    /// and records them (timed with `timer`); returns what they hold, to keep until the submit.
    fn encode_dispatches(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        resident: &mut Resident,
        mut timer: Option<&mut KernelTimer>,
    ) -> Result<Vec<Encoded>, GpuError> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let ctx = self.ctx;
        let ring = resident.params_ring(self.params.len() as u64, |size| {
            ctx.create_buffer("params ring", size, PARAMS_RING)
        })?;
        ctx.queue.write_buffer(&ring, self.params_written as u64, &self.params[self.params_written..]);
        self.params_written = self.params.len();
        let first = self.submitted;
        let encoded: Vec<_> = self
            .pending
            .drain(..)
            .enumerate()
            .map(|(i, d)| {
                let bindings = &self.bindings[d.bindings];
                let key =
                    BindKey::new(d.kernel.id, d.kernel.reflection.params, &ring, d.params_offset, bindings);
                let group = resident.bind_group(first + i, key, || {
                    ctx.create_bind_group(&d.kernel, &ring, d.params_offset, bindings)
                });
                (d.kernel, group, d.groups)
            })
            .collect();
        self.submitted += encoded.len();
        if let Some(timer) = timer.as_deref_mut() {
            timer.reserve(&ctx.device, encoded.len(), |label, size, usage| {
                ctx.create_buffer(label, size, usage)
            })?;
            self.timed = encoded.iter().map(|(kernel, ..)| kernel.variant).collect();
        }
        encode_passes(encoder, &encoded, timer.as_deref());
        Ok(encoded)
    }

    /// Copies the step's readbacks into pooled staging buffers (the last command buffer of a
    /// step) and ends the step for the bind-group cache.
    fn encode_readbacks(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        resident: &mut Resident,
    ) -> Result<Vec<DeviceBuffer>, GpuError> {
        let ctx = self.ctx;
        let mut staging = Vec::with_capacity(self.readbacks.len());
        for r in &self.readbacks {
            let buf = resident.take_or_create(STAGING, r.size.max(4), |size| {
                ctx.create_buffer("readback", size, STAGING)
            })?;
            if r.size > 0 {
                encoder.copy_buffer_to_buffer(&r.buffer, 0, &buf, 0, Some(r.size));
            }
            staging.push(buf);
        }
        resident.end_step(self.submitted);
        Ok(staging)
    }
}

/// A step submitted with [`Step::submit_async`] and not read back yet: its staging buffers
/// (mapped once the device is done) and scratch tensors, held until then.
#[derive(Debug)]
pub struct StepInFlight {
    staging: Vec<DeviceBuffer>,
    sizes: Vec<u64>,
    scratch: Vec<DeviceBuffer>,
    submission: Option<wgpu::SubmissionIndex>,
}

impl StepInFlight {
    /// Waits for this step (not for steps submitted after it) and reads it back.
    pub fn wait(self, ctx: &GpuContext) -> Result<StepOutput, GpuError> {
        let poll = wgpu::PollType::Wait { submission_index: self.submission.clone(), timeout: None };
        let polled = ctx.device.poll(poll);
        ctx.check_health()?;
        polled.map_err(|e| GpuError::Device(e.to_string()))?;
        ctx.count().step_done();
        self.read(ctx)
    }

    /// The mapped readbacks' bytes; the staging and scratch buffers go back to the pool.
    fn read(mut self, ctx: &GpuContext) -> Result<StepOutput, GpuError> {
        let mut data = Vec::with_capacity(self.staging.len());
        for (buf, &size) in self.staging.iter().zip(&self.sizes) {
            let view = buf
                .slice(..)
                .get_mapped_range()
                .map_err(|e| ctx.check_health().err().unwrap_or_else(|| GpuError::Device(e.to_string())))?;
            data.push(view[..size as usize].to_vec());
            drop(view);
            buf.unmap();
        }
        let mut resident = ctx.resident();
        // Given back in reverse, so the next step takes the same buffer for the same request.
        for buf in self.staging.drain(..).rev() {
            resident.give_back(STAGING, buf);
        }
        for buf in self.scratch.drain(..).rev() {
            resident.give_back(SCRATCH, buf);
        }
        Ok(StepOutput { data })
    }
}

/// Records `encoded` into one compute pass, or with `timer` each dispatch into a pass of its
/// own that writes its beginning and end timestamps.
fn encode_passes(encoder: &mut wgpu::CommandEncoder, encoded: &[Encoded], timer: Option<&KernelTimer>) {
    let mut record = |dispatches: &[Encoded], timestamp_writes| {
        let mut pass = encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes });
        for (kernel, group, groups) in dispatches {
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        }
    };
    match timer {
        None => record(encoded, None),
        Some(timer) => {
            for (i, dispatch) in encoded.iter().enumerate() {
                record(std::slice::from_ref(dispatch), Some(timer.writes(i)));
            }
            timer.resolve(encoder, encoded.len());
        }
    }
}

impl GpuContext {
    /// A new bind group of `kernel`, counted: its parameter block at `offset` of `ring`, then
    /// each of `bindings`.
    fn create_bind_group(
        &self,
        kernel: &Kernel,
        ring: &DeviceBuffer,
        offset: u64,
        bindings: &[Slotted],
    ) -> wgpu::BindGroup {
        self.count().bind_group_created();
        let params = wgpu::BindGroupEntry {
            binding: kernel.reflection.params,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: ring,
                offset,
                size: NonZeroU64::new(PARAMS_BYTES),
            }),
        };
        let entries: Vec<_> = std::iter::once(params).chain(bindings.iter().map(Slotted::entry)).collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &kernel.layout,
            entries: &entries,
        })
    }
}
