//! What a context keeps across steps so that a steady-state step creates nothing: the
//! parameter ring, the upload buffer (each step's inputs), the bind-group cache and the pool
//! of staging and scratch buffers. Creating what is missing is the caller's (the context's),
//! through the closures each method takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::GpuError;
use super::bind_cache::{BindGroupCache, BindKey};
use super::pool::{BufferPool, size_class};
use super::resource::DeviceBuffer;

/// The context's long-lived step resources, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct Resident {
    ring: Option<DeviceBuffer>,
    uploads: Option<DeviceBuffer>,
    binds: BindGroupCache,
    pool: BufferPool,
    /// Set while a held step (encoded, its parameters and inputs written) waits for its submit.
    held: Arc<AtomicBool>,
}

impl Resident {
    /// The parameter ring, replaced by `create(size)` in the size class of `bytes` when
    /// smaller (the bind groups name it, so it grows apart from the uploads).
    pub(crate) fn params_ring(
        &mut self,
        bytes: u64,
        create: impl FnOnce(u64) -> Result<DeviceBuffer, GpuError>,
    ) -> Result<DeviceBuffer, GpuError> {
        grown(&mut self.ring, bytes, create)
    }

    /// The upload buffer, replaced by `create(size)` in the size class of `bytes` when smaller.
    pub(crate) fn uploads(
        &mut self,
        bytes: u64,
        create: impl FnOnce(u64) -> Result<DeviceBuffer, GpuError>,
    ) -> Result<DeviceBuffer, GpuError> {
        grown(&mut self.uploads, bytes, create)
    }

    /// The bind group for `key`, the `index`th dispatch of its step, from the cache or made by
    /// `create`.
    pub(crate) fn bind_group(
        &mut self,
        index: usize,
        key: BindKey,
        create: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        self.binds.get_or_create(index, key, create)
    }

    /// A pooled buffer of `usage` holding `bytes`, made by `create(size)` in its size class
    /// when none is free.
    pub(crate) fn take_or_create(
        &mut self,
        usage: wgpu::BufferUsages,
        bytes: u64,
        create: impl FnOnce(u64) -> Result<DeviceBuffer, GpuError>,
    ) -> Result<DeviceBuffer, GpuError> {
        match self.pool.take(usage, bytes) {
            Some(buffer) => Ok(buffer),
            None => create(size_class(bytes)),
        }
    }

    /// Returns a buffer from [`Self::take_or_create`] to the pool.
    pub(crate) fn give_back(&mut self, usage: wgpu::BufferUsages, buffer: DeviceBuffer) {
        self.pool.give_back(usage, buffer);
    }

    /// True while a held step waits for its submit: no other step may be encoded before it.
    pub(crate) fn holds_step(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Marks a step held until the flag returned is cleared (at its submit, or when it is dropped).
    pub(crate) fn hold_step(&self) -> Arc<AtomicBool> {
        self.held.store(true, Ordering::Release);
        self.held.clone()
    }

    /// Ends a step of `dispatches` dispatches (ages the bind-group cache).
    pub(crate) fn end_step(&mut self, dispatches: usize) {
        self.binds.end_step(dispatches);
    }
}

/// `slot`'s buffer, replaced by `create(size)` in the size class of `bytes` when missing or
/// smaller.
fn grown(
    slot: &mut Option<DeviceBuffer>,
    bytes: u64,
    create: impl FnOnce(u64) -> Result<DeviceBuffer, GpuError>,
) -> Result<DeviceBuffer, GpuError> {
    match slot {
        Some(buffer) if buffer.size() >= bytes => Ok(buffer.clone()),
        _ => {
            let buffer = create(size_class(bytes))?;
            *slot = Some(buffer.clone());
            Ok(buffer)
        }
    }
}
