//! The batched LoRA family (`shaders/lora_common.wgsl` and its shrink and expand kernels): each
//! row times its adapter's `A`, then the shrunk values times its `B`, scaled and added (one
//! output an invocation, or each adapter's rows at once).

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{KernelParams, LoraParams, ParamsLayout};

/// The family of [`KernelVariant::LoraShrink`], [`KernelVariant::LoraShrinkGroups`],
/// [`KernelVariant::LoraExpand`] and [`KernelVariant::LoraExpandRows`].
pub(super) struct Lora;

impl Family for Lora {
    fn label(&self, variant: &KernelVariant) -> String {
        match variant {
            KernelVariant::LoraExpand => "lora_expand".into(),
            KernelVariant::LoraExpandRows => "lora_expand_rows".into(),
            KernelVariant::LoraShrinkGroups => "lora_shrink_groups".into(),
            _ => "lora_shrink".into(),
        }
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        LoraParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let body = match variant {
            KernelVariant::LoraExpand => shader_file!("lora_expand.wgsl"),
            KernelVariant::LoraExpandRows => shader_file!("lora_expand_rows.wgsl"),
            KernelVariant::LoraShrinkGroups => shader_file!("lora_shrink_groups.wgsl"),
            _ => shader_file!("lora_shrink.wgsl"),
        };
        vec![shader_file!("lora_common.wgsl"), body]
    }
}
