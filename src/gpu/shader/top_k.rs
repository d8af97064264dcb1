//! The top-k family (`shaders/top_k.wgsl`): the k largest values of each row (argmax as k = 1),
//! one workgroup of [`TOP_K_WG`] a row.

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{KernelParams, ParamsLayout, TopKParams};

/// Invocations per workgroup of top-k (one workgroup per row).
pub const TOP_K_WG: u32 = 256;

/// The family of [`KernelVariant::TopK`].
pub(super) struct TopK;

impl Family for TopK {
    fn label(&self, _variant: &KernelVariant) -> String {
        "top_k".into()
    }

    fn workgroup(&self, _variant: &KernelVariant) -> (u32, &'static str) {
        (TOP_K_WG, "TOP_K_WG")
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        TopKParams::LAYOUT
    }

    fn files(&self, _variant: &KernelVariant) -> Vec<ShaderFile> {
        vec![shader_file!("top_k.wgsl")]
    }
}
