//! Device time per kernel variant, from timestamp queries (what llama.cpp's Vulkan perf logger
//! prints). With [`GpuOptions::profile_kernels`](super::GpuOptions::profile_kernels) each
//! dispatch of a step runs in a compute pass of its own whose beginning and end write a
//! timestamp; the step resolves them into a buffer, reads it back with its other readbacks and
//! adds each pass's time to its kernel variant's total. Passes cost the host a little more to
//! record, so host time per step is not comparable with profiling off; the device times are the
//! kernels' own.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rustc_hash::FxBuildHasher;

use super::GpuError;
use super::resource::DeviceBuffer;
use super::shader::KernelVariant;

/// Timestamps one query set holds: a beginning and an end for each of half as many passes.
const QUERIES_PER_SET: u32 = wgpu::QUERY_SET_MAX_QUERIES;
/// Bytes of one resolved timestamp.
const TIMESTAMP_BYTES: u64 = 8;
/// Bytes one query set resolves to.
const SET_BYTES: u64 = QUERIES_PER_SET as u64 * TIMESTAMP_BYTES;
/// Usage of the buffer the query sets resolve into.
const RESOLVE: wgpu::BufferUsages = wgpu::BufferUsages::QUERY_RESOLVE.union(wgpu::BufferUsages::COPY_SRC);
/// Usage of the buffer the resolved timestamps are read from.
const READBACK: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// Bytes of the timestamps of `passes` passes.
fn timestamp_bytes(passes: usize) -> u64 {
    2 * passes as u64 * TIMESTAMP_BYTES
}

/// One kernel variant's dispatches and their summed device time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelTime {
    /// Dispatches timed.
    pub dispatches: u64,
    /// Device time from each dispatch's pass beginning to its end, summed.
    pub device_time: Duration,
}

/// Device time per kernel variant, by the variant's label (`linear/q4_1@texture/seq-sg8-sgtree8/...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelTimes(BTreeMap<String, KernelTime>);

impl KernelTimes {
    /// What was timed between `earlier` and `self` (variants that ran no dispatch left out).
    pub fn since(&self, earlier: &KernelTimes) -> KernelTimes {
        let entries = self.0.iter().filter_map(|(label, now)| {
            let before = earlier.0.get(label).copied().unwrap_or_default();
            let dispatches = now.dispatches.saturating_sub(before.dispatches);
            let device_time = now.device_time.saturating_sub(before.device_time);
            (dispatches > 0).then(|| (label.clone(), KernelTime { dispatches, device_time }))
        });
        KernelTimes(entries.collect())
    }

    /// Each variant's label and time, the longest total first (ties by label).
    pub fn by_time(&self) -> Vec<(&str, KernelTime)> {
        let mut rows: Vec<_> = self.0.iter().map(|(label, time)| (label.as_str(), *time)).collect();
        rows.sort_by(|a, b| b.1.device_time.cmp(&a.1.device_time).then_with(|| a.0.cmp(b.0)));
        rows
    }

    /// Every variant's time, summed.
    pub fn total(&self) -> KernelTime {
        self.0.values().fold(KernelTime::default(), |sum, t| KernelTime {
            dispatches: sum.dispatches + t.dispatches,
            device_time: sum.device_time + t.device_time,
        })
    }
}

/// The query sets and buffers a profiled step writes its timestamps to, and the totals so far.
#[derive(Debug)]
pub(crate) struct KernelTimer {
    sets: Vec<wgpu::QuerySet>,
    resolve: Option<DeviceBuffer>,
    readback: Option<DeviceBuffer>,
    /// Whether the readback was asked to map and not yet read and unmapped.
    mapped: bool,
    /// Nanoseconds a timestamp tick lasts.
    period_ns: f64,
    totals: HashMap<KernelVariant, KernelTime, FxBuildHasher>,
}

impl KernelTimer {
    /// A timer for a queue whose timestamp ticks last `period_ns` nanoseconds.
    pub(crate) fn new(period_ns: f32) -> Self {
        Self {
            sets: Vec::new(),
            resolve: None,
            readback: None,
            mapped: false,
            period_ns: f64::from(period_ns),
            totals: HashMap::default(),
        }
    }

    /// Makes room for the timestamps of `passes` passes: query sets and the resolve and
    /// readback buffers, created only when the step is longer than any before (or a failed
    /// step left the readback mapped); `create(label, size, usage)` makes a buffer.
    pub(crate) fn reserve(
        &mut self,
        device: &wgpu::Device,
        passes: usize,
        create: impl Fn(&str, u64, wgpu::BufferUsages) -> Result<DeviceBuffer, GpuError>,
    ) -> Result<(), GpuError> {
        let queries = 2 * passes as u64;
        while (self.sets.len() as u64) * u64::from(QUERIES_PER_SET) < queries {
            self.sets.push(device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernel timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES_PER_SET,
            }));
        }
        let bytes = self.sets.len() as u64 * SET_BYTES;
        // A readback a failed step left mapped (or waiting to be) is replaced too.
        let small = |buffer: &Option<DeviceBuffer>| buffer.as_ref().is_none_or(|b| b.size() < bytes);
        if self.mapped || small(&self.resolve) || small(&self.readback) {
            let resolve = create("kernel timestamps", bytes, RESOLVE)?;
            let readback = create("kernel timestamps readback", bytes, READBACK)?;
            (self.resolve, self.readback, self.mapped) = (Some(resolve), Some(readback), false);
        }
        Ok(())
    }

    /// The timestamp writes of pass `pass` (after [`Self::reserve`] made room for it).
    pub(crate) fn writes(&self, pass: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        let query = 2 * pass as u64;
        let per_set = u64::from(QUERIES_PER_SET);
        let index = (query % per_set) as u32;
        wgpu::ComputePassTimestampWrites {
            query_set: &self.sets[(query / per_set) as usize],
            beginning_of_pass_write_index: Some(index),
            end_of_pass_write_index: Some(index + 1),
        }
    }

    /// Resolves the timestamps of `passes` passes and copies them to the readback buffer.
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder, passes: usize) {
        let (Some(resolve), Some(readback)) = (&self.resolve, &self.readback) else { return };
        let mut left = 2 * passes as u32;
        for (i, set) in self.sets.iter().enumerate() {
            if left == 0 {
                break;
            }
            let count = left.min(QUERIES_PER_SET);
            encoder.resolve_query_set(set, 0..count, resolve, i as u64 * SET_BYTES);
            left -= count;
        }
        encoder.copy_buffer_to_buffer(resolve, 0, readback, 0, Some(timestamp_bytes(passes)));
    }

    /// Asks for the mapping of the timestamps of `passes` passes (done once the device is
    /// idle); nothing without passes, or while a mapping is pending.
    pub(crate) fn map(&mut self, passes: usize) {
        if let Some(readback) = &self.readback
            && passes > 0
            && !self.mapped
        {
            readback.slice(..timestamp_bytes(passes)).map_async(wgpu::MapMode::Read, |_| ());
            self.mapped = true;
        }
    }

    /// Adds the time of each pass to its variant, `variants[i]` having run in pass `i`, once the
    /// mapped readback is there.
    pub(crate) fn collect(&mut self, variants: &[KernelVariant]) -> Result<(), GpuError> {
        let Some(readback) = &self.readback else { return Ok(()) };
        if variants.is_empty() || !self.mapped {
            return Ok(());
        }
        let range = readback.slice(..timestamp_bytes(variants.len()));
        let view = range.get_mapped_range().map_err(|e| GpuError::Device(e.to_string()))?;
        // Read a word at a time: the mapping need not be 8-byte aligned.
        let ticks: Vec<u64> =
            view.chunks_exact(8).map(|word| u64::from_le_bytes(std::array::from_fn(|i| word[i]))).collect();
        for (variant, pass) in variants.iter().zip(ticks.chunks_exact(2)) {
            let nanos = pass[1].saturating_sub(pass[0]) as f64 * self.period_ns;
            let total = self.totals.entry(*variant).or_default();
            total.dispatches += 1;
            total.device_time += Duration::from_nanos(nanos.round() as u64);
        }
        drop(view);
        readback.unmap();
        self.mapped = false;
        Ok(())
    }

    /// The totals so far, by variant label.
    pub(crate) fn times(&self) -> KernelTimes {
        KernelTimes(self.totals.iter().map(|(variant, time)| (variant.label(), *time)).collect())
    }
}
