//! What a linear kernel does with each output it computes ([`LinearEpilogue`]: store,
//! accumulate, bias, a gated activation, or RoPE and the KV write), with its files. Every
//! epilogue writes the bits of the separate kernels.

use super::attention::KvFormat;
use super::elementwise::GateActivation;
use super::family::{ShaderFile, shader_file};
use super::unroll::EmitShape;

/// What a linear kernel does with each output it computes. Every epilogue writes the bits
/// the separate kernel would: the product is rounded to f32 first either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearEpilogue {
    /// `y = acc`.
    Store,
    /// `y += acc`: the residual add fused into the projection before it.
    Accumulate,
    /// `y = acc + bias[n]`: Q/K/V biases; gpt-oss's experts' from their row of the stacked
    /// biases (`bias_first` of the `wfirst` file: a view's expert's row, or by ids each row's).
    Bias,
    /// `y = act(gate) * up` over a gated weight, whose parts hold their gate rows and then as
    /// many up rows: the gated MLP's two projections and its activation in one dispatch.
    Gated(GateActivation),
    /// A Q/K/V projection's outputs (plus their biases when `bias`) rotated (interleaved RoPE)
    /// and the keys and values written into a paged KV pool of format `kv`: the bias epilogue
    /// and the rope_cache kernel in the projection, a pair of columns at a time.
    RopeCache {
        /// Pool element format.
        kv: KvFormat,
        /// Biases added before the rotation (Qwen2's Q/K/V).
        bias: bool,
    },
}

impl LinearEpilogue {
    /// Every epilogue.
    pub const ALL: [LinearEpilogue; 11] = [
        Self::Store,
        Self::Accumulate,
        Self::Bias,
        Self::Gated(GateActivation::Silu),
        Self::Gated(GateActivation::GeluTanh),
        Self::RopeCache { kv: KvFormat::F32, bias: false },
        Self::RopeCache { kv: KvFormat::F16Packed, bias: false },
        Self::RopeCache { kv: KvFormat::F16Native, bias: false },
        Self::RopeCache { kv: KvFormat::F32, bias: true },
        Self::RopeCache { kv: KvFormat::F16Packed, bias: true },
        Self::RopeCache { kv: KvFormat::F16Native, bias: true },
    ];

    /// True for the gated epilogues (two rows per output).
    pub fn is_gated(self) -> bool {
        matches!(self, Self::Gated(_))
    }

    /// Weight rows each output reads: 2 for the gated epilogues (gate and up), else 1.
    pub fn gates(self) -> u32 {
        if self.is_gated() { 2 } else { 1 }
    }

    /// True for the rotary epilogue into a pool of f16 rounded by shader-f16 (it needs
    /// SHADER_F16).
    pub(super) fn needs_f16(self) -> bool {
        matches!(self, Self::RopeCache { kv, .. } if kv.needs_f16())
    }

    /// How the kernels hand it their outputs.
    pub(super) fn shape(self) -> EmitShape {
        match self {
            Self::Store | Self::Accumulate | Self::Bias => EmitShape::Single,
            Self::Gated(_) => EmitShape::Gated,
            Self::RopeCache { .. } => EmitShape::Pairs,
        }
    }

    /// What a variant's label says of the epilogue.
    pub(super) fn name(self) -> String {
        match self {
            Self::Store => "store".into(),
            Self::Accumulate => "accumulate".into(),
            Self::Bias => "bias".into(),
            Self::Gated(act) => format!("gated-{}", act.name()),
            Self::RopeCache { kv, bias } => {
                format!("{}rope-cache-{}", if bias { "bias-" } else { "" }, kv.name())
            }
        }
    }

    /// The files of the epilogue's `emit` functions.
    pub(super) fn files(self) -> Vec<ShaderFile> {
        match self {
            Self::Store => vec![shader_file!("epi_store.wgsl")],
            Self::Accumulate => vec![shader_file!("epi_accumulate.wgsl")],
            Self::Bias => vec![shader_file!("epi_bias.wgsl")],
            Self::Gated(act) => vec![act.file(), shader_file!("epi_gated.wgsl")],
            Self::RopeCache { kv, bias } => {
                let projected = if bias {
                    shader_file!("epi_pair_bias.wgsl")
                } else {
                    shader_file!("epi_pair_plain.wgsl")
                };
                vec![
                    kv.file(),
                    projected,
                    shader_file!("rope_angle.wgsl"),
                    shader_file!("epi_rope_cache.wgsl"),
                ]
            }
        }
    }
}
