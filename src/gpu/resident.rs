//! What a context keeps across steps so that a steady-state step creates nothing: the
//! parameter ring, the bind-group cache and the pool of staging and scratch buffers.

use std::sync::MutexGuard;

use super::GpuError;
use super::bind_cache::{BindGroupCache, BindKey};
use super::context::{GpuContext, Kernel};
use super::pool::{BufferPool, size_class};
use super::step::bind_entries;

/// Usage of the parameter ring.
const RING: wgpu::BufferUsages = wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);

/// The context's long-lived step resources, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct Resident {
    ring: Option<wgpu::Buffer>,
    binds: BindGroupCache,
    pool: BufferPool,
}

impl Resident {
    /// The parameter ring, grown to the size class of `bytes` when smaller.
    pub(crate) fn params_ring(&mut self, ctx: &GpuContext, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
        match &self.ring {
            Some(ring) if ring.size() >= bytes => Ok(ring.clone()),
            _ => {
                let ring = ctx.create_buffer("params ring", size_class(bytes), RING)?;
                self.ring = Some(ring.clone());
                Ok(ring)
            }
        }
    }

    /// The bind group of `kernel` for `key`, from the cache or created.
    pub(crate) fn bind_group(&mut self, ctx: &GpuContext, key: BindKey, kernel: &Kernel) -> wgpu::BindGroup {
        self.binds.get_or_create(key, |key| {
            ctx.count().bind_group_created();
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &kernel.layout,
                entries: &bind_entries(key),
            })
        })
    }

    /// A pooled buffer of `usage` holding `bytes`, created in its size class when none is free.
    pub(crate) fn take_or_create(
        &mut self,
        ctx: &GpuContext,
        label: &str,
        usage: wgpu::BufferUsages,
        bytes: u64,
    ) -> Result<wgpu::Buffer, GpuError> {
        match self.pool.take(usage, bytes) {
            Some(buffer) => Ok(buffer),
            None => ctx.create_buffer(label, size_class(bytes), usage),
        }
    }

    /// Returns a buffer from [`Self::take_or_create`] to the pool.
    pub(crate) fn give_back(&mut self, usage: wgpu::BufferUsages, buffer: wgpu::Buffer) {
        self.pool.give_back(usage, buffer);
    }

    /// Ends a step (ages the bind-group cache).
    pub(crate) fn end_step(&mut self) {
        self.binds.end_step();
    }
}

impl GpuContext {
    /// The long-lived step resources, locked.
    pub(crate) fn resident(&self) -> MutexGuard<'_, Resident> {
        self.resident.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A pooled buffer of `usage` holding `bytes` (see [`Resident::take_or_create`]).
    pub(crate) fn pooled_buffer(
        &self,
        label: &str,
        usage: wgpu::BufferUsages,
        bytes: u64,
    ) -> Result<wgpu::Buffer, GpuError> {
        self.resident().take_or_create(self, label, usage, bytes)
    }
}
