//! Whole KV blocks between the paged pools and host memory (the host KV tier's copies).
//!
//! A block travels as one contiguous run of bytes in the cache's dtype: layer 0's K rows of
//! the block, then its V rows, then layer 1's, and so on. A store copies its blocks into a
//! staging buffer in a command buffer of its own, submitted ahead of the step's (the queue
//! runs it before the step overwrites any of those blocks), and maps the staging buffer
//! without waiting: the step's own wait finishes it, and [`GpuContext::finish_kv_store`]
//! reads it later. A load is a queue write per layer and pool, which lands before the next
//! submitted command buffer, so before the step that reads it.

use std::sync::{Arc, Mutex};

use super::GpuError;
use super::context::GpuContext;
use super::error_scopes::ErrorScopes;
use super::kv_cache::KvCache;
use super::resource::DeviceBuffer;

/// Usage of a store's staging buffer.
const STORE_STAGING: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

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
    /// Starts copying `block_ids` to host memory, block after block (see the module doc),
    /// in a command buffer submitted now; nothing waits for the device.
    pub fn store_kv_blocks(&self, cache: &KvCache, block_ids: &[u32]) -> Result<KvStore, GpuError> {
        for &block_id in block_ids {
            cache.check_block(block_id)?;
        }
        let per_layer = cache.layer_block_bytes();
        let size = (block_ids.len() as u64 * cache.block_bytes()).max(4);
        let staging = self.create_buffer("kv store staging", size, STORE_STAGING)?;
        let scopes = ErrorScopes::push(&self.device);
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv store") });
        if self.take_invalid_submit() {
            // Copies the staging buffer onto itself, which validation refuses.
            encoder.copy_buffer_to_buffer(&staging, 0, &staging, 0, Some(4));
        }
        let mut offset = 0;
        for &block_id in block_ids {
            for layer in 0..cache.shape().num_layers {
                let (k, v) = cache.layer(layer)?;
                for pool in [k, v] {
                    encoder.copy_buffer_to_buffer(
                        pool,
                        block_id as u64 * per_layer,
                        &staging,
                        offset,
                        Some(per_layer),
                    );
                    offset += per_layer;
                }
            }
        }
        self.queue.submit([encoder.finish()]);
        if let Err(err) = scopes.pop("copying KV blocks to host memory", GpuError::Device) {
            self.check_health()?;
            return Err(err);
        }
        let mapped: MapResult = Arc::new(Mutex::new(None));
        let report = Arc::clone(&mapped);
        staging.slice(..).map_async(wgpu::MapMode::Read, move |result| {
            *report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
                Some(result.map_err(|e| e.to_string()));
        });
        Ok(KvStore { staging, mapped })
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

    /// Writes each `(block_id, bytes)` (one block's bytes as [`Self::store_kv_blocks`] lays
    /// them out) into its block of the pools, before the next submitted step.
    pub fn load_kv_blocks(&self, cache: &KvCache, blocks: &[(u32, &[u8])]) -> Result<(), GpuError> {
        let per_layer = cache.layer_block_bytes() as usize;
        for &(block_id, bytes) in blocks {
            cache.check_block(block_id)?;
            if bytes.len() as u64 != cache.block_bytes() {
                return Err(GpuError::Shape(format!(
                    "{} bytes loaded into KV block {block_id} of {} bytes",
                    bytes.len(),
                    cache.block_bytes()
                )));
            }
        }
        let scopes = ErrorScopes::push(&self.device);
        for &(block_id, bytes) in blocks {
            let mut runs = bytes.chunks_exact(per_layer);
            for layer in 0..cache.shape().num_layers {
                let (k, v) = cache.layer(layer)?;
                for pool in [k, v] {
                    let run = runs.next().expect("a block has a run per layer and pool");
                    self.queue.write_buffer(pool, block_id as u64 * per_layer as u64, run);
                }
            }
        }
        if let Err(err) = scopes.pop("copying KV blocks from host memory", GpuError::Device) {
            self.check_health()?;
            return Err(err);
        }
        Ok(())
    }
}
