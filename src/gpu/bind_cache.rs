//! Bind groups built once per (kernel, resources) and reused by every later step that binds
//! the same buffers and weight textures to the same kernel at the same parameter offset.
//!
//! A step binds whole buffers (a tensor's row view shares its buffer) and whole weight
//! textures, and the parameter ring gives the i-th dispatch of a step the same offset every
//! step, so steady-state steps find every bind group here. Entries no step used for
//! [`KEEP_STEPS`] steps are dropped, releasing what they hold.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::resource::{DeviceBuffer, ResourceId};
use super::shader::slots;

/// Steps an unused bind group is kept.
const KEEP_STEPS: u64 = 64;

/// What a binding slot holds: a whole buffer, or a weight texture's view.
#[derive(Debug, Clone)]
pub(crate) enum Bound {
    /// A whole storage or uniform buffer.
    Buffer(DeviceBuffer),
    /// A weight texture's view (rgba32uint, see `weights.rs`), with the id given when it was made.
    Texture(ResourceId, wgpu::TextureView),
}

impl Bound {
    /// The number that names it in bind-group keys.
    pub(crate) fn id(&self) -> ResourceId {
        match self {
            Self::Buffer(buffer) => buffer.id(),
            Self::Texture(id, _) => *id,
        }
    }
}

/// A resource bound to one binding slot of a kernel (one of the constants of
/// [`slots`](super::shader::slots)).
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) slot: u32,
    pub(crate) resource: Bound,
}

impl Binding {
    /// `resource` at `slot`.
    pub(crate) fn new(slot: u32, resource: &Bound) -> Self {
        Self { slot, resource: resource.clone() }
    }

    /// The whole of `buffer` at `slot`.
    pub(crate) fn buffer(slot: u32, buffer: &DeviceBuffer) -> Self {
        Self { slot, resource: Bound::Buffer(buffer.clone()) }
    }

    /// The bind group entry.
    pub(crate) fn entry(&self) -> wgpu::BindGroupEntry<'_> {
        let resource = match &self.resource {
            Bound::Buffer(buffer) => buffer.as_entire_binding(),
            Bound::Texture(_, view) => wgpu::BindingResource::TextureView(view),
        };
        wgpu::BindGroupEntry { binding: self.slot, resource }
    }
}

/// What makes two bind groups the same: the pipeline, the parameter block's offset in the
/// ring, and the resource at each slot (the ring at [`slots::PARAMS`]), all by number, in one
/// flat value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    kernel: ResourceId,
    params_offset: u64,
    resources: [Option<ResourceId>; slots::COUNT],
}

impl BindKey {
    /// The key of the pipeline named `kernel` with its parameters at `offset` of `ring` and
    /// `bindings`.
    pub(crate) fn new(kernel: ResourceId, ring: &DeviceBuffer, offset: u64, bindings: &[Binding]) -> Self {
        let mut resources = [None; slots::COUNT];
        resources[slots::PARAMS as usize] = Some(ring.id());
        for b in bindings {
            resources[b.slot as usize] = Some(b.resource.id());
        }
        Self { kernel, params_offset: offset, resources }
    }
}

/// The cache: each bind group with the step that last used it.
#[derive(Debug, Default)]
pub(crate) struct BindGroupCache {
    /// Hashed with FxHash: every dispatch of every step looks its key up, and the keys are
    /// our own (SipHash's flood resistance buys nothing here).
    groups: HashMap<BindKey, (wgpu::BindGroup, u64), FxBuildHasher>,
    step: u64,
}

impl BindGroupCache {
    /// The bind group for `key`, made by `create` when no step has built it yet.
    pub(crate) fn get_or_create(
        &mut self,
        key: BindKey,
        create: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        let step = self.step;
        let entry = self.groups.entry(key).or_insert_with(|| (create(), step));
        entry.1 = step;
        entry.0.clone()
    }

    /// Ends a step: every [`KEEP_STEPS`] steps, drops the groups unused for that long.
    pub(crate) fn end_step(&mut self) {
        self.step += 1;
        if self.step.is_multiple_of(KEEP_STEPS) {
            let oldest = self.step - KEEP_STEPS;
            self.groups.retain(|_, (_, used)| *used >= oldest);
        }
    }
}
