//! Bind groups built once per (kernel, resources) and reused by every later step that binds
//! the same buffers and weight textures to the same kernel at the same parameter offset.
//!
//! A step binds whole buffers (a tensor's row view shares its buffer) and whole weight
//! textures, and the parameter ring gives the i-th dispatch of a step the same offset every
//! step, so steady-state steps find every bind group here: first by the dispatch's index
//! among the last step's, with one key comparison, else by hashing its key. Entries no step
//! used for [`KEEP_STEPS`] steps are dropped, releasing what they hold.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::resource::{DeviceBuffer, ResourceId};
use super::shader::reflect::MAX_BINDINGS;

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

/// A resource bound to a kernel's variable of that name (found in the shader's reflection,
/// [`Reflection::resolve`](super::shader::reflect::Reflection::resolve)).
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) name: &'static str,
    pub(crate) resource: Bound,
}

impl Binding {
    /// `resource` bound to `name`.
    pub(crate) fn new(name: &'static str, resource: &Bound) -> Self {
        Self { name, resource: resource.clone() }
    }

    /// The whole of `buffer` bound to `name`.
    pub(crate) fn buffer(name: &'static str, buffer: &DeviceBuffer) -> Self {
        Self { name, resource: Bound::Buffer(buffer.clone()) }
    }
}

/// A resource at the binding slot its name has in the kernel's shader.
#[derive(Debug, Clone)]
pub(crate) struct Slotted {
    pub(crate) slot: u32,
    pub(crate) resource: Bound,
}

impl Slotted {
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
/// ring, and the resource at each slot (the ring at the parameter block's), all by number, in
/// one flat value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    kernel: ResourceId,
    params_offset: u64,
    resources: [Option<ResourceId>; MAX_BINDINGS],
}

impl BindKey {
    /// The key of the pipeline named `kernel` with its parameters (bound at `params`) at
    /// `offset` of `ring` and `bindings` (every slot under [`MAX_BINDINGS`]: the reflection
    /// refuses larger ones).
    pub(crate) fn new(
        kernel: ResourceId,
        params: u32,
        ring: &DeviceBuffer,
        offset: u64,
        bindings: &[Slotted],
    ) -> Self {
        let mut resources = [None; MAX_BINDINGS];
        resources[params as usize] = Some(ring.id());
        for b in bindings {
            resources[b.slot as usize] = Some(b.resource.id());
        }
        Self { kernel, params_offset: offset, resources }
    }
}

/// The cache: each bind group with the step that last used it.
#[derive(Debug, Default)]
pub(crate) struct BindGroupCache {
    /// Hashed with FxHash: the keys are our own (SipHash's flood resistance buys nothing here).
    groups: HashMap<BindKey, (wgpu::BindGroup, u64), FxBuildHasher>,
    /// The last step's dispatches' keys and groups, by index in the step (a running step
    /// replaces them as it goes): a step that repeats the last one's dispatches (every
    /// steady-state decode) finds each group with one comparison, without hashing.
    by_index: Vec<(BindKey, wgpu::BindGroup)>,
    step: u64,
}

impl BindGroupCache {
    /// The bind group for `key`, the `index`th dispatch of its step, made by `create` when no
    /// step has built it yet.
    pub(crate) fn get_or_create(
        &mut self,
        index: usize,
        key: BindKey,
        create: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        if let Some((last, group)) = self.by_index.get(index)
            && *last == key
        {
            return group.clone();
        }
        let step = self.step;
        let entry = self.groups.entry(key).or_insert_with(|| (create(), step));
        entry.1 = step;
        let group = entry.0.clone();
        if index < self.by_index.len() {
            self.by_index[index] = (key, group.clone());
        } else if index == self.by_index.len() {
            self.by_index.push((key, group.clone()));
        }
        group
    }

    /// Ends a step of `dispatches` dispatches: forgets the index of any later ones, and every
    /// [`KEEP_STEPS`] steps drops the groups unused for that long (the ones this step found by
    /// index count as used now).
    pub(crate) fn end_step(&mut self, dispatches: usize) {
        self.by_index.truncate(dispatches);
        self.step += 1;
        if self.step.is_multiple_of(KEEP_STEPS) {
            for (key, _) in &self.by_index {
                if let Some(entry) = self.groups.get_mut(key) {
                    entry.1 = self.step;
                }
            }
            let oldest = self.step - KEEP_STEPS;
            self.groups.retain(|_, (_, used)| *used >= oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::gpu::{GpuContext, GpuOptions};

    /// A key of its own (no pipeline or buffer behind it: the cache only compares keys).
    fn key() -> BindKey {
        BindKey { kernel: ResourceId::fresh(), params_offset: 0, resources: [None; MAX_BINDINGS] }
    }

    /// A group found by its dispatch's index every step is not dropped as unused: once another
    /// key took its index, the map still has it. A group no step used for [`KEEP_STEPS`] steps
    /// is dropped (by the cache's next sweep: within twice as many).
    #[test]
    fn groups_found_by_index_outlive_the_age_limit_and_unused_ones_do_not() {
        let ctx = GpuContext::new(&GpuOptions::default()).expect("a wgpu adapter (lavapipe in CI)");
        let layout = ctx
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: None, entries: &[] });
        let made = Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &[],
            })
        };
        let (a, b) = (key(), key());
        let mut cache = BindGroupCache::default();
        for _ in 0..2 * KEEP_STEPS {
            cache.get_or_create(0, a, make);
            cache.end_step(1);
        }
        assert_eq!(made.get(), 1, "a, then found by index");
        cache.get_or_create(0, b, make);
        cache.end_step(1);
        cache.get_or_create(0, a, make);
        cache.end_step(1);
        assert_eq!(made.get(), 2, "b new; a from the map after 2 KEEP_STEPS steps found by index");
        for _ in 0..2 * KEEP_STEPS {
            cache.get_or_create(0, a, make);
            cache.end_step(1);
        }
        cache.get_or_create(0, b, make);
        assert_eq!(made.get(), 3, "b, unused for 2 KEEP_STEPS steps, was dropped");
    }
}
