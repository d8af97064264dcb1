//! The RMSNorm family: the rms_norm kernel and Gemma's sandwich (`shaders/rms_norm.wgsl`,
//! `rms_norm_sandwich.wgsl`), and the RMSNorm scales' partial sums they share with the norming
//! linears (`rms_scale.wgsl`, `rms_scale_lanes.wgsl`, sized by `NORM_WG` and `NORM_ROWS`).

use super::family::{Family, Injected, ShaderFile, shader_file};
use super::params::{KernelParams, ParamsLayout, RmsNormParams};
use super::tree::Tree;
use super::{KernelVariant, WORKGROUP_SIZE};

/// The family of [`KernelVariant::RmsNorm`] and [`KernelVariant::RmsNormSandwich`].
pub(super) struct Norm;

impl Family for Norm {
    fn label(&self, variant: &KernelVariant) -> String {
        match variant {
            KernelVariant::RmsNormSandwich => "rms_norm_sandwich".into(),
            _ => "rms_norm".into(),
        }
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        RmsNormParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let body = match variant {
            KernelVariant::RmsNormSandwich => shader_file!("rms_norm_sandwich.wgsl"),
            _ => shader_file!("rms_norm.wgsl"),
        };
        vec![Tree::Shared.file(), scale_file(false), body]
    }

    fn constants(&self, variant: &KernelVariant) -> Vec<Injected> {
        scale_constants(variant.rows_per_workgroup())
    }
}

/// The file of the RMSNorm scales' partial sums: over the workgroup's tree, or with `in_lanes`
/// each subgroup on its own (`rms_scale_lanes.wgsl`:
/// [`LinearPath::norms_in_subgroups`](super::LinearPath::norms_in_subgroups)).
pub(super) fn scale_file(in_lanes: bool) -> ShaderFile {
    match in_lanes {
        true => shader_file!("rms_scale_lanes.wgsl"),
        false => shader_file!("rms_scale.wgsl"),
    }
}

/// The constants of the scales' file for a workgroup of `rows` normed rows: the rms_norm
/// kernel's partials (`NORM_WG`) and the rows (`NORM_ROWS`).
pub(super) fn scale_constants(rows: u32) -> Vec<Injected> {
    vec![
        Injected::new("NORM_WG", WORKGROUP_SIZE, "shader::WORKGROUP_SIZE (rms_norm's)"),
        Injected::new("NORM_ROWS", rows, "KernelVariant::rows_per_workgroup"),
    ]
}
