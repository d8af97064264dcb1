//! Weight upload: raw GGUF / little-endian bytes kept in their format (the small-block types
//! and Q6_K split into quants and headers), rows padded to whole 16-byte units, and split by
//! rows across buffers (or textures) so each stays under the binding limit.

use std::ops::Range;

use super::GpuError;
use super::bind_cache::Bound;
use super::context::GpuContext;
use super::error_scopes::ErrorScopes;
use super::resource::ResourceId;
use super::shader::{WEIGHT_DTYPES, WEIGHT_TEXELS, WeightSource};
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
/// Layout per row (what the shaders read), every row a whole number of 16-byte units so that
/// each row, and each run of words a format reads, starts on one: f32 as is; f16 and bf16 two
/// per word; Q4_K and Q5_K blocks as GGUF stores them (144 and 176 bytes: whole units, header
/// first); every other quantized type split in two regions ([`SplitBlock`]): first every
/// block's quants in order (whole units, with Q2_K's, Q3_K's and Q6_K's sub-block scales and
/// Q3_K's high-bit mask), then every block's header in order (its scale d in a word of its own
/// or with Q4_1's and Q5_1's minimum m, Q2_K's dmin or IQ4_XS's high scale bits; a second word of
/// Q5_0's and Q5_1's fifth bits or IQ4_XS's low scale bits; Q3_K's 12 scale bytes before its d).
/// Rows end with zeros up to the next unit.
#[derive(Debug, Clone)]
pub struct Weight {
    name: String,
    dtype: DType,
    rows: usize,
    cols: usize,
    gated: bool,
    pub(crate) parts: Vec<WeightPart>,
    /// First word of its rows in its one part's binding: a view of one expert's rows of a
    /// stacked weight ([`GpuContext::upload_stacked_weight`]); 0 otherwise.
    word0: usize,
    /// Words between two experts' rows of its stack; `None` for a weight of its own.
    expert_words: Option<usize>,
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

    /// First word of its rows in its part's binding (nonzero for a view of a stacked weight).
    pub(crate) fn word0(&self) -> usize {
        self.word0
    }

    /// Words between two experts' rows of the stack it is a view of (`None`: a weight of its
    /// own), which [`LinearInput::ExpertRows`](super::LinearInput::ExpertRows) reads by id.
    pub fn expert_words(&self) -> Option<usize> {
        self.expert_words
    }

    /// Which expert of its stack it is a view of (`None`: a weight of its own): the row of
    /// stacked `[experts, rows]` biases a linear through it adds.
    pub fn expert(&self) -> Option<usize> {
        self.expert_words.map(|words| self.word0 / words)
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
    let words = match SplitBlock::of(dtype) {
        Some(split) => {
            let blocks = cols / dtype.block_len();
            blocks * split.quant_words() + (blocks * split.header_words()).next_multiple_of(4)
        }
        None => (cols / dtype.block_len() * dtype.block_bytes()).div_ceil(4),
    };
    words.next_multiple_of(4)
}

/// Bytes a `[rows, cols]` weight of `dtype` takes in GPU memory (quantized stays quantized;
/// rows are padded to whole 16-byte units).
pub fn resident_bytes(dtype: DType, rows: usize, cols: usize) -> u64 {
    4 * (rows * row_words(dtype, cols)) as u64
}

/// How a block of a type stored in split rows divides: the bytes of its quants (a whole number
/// of 16-byte units, read as aligned runs) and the fields of its header (each a byte range
/// `(start, end)` of the block, padded with zeros to whole words).
struct SplitBlock {
    quants: Range<usize>,
    header: &'static [(usize, usize)],
}

impl SplitBlock {
    /// The split of `dtype`'s blocks, for the types stored in split rows.
    fn of(dtype: DType) -> Option<Self> {
        let (quants, header): (_, &'static [_]) = match dtype {
            DType::Q8_0 => (2..34, &[(0, 2)]),
            DType::Q4_0 | DType::IQ4NL => (2..18, &[(0, 2)]),
            DType::MXFP4 => (1..17, &[(0, 1)]),
            DType::Q4_1 => (4..20, &[(0, 4)]),
            DType::Q5_0 => (6..22, &[(0, 2), (2, 6)]),
            DType::Q5_1 => (8..24, &[(0, 4), (4, 8)]),
            DType::Q6K => (0..208, &[(208, 210)]),
            DType::Q2K => (0..80, &[(80, 84)]),
            DType::Q3K => (0..96, &[(96, 108), (108, 110)]),
            DType::IQ4XS => (8..136, &[(0, 4), (4, 8)]),
            DType::F32 | DType::F16 | DType::BF16 | DType::Q4K | DType::Q5K => return None,
        };
        Some(Self { quants, header })
    }

    fn quant_words(&self) -> usize {
        self.quants.len() / 4
    }

    fn header_words(&self) -> usize {
        self.header.iter().map(|(start, end)| (end - start).div_ceil(4)).sum()
    }

    /// One row of GGUF blocks in the split layout: the quants region, then the headers region.
    fn repack(&self, block_bytes: usize, row: &[u8], out: &mut Vec<u8>) {
        for block in row.chunks_exact(block_bytes) {
            out.extend_from_slice(&block[self.quants.clone()]);
        }
        for block in row.chunks_exact(block_bytes) {
            for &(start, end) in self.header {
                out.extend_from_slice(&block[start..end]);
                out.resize(out.len().next_multiple_of(4), 0);
            }
        }
    }
}

/// Appends one row of `dtype` in its stored layout (see [`Weight`]), padded to a whole unit.
fn repack_row(dtype: DType, row: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    match SplitBlock::of(dtype) {
        Some(split) => split.repack(dtype.block_bytes(), row, out),
        None => out.extend_from_slice(row),
    }
    out.resize(start + (out.len() - start).next_multiple_of(16), 0);
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
        if !WEIGHT_DTYPES.contains(&dtype) {
            return Err(GpuError::Unsupported(format!(
                "{name}: {} weights are read and dequantized on the CPU, but no GPU kernel reads them yet",
                dtype.name().to_uppercase()
            )));
        }
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
        Ok(Weight {
            name: name.to_string(),
            dtype,
            rows,
            cols,
            gated: groups.len() == 2,
            parts,
            word0: 0,
            expert_words: None,
        })
    }

    /// Uploads `experts` stacked weights of `[rows, cols]` each as one binding (a mixture of
    /// experts' projection: `groups` each `[experts * rows, cols]`, expert `e`'s rows at `e *
    /// rows`; two groups make gated weights, gate then up) and returns one view a weight,
    /// expert `e`'s rows (gate rows, then its up rows) at `e * rows * groups` stored rows of the
    /// one buffer or texture: every kernel reads a view as it reads a weight uploaded alone, with
    /// the same bits. `Ok(None)` when the stack would not fit one binding.
    pub fn upload_stacked_weight(
        &self,
        name: &str,
        dtype: DType,
        experts: usize,
        rows: usize,
        cols: usize,
        groups: &[&[u8]],
    ) -> Result<Option<Vec<Weight>>, GpuError> {
        let row_bytes = dtype.bytes_for(cols).ok_or_else(|| {
            GpuError::Shape(format!(
                "{name}: {cols} columns is not a whole number of {} blocks",
                dtype.name()
            ))
        })?;
        if !WEIGHT_DTYPES.contains(&dtype) || !(1..=2).contains(&groups.len()) {
            return Err(GpuError::Unsupported(format!("{name}: no stacked {} weight", dtype.name())));
        }
        for bytes in groups {
            if rows == 0 || experts == 0 || bytes.len() != experts * rows * row_bytes {
                return Err(GpuError::Shape(format!(
                    "{name}: {} bytes for {experts} [{rows}, {cols}] {} weights",
                    bytes.len(),
                    dtype.name()
                )));
            }
        }
        let expert_words = row_words(dtype, cols) * rows * groups.len();
        let source = self.capabilities().weight_source();
        if (4 * expert_words * experts) as u64 > self.max_part_bytes(source) {
            return Ok(None);
        }
        let mut data = Vec::with_capacity(4 * expert_words * experts);
        for e in 0..experts {
            for bytes in groups {
                let expert = &bytes[e * rows * row_bytes..(e + 1) * rows * row_bytes];
                for row in expert.chunks_exact(row_bytes) {
                    repack_row(dtype, row, &mut data);
                }
            }
        }
        let words = self.upload_words(name, source, data)?;
        let views = (0..experts)
            .map(|e| Weight {
                name: format!("{name}.{e}"),
                dtype,
                rows,
                cols,
                gated: groups.len() == 2,
                parts: vec![WeightPart { words: words.clone(), row0: 0, rows }],
                word0: e * expert_words,
                expert_words: Some(expert_words),
            })
            .collect();
        Ok(Some(views))
    }
}

/// Bytes of a texel row of a weight texture.
const TEXEL_ROW_BYTES: usize = 16 * WEIGHT_TEXELS as usize;

impl GpuContext {
    /// The most bytes one part of a weight may hold: the binding limit (in whole 16-byte
    /// units), and for a texture no more than its tallest texture holds.
    fn max_part_bytes(&self, source: WeightSource) -> u64 {
        let texture_rows = self.capabilities().limits.max_texture_dimension_2d as u64;
        match source {
            WeightSource::Buffer => self.max_binding_bytes() & !15,
            WeightSource::Texture => self.max_binding_bytes().min(texture_rows * TEXEL_ROW_BYTES as u64),
        }
    }

    /// One part's words on the device, in `source`. A texture is counted with the buffers.
    fn upload_words(&self, name: &str, source: WeightSource, mut data: Vec<u8>) -> Result<Bound, GpuError> {
        if source == WeightSource::Buffer {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let buffer = self.create_buffer(name, data.len() as u64, usage)?;
            self.queue.write_buffer(&buffer, 0, &data);
            return Ok(Bound::Buffer(buffer));
        }
        // Whole texel rows: every run the formats read lies within a stored row.
        let rows = data.len().div_ceil(TEXEL_ROW_BYTES);
        data.resize(rows * TEXEL_ROW_BYTES, 0);
        let size = wgpu::Extent3d { width: WEIGHT_TEXELS, height: rows as u32, depth_or_array_layers: 1 };
        self.count().buffer_created();
        let scopes = ErrorScopes::push(&self.device);
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
        scopes.pop(&format!("{name}: a weight texture of {rows} rows"), GpuError::Device)?;
        let layout = wgpu::TexelCopyBufferLayout {
            offset: 0,
            bytes_per_row: Some(TEXEL_ROW_BYTES as u32),
            rows_per_image: Some(rows as u32),
        };
        self.queue.write_texture(texture.as_image_copy(), &data, layout, size);
        Ok(Bound::Texture(ResourceId::fresh(), texture.create_view(&wgpu::TextureViewDescriptor::default())))
    }
}

#[cfg(test)]
mod tests {
    use super::{repack_row, row_words};
    use crate::dtype::DType;
    use crate::gpu::shader::WEIGHT_DTYPES;

    #[test]
    fn every_stored_row_is_whole_units_of_its_row_words() {
        for dtype in WEIGHT_DTYPES {
            for blocks in [1, 2, 3, 5, 18] {
                let cols = blocks * dtype.block_len() + usize::from(dtype.block_len() == 1);
                let row: Vec<u8> = (0..dtype.bytes_for(cols).unwrap()).map(|i| i as u8 | 1).collect();
                let mut out = Vec::new();
                repack_row(dtype, &row, &mut out);
                assert_eq!(out.len(), 4 * row_words(dtype, cols), "{} x {cols}", dtype.name());
                assert_eq!(out.len() % 16, 0, "{} x {cols}", dtype.name());
            }
        }
    }

    #[test]
    fn a_split_row_holds_every_blocks_quants_then_every_blocks_header() {
        let block = |tag: u8| -> Vec<u8> { [vec![tag, tag + 1], vec![tag + 2; 32]].concat() };
        let row = [block(10), block(20), block(30)].concat();
        let mut out = Vec::new();
        repack_row(DType::Q8_0, &row, &mut out);
        let quants = [vec![12; 32], vec![22; 32], vec![32; 32]].concat();
        let headers = [10, 11, 0, 0, 20, 21, 0, 0, 30, 31, 0, 0, 0, 0, 0, 0];
        assert_eq!(out, [quants, headers.to_vec()].concat());
    }

    #[test]
    fn a_q5_0_header_is_its_scale_word_then_its_fifth_bits_word() {
        let block =
            |tag: u8| -> Vec<u8> { [vec![tag, tag + 1], vec![tag + 2; 4], vec![tag + 3; 16]].concat() };
        let mut out = Vec::new();
        repack_row(DType::Q5_0, &[block(10), block(20)].concat(), &mut out);
        let quants = [vec![13; 16], vec![23; 16]].concat();
        let headers = [10, 11, 0, 0, 12, 12, 12, 12, 20, 21, 0, 0, 22, 22, 22, 22];
        assert_eq!(out, [quants, headers.to_vec()].concat());
    }

    #[test]
    fn a_q3_k_header_is_one_unit_of_its_scales_then_its_d() {
        let block = [vec![1; 32], vec![2; 64], vec![3; 12], vec![4, 5]].concat();
        let mut out = Vec::new();
        repack_row(DType::Q3K, &block, &mut out);
        let want = [&block[..108], &[4, 5, 0, 0]].concat();
        assert_eq!(out, want);
    }

    #[test]
    fn a_q6_k_header_is_its_super_block_scale_alone() {
        let block = [vec![1; 128], vec![2; 64], vec![3; 16], vec![4, 5]].concat();
        let mut out = Vec::new();
        repack_row(DType::Q6K, &block, &mut out);
        let want = [&block[..208], &[4, 5, 0, 0], &[0; 12]].concat();
        assert_eq!(out, want);
    }
}
