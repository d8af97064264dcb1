//! The elementwise family: the kernels over `shaders/elementwise.wgsl` (one invocation a value
//! or a row: the gated activations, scale, softcap, the residual add, the experts' gather,
//! scatter and combine, gpt-oss's clamped SwiGLU and the token-id copy), and the gated
//! MLP's activations ([`GateActivation`]), which the gated linear epilogue reads too.

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{ElementwiseParams, KernelParams, ParamsLayout};

/// The activation of a gated MLP: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateActivation {
    /// SiLU (SwiGLU: Llama, Qwen, Mistral, Phi-3).
    Silu,
    /// PyTorch's tanh-approximated GELU (GeGLU: Gemma).
    GeluTanh,
}

impl GateActivation {
    /// The activation's name in labels.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Silu => "silu",
            Self::GeluTanh => "gelu_tanh",
        }
    }

    /// The file defining `act` for this activation.
    pub(super) fn file(self) -> ShaderFile {
        match self {
            Self::Silu => shader_file!("act_silu.wgsl"),
            Self::GeluTanh => shader_file!("act_gelu_tanh.wgsl"),
        }
    }
}

/// The family of [`KernelVariant::GatedMul`], [`KernelVariant::Scale`],
/// [`KernelVariant::Softcap`], [`KernelVariant::AddInPlace`], [`KernelVariant::GatherRows`],
/// [`KernelVariant::ScatterRows`], [`KernelVariant::CopyIds`], [`KernelVariant::MoeCombine`]
/// and [`KernelVariant::SwigluClamped`].
pub(super) struct Elementwise;

impl Family for Elementwise {
    fn label(&self, variant: &KernelVariant) -> String {
        match *variant {
            KernelVariant::GatedMul { act } => format!("gated_mul/{}", act.name()),
            KernelVariant::Scale => "scale".into(),
            KernelVariant::Softcap => "softcap".into(),
            KernelVariant::AddInPlace => "add_in_place".into(),
            KernelVariant::GatherRows => "gather_rows".into(),
            KernelVariant::ScatterRows => "scatter_rows".into(),
            KernelVariant::CopyIds => "copy_ids".into(),
            KernelVariant::MoeCombine => "moe_combine".into(),
            KernelVariant::SwigluClamped => "swiglu_clamped".into(),
            _ => String::new(),
        }
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        ElementwiseParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let own = match *variant {
            KernelVariant::GatedMul { act } => vec![act.file(), shader_file!("gated_mul.wgsl")],
            KernelVariant::Scale => vec![shader_file!("scale.wgsl")],
            KernelVariant::Softcap => vec![shader_file!("softcap.wgsl")],
            KernelVariant::AddInPlace => vec![shader_file!("add_in_place.wgsl")],
            KernelVariant::GatherRows => vec![shader_file!("gather_rows.wgsl")],
            KernelVariant::ScatterRows => vec![shader_file!("scatter_rows.wgsl")],
            KernelVariant::CopyIds => vec![shader_file!("copy_ids.wgsl")],
            KernelVariant::MoeCombine => vec![shader_file!("moe_combine.wgsl")],
            KernelVariant::SwigluClamped => vec![shader_file!("swiglu_clamped.wgsl")],
            _ => Vec::new(),
        };
        [vec![shader_file!("elementwise.wgsl")], own].concat()
    }
}
