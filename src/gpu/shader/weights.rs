//! The weights the linear and embedding kernels read: their element types
//! ([`WEIGHT_DTYPES`]), where their words come from ([`WeightSource`]) and each format's files
//! (its `shaders/wfmt_<type>.wgsl` and the shared pieces it uses: [`weight_files`]).

use super::family::{Injected, ShaderFile, shader_file};
use crate::dtype::DType;

/// Weight element types the linear and embedding kernels read.
pub const WEIGHT_DTYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4NL,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q2K,
    DType::Q3K,
    DType::IQ4XS,
    DType::MXFP4,
];

/// Texels in a row of a weight texture ([`WeightSource::Texture`]), injected as `W_TEXELS`.
pub const WEIGHT_TEXELS: u32 = 2048;

/// Where a linear or embedding kernel reads its weight's u32 words from. Both hold the same
/// words (the layout of `weights.rs`), so the source never changes a result's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightSource {
    /// A storage buffer (`shaders/wsrc_buffer.wgsl`).
    Buffer,
    /// An rgba32uint texture, [`WEIGHT_TEXELS`] texels a row (`shaders/wsrc_texture.wgsl`): a
    /// CPU driver fetches a texel for all lanes at once where it loads a storage word lane by
    /// lane. The sequential path only.
    Texture,
}

impl WeightSource {
    /// Both sources.
    pub const ALL: [Self; 2] = [Self::Buffer, Self::Texture];

    /// The name `PAGODA_WEIGHTS` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Buffer => "buffer",
            Self::Texture => "texture",
        }
    }

    /// What a variant's label adds for this source.
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Self::Buffer => "",
            Self::Texture => "@texture",
        }
    }

    /// The constant the texture's word loads read (`W_TEXELS`), none for a buffer.
    pub(super) fn constants(self) -> Option<Injected> {
        match self {
            Self::Buffer => None,
            Self::Texture => Some(Injected::new("W_TEXELS", WEIGHT_TEXELS, "shader::WEIGHT_TEXELS")),
        }
    }
}

/// The weight-format functions of `dtype` (`w_row_words`, `w_elem`, `w_group`, `w_block`, and
/// the K-split lanes' `run_quads`, `lane_run` and `lane_partial`: a lane's partial sum, the one
/// the decode GEMV and the prefill GEMM both call), after `w8.wgsl` (the W8/W32/V16 types, the
/// byte lanes of a word, the word runs and the rows' rounding to whole units), the word loads of
/// `source` (`wl`, `wl4a`, `wl8a`: a word, a unit, two units) and the shared pieces the format
/// uses: `wbits.wgsl` (bit fields of the quantized formats), `wsplit.wgsl` (split rows, which
/// every quantized format but Q4_K and Q5_K has; it reads the row length from the kernel's
/// `w_k`), `wk_scales.wgsl` (the Q4_K/Q5_K header), `wiq4.wgsl` (the IQ4 table),
/// `wblock_groups.wgsl` (a block as four groups) for the dense formats, which have no `w_block`
/// of their own, and `wrun_groups.wgsl` (a lane's run as two groups in k order) for the formats
/// without a lane run of their own (all but Q8_0, Q4_0, Q4_1, Q4_K and Q6_K).
pub(super) fn weight_files(dtype: DType, source: WeightSource) -> Vec<ShaderFile> {
    let words = match source {
        WeightSource::Buffer => shader_file!("wsrc_buffer.wgsl"),
        WeightSource::Texture => shader_file!("wsrc_texture.wgsl"),
    };
    [vec![shader_file!("w8.wgsl"), words], format_files(dtype)].concat()
}

/// The files of [`weight_files`] after the word loads.
fn format_files(dtype: DType) -> Vec<ShaderFile> {
    let groups = shader_file!("wblock_groups.wgsl");
    let bits = shader_file!("wbits.wgsl");
    let k_scales = shader_file!("wk_scales.wgsl");
    let iq4 = shader_file!("wiq4.wgsl");
    let split = shader_file!("wsplit.wgsl");
    let runs = shader_file!("wrun_groups.wgsl");
    match dtype {
        DType::F32 => vec![shader_file!("wfmt_f32.wgsl"), groups, runs],
        DType::F16 => vec![shader_file!("wfmt_f16.wgsl"), groups, runs],
        DType::BF16 => vec![shader_file!("wfmt_bf16.wgsl"), groups, runs],
        DType::Q8_0 => vec![split, shader_file!("wfmt_q8_0.wgsl")],
        DType::Q4_0 => vec![bits, split, shader_file!("wfmt_q4_0.wgsl")],
        DType::Q4_1 => vec![bits, split, shader_file!("wfmt_q4_1.wgsl")],
        DType::Q5_0 => vec![bits, split, shader_file!("wfmt_q5_0.wgsl"), runs],
        DType::Q5_1 => vec![bits, split, shader_file!("wfmt_q5_1.wgsl"), runs],
        DType::IQ4NL => vec![bits, split, iq4, shader_file!("wfmt_iq4_nl.wgsl"), runs],
        DType::Q4K => vec![bits, k_scales, shader_file!("wfmt_q4_k.wgsl")],
        DType::Q5K => vec![bits, k_scales, shader_file!("wfmt_q5_k.wgsl"), runs],
        DType::Q6K => vec![bits, split, shader_file!("wfmt_q6_k.wgsl")],
        DType::Q2K => vec![bits, split, shader_file!("wfmt_q2_k.wgsl"), runs],
        DType::Q3K => vec![bits, split, shader_file!("wfmt_q3_k.wgsl"), runs],
        DType::IQ4XS => vec![bits, split, iq4, shader_file!("wfmt_iq4_xs.wgsl"), runs],
        DType::MXFP4 => vec![bits, split, shader_file!("wfmt_mxfp4.wgsl"), runs],
    }
}
