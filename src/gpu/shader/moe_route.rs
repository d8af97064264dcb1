//! The mixture-of-experts routing family (`shaders/moe_route.wgsl`): each token's experts and
//! their weights from its router logits, one invocation a token.

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{KernelParams, MoeRouteParams, ParamsLayout};

/// The family of [`KernelVariant::MoeRoute`].
pub(super) struct MoeRoute;

impl Family for MoeRoute {
    fn label(&self, _variant: &KernelVariant) -> String {
        "moe_route".into()
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        MoeRouteParams::LAYOUT
    }

    fn files(&self, _variant: &KernelVariant) -> Vec<ShaderFile> {
        vec![shader_file!("moe_route.wgsl")]
    }
}
