//! The embedding kernel's family (`shaders/embed.wgsl`): rows of a weight table of any
//! [`WEIGHT_DTYPES`](super::WEIGHT_DTYPES) type, from either [`WeightSource`](super::WeightSource).

use super::KernelVariant;
use super::family::{Family, Injected, ShaderFile, shader_file};
use super::params::{EmbedParams, KernelParams, ParamsLayout};
use super::weights::weight_files;

/// The family of [`KernelVariant::Embed`].
pub(super) struct Embed;

impl Family for Embed {
    fn label(&self, variant: &KernelVariant) -> String {
        let KernelVariant::Embed { dtype, source } = *variant else { return String::new() };
        format!("embed/{}{}", dtype.name(), source.suffix())
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        EmbedParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let KernelVariant::Embed { dtype, source } = *variant else { return Vec::new() };
        [vec![shader_file!("embed.wgsl")], weight_files(dtype, source)].concat()
    }

    fn constants(&self, variant: &KernelVariant) -> Vec<Injected> {
        let KernelVariant::Embed { source, .. } = *variant else { return Vec::new() };
        source.constants().into_iter().collect()
    }
}
