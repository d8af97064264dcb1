//! The paged K/V pools: per layer one K and one V buffer shaped
//! `[num_blocks, block_size, num_kv_heads, head_dim]`.

use super::GpuError;
use super::caps::KvPrecision;
use super::context::GpuContext;
use super::resource::DeviceBuffer;
use super::shader::{KvFormat, MAX_BLOCK_SIZE};
use crate::dtype::{DType, dequantize};

/// Shape of the paged KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheShape {
    /// Transformer layers.
    pub num_layers: usize,
    /// Blocks per pool (block 0 is the null block, still allocated).
    pub num_blocks: usize,
    /// Tokens per block (at most 64).
    pub block_size: usize,
    /// K/V heads.
    pub num_kv_heads: usize,
    /// Head dimension (even).
    pub head_dim: usize,
}

/// K and V pools for every layer.
#[derive(Debug)]
pub struct KvCache {
    shape: KvCacheShape,
    format: KvFormat,
    layers: Vec<(DeviceBuffer, DeviceBuffer)>,
}

impl KvCache {
    /// Layer `layer`'s K and V pools.
    pub(crate) fn layer(&self, layer: usize) -> Result<&(DeviceBuffer, DeviceBuffer), GpuError> {
        self.layers.get(layer).ok_or_else(|| GpuError::Shape(format!("no KV layer {layer}")))
    }

    /// Its shape.
    pub fn shape(&self) -> KvCacheShape {
        self.shape
    }

    /// Element format of the pools.
    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Bytes of one layer's K (or V) pool.
    pub fn pool_bytes(&self) -> u64 {
        pool_bytes(&self.shape, self.format)
    }
}

fn pool_bytes(s: &KvCacheShape, format: KvFormat) -> u64 {
    (s.num_blocks * s.block_size * s.num_kv_heads * s.head_dim * format.elem_bytes()) as u64
}

impl GpuContext {
    /// Allocates zeroed K/V pools; `precision` picks f16 or f32 as [`Capabilities::kv_format`] says.
    ///
    /// [`Capabilities::kv_format`]: super::Capabilities::kv_format
    pub fn kv_cache(&self, shape: KvCacheShape, precision: KvPrecision) -> Result<KvCache, GpuError> {
        let s = &shape;
        if s.num_layers == 0
            || s.num_blocks == 0
            || s.num_kv_heads == 0
            || s.head_dim == 0
            || !s.head_dim.is_multiple_of(2)
        {
            return Err(GpuError::Shape(format!("invalid KV cache shape {shape:?} (head_dim must be even)")));
        }
        if s.block_size == 0 || s.block_size > MAX_BLOCK_SIZE as usize {
            return Err(GpuError::Shape(format!("block_size {} must be 1..={MAX_BLOCK_SIZE}", s.block_size)));
        }
        let format = self.capabilities().kv_format(precision);
        let bytes = pool_bytes(s, format);
        self.check_binding(|| "one layer's K pool".into(), bytes)?;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let mut layers = Vec::with_capacity(s.num_layers);
        for layer in 0..s.num_layers {
            let k = self.create_buffer(&format!("k_cache.{layer}"), bytes, usage)?;
            let v = self.create_buffer(&format!("v_cache.{layer}"), bytes, usage)?;
            layers.push((k, v));
        }
        Ok(KvCache { shape, format, layers })
    }

    /// Layer `layer`'s K and V pools as f32 values, each `[num_blocks * block_size,
    /// num_kv_heads, head_dim]` flattened (its own submit; for tests and debugging).
    pub fn read_kv_layer(&self, cache: &KvCache, layer: usize) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        let (k, v) = cache.layer(layer)?;
        let mut step = self.step();
        let (ki, vi) = (step.read_buffer(k, cache.pool_bytes()), step.read_buffer(v, cache.pool_bytes()));
        let mut out = step.submit()?;
        let dtype = match cache.format {
            KvFormat::F32 => DType::F32,
            KvFormat::F16Packed | KvFormat::F16Native => DType::F16,
        };
        let values = |bytes: Vec<u8>| dequantize(dtype, &bytes);
        Ok((values(out.take(ki)), values(out.take(vi))))
    }
}
