//! Whole KV blocks between the paged pools and host memory (the host KV tier's copies).
//!
//! A block travels as one contiguous run of bytes in the cache's dtype: layer 0's K rows of
//! the block, then its V rows, then layer 1's, and so on. A step's copies go in one command
//! buffer submitted ahead of the step's (the queue runs it before the step reads or
//! overwrites any of those blocks): stores copy their blocks into a staging buffer, mapped
//! without waiting (the step's own wait finishes it, and [`GpuContext::finish_kv_store`]
//! reads it later); loads copy from one upload buffer written with the host's bytes.

use std::sync::{Arc, Mutex};

use super::GpuError;
use super::context::GpuContext;
use super::error_scopes::ErrorScopes;
use super::kv_cache::KvCache;
use super::resource::DeviceBuffer;

/// Usage of a store's staging buffer.
const STORE_STAGING: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);
/// Usage of a load's upload buffer.
const LOAD_UPLOAD: wgpu::BufferUsages = wgpu::BufferUsages::COPY_SRC.union(wgpu::BufferUsages::COPY_DST);

/// What a store's map reported: `None` until the device is done with it.
type MapResult = Arc<Mutex<Option<Result<(), String>>>>;

/// Blocks on their way to host memory: copied into a staging buffer, mapped once the device
/// has run the copy.
#[derive(Debug)]
pub struct KvStore {
    staging: DeviceBuffer,
    mapped: MapResult,
}

impl KvCache {
    /// Bytes of one block in one layer's K (or V) pool.
    fn layer_block_bytes(&self) -> u64 {
        let s = self.shape();
        (s.block_size * s.num_kv_heads * s.head_dim * self.format().elem_bytes()) as u64
    }

    /// Bytes of one block's K and V over every layer: what the host tier keeps per block.
    pub fn block_bytes(&self) -> u64 {
        2 * self.shape().num_layers as u64 * self.layer_block_bytes()
    }

    /// An error for a block id outside the pools.
    fn check_block(&self, block_id: u32) -> Result<(), GpuError> {
        match (block_id as usize) < self.shape().num_blocks {
            true => Ok(()),
            false => Err(GpuError::Shape(format!(
                "KV block {block_id} is outside the pool of {} blocks",
                self.shape().num_blocks
            ))),
        }
    }
}

impl GpuContext {
    /// One step's copies, in one command buffer submitted now, ahead of the step's: first
    /// `stores` (their blocks into a staging buffer, block after block, as the module doc
    /// lays them out), then `loads` (each `(block_id, bytes)` from an upload buffer into its
    /// block), so a block both stored and loaded is saved before it is overwritten. Nothing
    /// waits for the device: the stores come back from [`Self::finish_kv_store`].
    pub fn copy_kv_blocks(
        &self,
        cache: &KvCache,
        stores: &[u32],
        loads: &[(u32, &[u8])],
    ) -> Result<Option<KvStore>, GpuError> {
        let block_bytes = cache.block_bytes();
        for &block_id in stores.iter().chain(loads.iter().map(|(block_id, _)| block_id)) {
            cache.check_block(block_id)?;
        }
        if let Some((block_id, bytes)) = loads.iter().find(|(_, bytes)| bytes.len() as u64 != block_bytes) {
            return Err(GpuError::Shape(format!(
                "{} bytes loaded into KV block {block_id} of {block_bytes} bytes",
                bytes.len()
            )));
        }
        if stores.is_empty() && loads.is_empty() {
            return Ok(None);
        }
        let per_layer = cache.layer_block_bytes();
        let staging = match stores.is_empty() {
            true => None,
            false => Some(self.create_buffer(
                "kv store staging",
                stores.len() as u64 * block_bytes,
                STORE_STAGING,
            )?),
        };
        let upload = match loads.is_empty() {
            true => None,
            false => {
                let buffer =
                    self.create_buffer("kv load upload", loads.len() as u64 * block_bytes, LOAD_UPLOAD)?;
                let mut bytes = Vec::with_capacity((loads.len() as u64 * block_bytes) as usize);
                for (_, block) in loads {
                    bytes.extend_from_slice(block);
                }
                self.queue.write_buffer(&buffer, 0, &bytes);
                Some(buffer)
            }
        };
        let scopes = ErrorScopes::push(&self.device);
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv copies") });
        if self.take_invalid_submit() {
            // Copies a buffer onto itself, which validation refuses.
            let buffer = staging.as_ref().or(upload.as_ref()).expect("a copy has a buffer");
            encoder.copy_buffer_to_buffer(buffer, 0, buffer, 0, Some(4));
        }
        // Each block's runs, in the module doc's order: (block, layer's pool, run index).
        let runs = |block_id: u32| {
            (0..cache.shape().num_layers).flat_map(move |layer| [0, 1].map(|kv| (block_id, layer, kv)))
        };
        let pool = |layer: usize, kv: usize| cache.layer(layer).map(|(k, v)| if kv == 0 { k } else { v });
        if let Some(staging) = &staging {
            for (i, (block_id, layer, kv)) in stores.iter().flat_map(|&block_id| runs(block_id)).enumerate() {
                let src = pool(layer, kv)?;
                encoder.copy_buffer_to_buffer(
                    src,
                    block_id as u64 * per_layer,
                    staging,
                    i as u64 * per_layer,
                    Some(per_layer),
                );
            }
        }
        if let Some(upload) = &upload {
            for (i, (block_id, layer, kv)) in
                loads.iter().flat_map(|&(block_id, _)| runs(block_id)).enumerate()
            {
                let dst = pool(layer, kv)?;
                encoder.copy_buffer_to_buffer(
                    upload,
                    i as u64 * per_layer,
                    dst,
                    block_id as u64 * per_layer,
                    Some(per_layer),
                );
            }
        }
        self.queue.submit([encoder.finish()]);
        if let Err(err) = scopes.pop("copying KV blocks to and from host memory", GpuError::Device) {
            self.check_health()?;
            return Err(err);
        }
        Ok(staging.map(|staging| {
            let mapped: MapResult = Arc::new(Mutex::new(None));
            let report = Arc::clone(&mapped);
            staging.slice(..).map_async(wgpu::MapMode::Read, move |result| {
                *report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
                    Some(result.map_err(|e| e.to_string()));
            });
            KvStore { staging, mapped }
        }))
    }

    /// The bytes of `store`'s blocks, block after block; waits for the device only where it
    /// has not finished the copy yet (any step since the store was started has).
    pub fn finish_kv_store(&self, store: KvStore) -> Result<Vec<u8>, GpuError> {
        let done = |mapped: &MapResult| mapped.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if done(&store.mapped).is_none() {
            self.wait_idle()?;
        }
        match done(&store.mapped) {
            Some(Ok(())) => {}
            Some(Err(message)) => return Err(GpuError::Device(format!("mapping a KV store: {message}"))),
            None => return Err(GpuError::Device("a KV store was never mapped".into())),
        }
        let view = store
            .staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| self.check_health().err().unwrap_or_else(|| GpuError::Device(e.to_string())))?;
        let bytes = view.to_vec();
        drop(view);
        store.staging.unmap();
        Ok(bytes)
    }
}
