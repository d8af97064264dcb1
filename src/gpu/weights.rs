//! Weight upload: raw GGUF / little-endian bytes kept in their format, rows padded to whole u32
//! words, and split by rows across buffers (or textures) so each stays under the binding limit.

use super::GpuError;
use super::bind_cache::Bound;
use super::context::GpuContext;
use super::resource::ResourceId;
use super::shader::{WEIGHT_TEXELS, WeightSource};
use crate::dtype::DType;

/// A contiguous range of rows of a weight in one buffer or texture (of a gated weight: the
/// range of its gate rows, then the same range of its up rows). A texture is rgba32uint and
/// holds the buffer's words four a texel, [`WEIGHT_TEXELS`] texels a row (see [`WeightSource`]).
#[derive(Debug, Clone)]
pub(crate) struct WeightPart {
    pub(crate) words: Bound,
    pub(crate) row0: usize,
    pub(crate) rows: usize,
}

/// A `[rows, cols]` weight matrix on the device, in its stored type.
///
/// Layout per row (what the shaders read): f32 as is; f16 and bf16 two per word, rows padded to
/// an even length; Q4_1, Q5_1, Q4_K and Q5_K blocks as GGUF stores them (20, 24, 144 and 176
/// bytes); Q8_0, Q4_0, Q5_0 and IQ4_NL blocks with two zero bytes after the f16 scale (36, 20,
/// 24 and 20 bytes) so every block starts on a word; Q6_K blocks with their trailing f16 scale
/// moved to the front and padded to a word (212 bytes), Q3_K likewise (112 bytes); Q2_K and
/// IQ4_XS as GGUF stores them (84 and 136 bytes).
#[derive(Debug, Clone)]
pub struct Weight {
    name: String,
    dtype: DType,
    rows: usize,
    cols: usize,
    gated: bool,
    pub(crate) parts: Vec<WeightPart>,
}

impl Weight {
    /// The name it was uploaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stored element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output features (rows; of a gated weight, its gate rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// True for a gated pair of weights ([`GpuContext::upload_gated_weight`]).
    pub fn is_gated(&self) -> bool {
        self.gated
    }

    /// Input features (columns).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Number of buffers (or textures) the rows are split across.
    pub fn num_parts(&self) -> usize {
        self.parts.len()
    }

    /// Where the kernels read its words from.
    pub fn source(&self) -> WeightSource {
        match self.parts.first().map(|p| &p.words) {
            Some(Bound::Texture(..)) => WeightSource::Texture,
            _ => WeightSource::Buffer,
        }
    }
}

/// u32 words per stored row of `cols` elements of `dtype`, as the shaders read it.
pub(crate) fn row_words(dtype: DType, cols: usize) -> usize {
    match dtype {
        DType::F32 => cols,
        DType::F16 | DType::BF16 => cols.div_ceil(2),
        _ => cols / dtype.block_len() * block_words(dtype),
    }
}

/// Bytes a `[rows, cols]` weight of `dtype` takes in GPU memory (quantized stays quantized;
/// blocks are padded to whole words).
pub fn resident_bytes(dtype: DType, rows: usize, cols: usize) -> u64 {
    4 * (rows * row_words(dtype, cols)) as u64
}

/// u32 words per stored block of a quantized type.
fn block_words(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => 0,
        DType::Q8_0 => 9,
        DType::Q4_0 | DType::Q4_1 | DType::IQ4NL => 5,
        DType::Q5_0 | DType::Q5_1 => 6,
        DType::Q4K => 36,
        DType::Q5K => 44,
        DType::Q6K => 53,
        DType::Q2K => 21,
        DType::Q3K => 28,
        DType::IQ4XS => 34,
    }
}

fn repack_row(dtype: DType, row: &[u8], out: &mut Vec<u8>) {
    match dtype {
        DType::F32 | DType::Q4_1 | DType::Q5_1 | DType::Q4K | DType::Q5K | DType::Q2K | DType::IQ4XS => {
            out.extend_from_slice(row)
        }
        DType::F16 | DType::BF16 => {
            out.extend_from_slice(row);
            if !row.len().is_multiple_of(4) {
                out.extend_from_slice(&[0, 0]);
            }
        }
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 | DType::IQ4NL => {
            for block in row.chunks_exact(dtype.block_bytes()) {
                out.extend_from_slice(&block[..2]);
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&block[2..]);
            }
        }
        DType::Q6K | DType::Q3K => {
            let scale_at = dtype.block_bytes() - 2;
            for block in row.chunks_exact(dtype.block_bytes()) {
                out.extend_from_slice(&block[scale_at..]);
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&block[..scale_at]);
            }
        }
    }
}

impl GpuContext {
    /// Uploads a `[rows, cols]` weight from its raw bytes (GGUF block layout for quantized
    /// types, little-endian otherwise). Quantized weights stay quantized; a weight above the
    /// binding limit is split by rows across buffers (or textures, see [`WeightSource`]),
    /// invisibly to the kernels' callers.
    pub fn upload_weight(
        &self,
        name: &str,
        dtype: DType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Weight, GpuError> {
        self.upload_row_groups(name, dtype, rows, cols, &[bytes])
    }

    /// Uploads a gated pair of `[rows, cols]` weights of one type (an MLP's gate and up
    /// projections) as one weight for [`Step::linear_gated`](super::Step::linear_gated): each
    /// part holds a range of gate rows followed by the same range of up rows.
    pub fn upload_gated_weight(
        &self,
        name: &str,
        dtype: DType,
        rows: usize,
        cols: usize,
        gate: &[u8],
        up: &[u8],
    ) -> Result<Weight, GpuError> {
        self.upload_row_groups(name, dtype, rows, cols, &[gate, up])
    }

    /// Uploads `groups` (each `[rows, cols]`) split by rows into parts under the binding
    /// limit, each part holding the same row range of every group in turn.
    fn upload_row_groups(
        &self,
        name: &str,
        dtype: DType,
        rows: usize,
        cols: usize,
        groups: &[&[u8]],
    ) -> Result<Weight, GpuError> {
        let row_bytes = dtype.bytes_for(cols).ok_or_else(|| {
            GpuError::Shape(format!(
                "{name}: {cols} columns is not a whole number of {} blocks",
                dtype.name()
            ))
        })?;
        for bytes in groups {
            if rows == 0 || cols == 0 || bytes.len() != rows * row_bytes {
                return Err(GpuError::Shape(format!(
                    "{name}: {} bytes for a [{rows}, {cols}] {} weight, expected {}",
                    bytes.len(),
                    dtype.name(),
                    rows * row_bytes
                )));
            }
        }
        let stored_row_bytes = 4 * row_words(dtype, cols) as u64 * groups.len() as u64;
        let source = self.capabilities().weight_source();
        // Parts split on even rows where they can: the rotary epilogue takes columns in pairs.
        let rows_per_part = match (self.max_part_bytes(source) / stored_row_bytes) as usize {
            n if n > 1 => n & !1,
            n => n,
        };
        if rows_per_part == 0 {
            return Err(GpuError::TooLarge(format!(
                "{name}: one row of {stored_row_bytes} bytes exceeds what one buffer or texture may bind"
            )));
        }
        let mut parts = Vec::new();
        for row0 in (0..rows).step_by(rows_per_part) {
            let n = rows_per_part.min(rows - row0);
            let mut data = Vec::with_capacity(n * stored_row_bytes as usize);
            for bytes in groups {
                for row in bytes[row0 * row_bytes..(row0 + n) * row_bytes].chunks_exact(row_bytes) {
                    repack_row(dtype, row, &mut data);
                }
            }
            parts.push(WeightPart { words: self.upload_words(name, source, data)?, row0, rows: n });
        }
        Ok(Weight { name: name.to_string(), dtype, rows, cols, gated: groups.len() == 2, parts })
    }
}

/// Bytes of a texel row of a weight texture.
const TEXEL_ROW_BYTES: usize = 16 * WEIGHT_TEXELS as usize;

impl GpuContext {
    /// The most bytes one part of a weight may hold: the binding limit (in whole 16-byte
    /// units), and for a texture no more than its tallest texture holds besides the texel a
    /// word run may read past the end.
    fn max_part_bytes(&self, source: WeightSource) -> u64 {
        let texture_rows = self.capabilities().limits.max_texture_dimension_2d as u64;
        match source {
            WeightSource::Buffer => self.max_binding_bytes() & !15,
            WeightSource::Texture => self.max_binding_bytes().min(texture_rows * TEXEL_ROW_BYTES as u64 - 32),
        }
    }

    /// One part's words on the device, in `source`. A texture is counted with the buffers.
    fn upload_words(&self, name: &str, source: WeightSource, mut data: Vec<u8>) -> Result<Bound, GpuError> {
        if source == WeightSource::Buffer {
            // Whole 16-byte units (wsrc_buffer.wgsl reads the words as such).
            data.resize(data.len().next_multiple_of(16), 0);
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let buffer = self.create_buffer(name, data.len() as u64, usage)?;
            self.queue.write_buffer(&buffer, 0, &data);
            return Ok(Bound::Buffer(buffer));
        }
        // Whole texel rows, with room for the texel past the last word a run may fetch.
        let rows = (data.len() + 32).div_ceil(TEXEL_ROW_BYTES);
        data.resize(rows * TEXEL_ROW_BYTES, 0);
        let size = wgpu::Extent3d { width: WEIGHT_TEXELS, height: rows as u32, depth_or_array_layers: 1 };
        self.count().buffer_created();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let texture = self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(name),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba32Uint,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(GpuError::OutOfMemory(format!("{name}: a weight texture of {rows} rows: {err}")));
        }
        let layout = wgpu::TexelCopyBufferLayout {
            offset: 0,
            bytes_per_row: Some(TEXEL_ROW_BYTES as u32),
            rows_per_image: Some(rows as u32),
        };
        self.queue.write_texture(texture.as_image_copy(), &data, layout, size);
        Ok(Bound::Texture(ResourceId::fresh(), texture.create_view(&wgpu::TextureViewDescriptor::default())))
    }
}
