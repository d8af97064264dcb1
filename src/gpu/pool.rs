//! Buffers that live across steps, reused by size class: the readback staging buffers and a
//! step's scratch tensors. A request takes a free buffer of its usage and size class (the
//! next power of two, at least [`MIN_CLASS`] bytes), and the step gives it back when its
//! results are read, so a steady-state step creates no buffer.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::resource::DeviceBuffer;

/// The smallest size class, in bytes.
const MIN_CLASS: u64 = 256;

/// The size class holding `bytes`.
pub(crate) fn size_class(bytes: u64) -> u64 {
    bytes.max(MIN_CLASS).next_power_of_two()
}

/// Free buffers by (usage, size class), last returned first.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    free: HashMap<(wgpu::BufferUsages, u64), Vec<DeviceBuffer>, FxBuildHasher>,
}

impl BufferPool {
    /// A free buffer of `usage` in `bytes`' size class, if one was given back.
    pub(crate) fn take(&mut self, usage: wgpu::BufferUsages, bytes: u64) -> Option<DeviceBuffer> {
        self.free.get_mut(&(usage, size_class(bytes)))?.pop()
    }

    /// Gives `buffer` (created with `usage` and a size class as its size) back.
    pub(crate) fn give_back(&mut self, usage: wgpu::BufferUsages, buffer: DeviceBuffer) {
        self.free.entry((usage, buffer.size())).or_default().push(buffer);
    }
}
