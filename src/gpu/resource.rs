//! Numbers that name pipelines, buffers and textures for the bind-group cache, and the
//! buffer type that carries its number.

use std::num::NonZeroU64;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

/// The number that names a pipeline or a bindable resource in bind-group keys: given once,
/// when it is made, and never again, so a key hashes and compares integers instead of
/// reaching into wgpu's handles (every dispatch of every step looks its key up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ResourceId(NonZeroU64);

impl ResourceId {
    /// A number nothing had before.
    pub(crate) fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self(NonZeroU64::MIN.saturating_add(NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

/// A wgpu buffer with its [`ResourceId`]; it derefs to the buffer.
#[derive(Debug, Clone)]
pub(crate) struct DeviceBuffer {
    id: ResourceId,
    buffer: wgpu::Buffer,
}

impl DeviceBuffer {
    /// `buffer`, named by a fresh id.
    pub(crate) fn new(buffer: wgpu::Buffer) -> Self {
        Self { id: ResourceId::fresh(), buffer }
    }

    /// The number that names it in bind-group keys.
    pub(crate) fn id(&self) -> ResourceId {
        self.id
    }
}

impl Deref for DeviceBuffer {
    type Target = wgpu::Buffer;

    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}
