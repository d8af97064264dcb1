//! The batched LoRA family (`shaders/lora_common.wgsl` and its shrink and expand kernels): each
//! row times its adapter's `A`, then the shrunk values times its `B`, scaled and added (four
//! rows of an adapter and four columns an invocation, or one output for inputs of other widths).

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{KernelParams, LoraParams, ParamsLayout};

/// Invocations per workgroup of [`KernelVariant::LoraShrinkGroups`]: a decode's shrink has
/// few (32 rows over 4 adapters of rank 16: 32), so small groups let CPU drivers spread them
/// over their threads.
pub const LORA_GROUPS_WG: u32 = 16;

/// The family of [`KernelVariant::LoraShrink`], [`KernelVariant::LoraShrinkGroups`] and
/// [`KernelVariant::LoraExpandGroups`].
pub(super) struct Lora;

impl Family for Lora {
    fn label(&self, variant: &KernelVariant) -> String {
        match variant {
            KernelVariant::LoraExpandGroups => "lora_expand_groups".into(),
            KernelVariant::LoraShrinkGroups => "lora_shrink_groups".into(),
            _ => "lora_shrink".into(),
        }
    }

    fn workgroup(&self, variant: &KernelVariant) -> (u32, &'static str) {
        match variant {
            KernelVariant::LoraShrinkGroups => (LORA_GROUPS_WG, "LORA_GROUPS_WG"),
            _ => (super::WORKGROUP_SIZE, "WORKGROUP_SIZE"),
        }
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        LoraParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let body = match variant {
            KernelVariant::LoraExpandGroups => shader_file!("lora_expand_groups.wgsl"),
            KernelVariant::LoraShrinkGroups => shader_file!("lora_shrink_groups.wgsl"),
            _ => shader_file!("lora_shrink.wgsl"),
        };
        vec![shader_file!("lora_common.wgsl"), body]
    }
}
