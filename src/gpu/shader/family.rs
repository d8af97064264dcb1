//! What a kernel family's module says of its variants ([`Family`]: the pipeline label, the
//! workgroup size, the files of `shaders/`, the injected constants and the line markers it
//! expands), and the two things it says them with: a [`ShaderFile`] and an [`Injected`]
//! constant.

use super::KernelVariant;
use super::params::ParamsLayout;

/// One file of `shaders/`.
#[derive(Debug, Clone, Copy)]
pub(super) struct ShaderFile {
    /// The file's name in `shaders/`.
    pub(super) name: &'static str,
    /// Its text.
    pub(super) text: &'static str,
}

/// The [`ShaderFile`] `shaders/<name>`, embedded at build time.
macro_rules! shader_file {
    ($name:literal) => {
        $crate::gpu::shader::family::ShaderFile {
            name: $name,
            text: include_str!(concat!("../../../shaders/", $name)),
        }
    };
}
pub(super) use shader_file;

/// A `const NAME: u32` put at the top of a shader, and the Rust item its value comes from.
pub(super) struct Injected {
    /// The constant's name in WGSL.
    pub(super) name: String,
    /// Its value.
    pub(super) value: u32,
    /// The Rust item it comes from, for the comment beside it.
    pub(super) from: String,
}

impl Injected {
    /// The constant `name` of `value`, injected from the Rust item `from`.
    pub(super) fn new(name: impl Into<String>, value: u32, from: impl Into<String>) -> Self {
        Self { name: name.into(), value, from: from.into() }
    }
}

/// What a kernel family's module says of each of its variants (as ggml-webgpu's
/// `get_*_pipeline` does): [`KernelVariant::family`] names the family of a variant, and the
/// variant's methods ask it. Each method is called with a variant of the family only.
pub(super) trait Family {
    /// The variant's short unique name, the pipeline label.
    fn label(&self, variant: &KernelVariant) -> String;

    /// Its invocations per workgroup (`WG`) and the name of the `shader::` constant they come
    /// from.
    fn workgroup(&self, _variant: &KernelVariant) -> (u32, &'static str) {
        (super::WORKGROUP_SIZE, "WORKGROUP_SIZE")
    }

    /// True when it needs the SHADER_F16 feature.
    fn needs_f16(&self, _variant: &KernelVariant) -> bool {
        false
    }

    /// True when it needs the SUBGROUP feature.
    fn needs_subgroup(&self, _variant: &KernelVariant) -> bool {
        false
    }

    /// True when it needs the EXPERIMENTAL_COOPERATIVE_MATRIX feature.
    fn needs_coop(&self, _variant: &KernelVariant) -> bool {
        false
    }

    /// The layout of the parameter block it reads as `P`.
    fn params(&self, variant: &KernelVariant) -> ParamsLayout;

    /// The files of `shaders/` it is made of, in order.
    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile>;

    /// Its specialisation constants, injected after `WG`.
    fn constants(&self, _variant: &KernelVariant) -> Vec<Injected> {
        Vec::new()
    }

    /// Its composed source with the family's line markers expanded ([`super::unroll`]).
    fn expand(&self, _variant: &KernelVariant, src: String) -> String {
        src
    }
}
