//! The RoPE + cache family (`shaders/rope_cache.wgsl`): the fused Q/K/V projection's queries
//! and keys rotated (both RoPE modes, chosen by a parameter), optionally RMS-normed first, and
//! the keys and values written into the paged K/V pools; one invocation per head.

use super::KernelVariant;
use super::family::{Family, ShaderFile, shader_file};
use super::params::{KernelParams, ParamsLayout, RopeCacheParams};

/// The family of [`KernelVariant::RopeCache`].
pub(super) struct RopeCache;

impl Family for RopeCache {
    fn label(&self, variant: &KernelVariant) -> String {
        let KernelVariant::RopeCache { kv, qk_norm } = *variant else { return String::new() };
        format!("rope_cache/{}{}", kv.name(), if qk_norm { "/qk-norm" } else { "" })
    }

    fn needs_f16(&self, variant: &KernelVariant) -> bool {
        matches!(*variant, KernelVariant::RopeCache { kv, .. } if kv.needs_f16())
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        RopeCacheParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let KernelVariant::RopeCache { kv, qk_norm } = *variant else { return Vec::new() };
        let norm = if qk_norm { shader_file!("qk_norm_rms.wgsl") } else { shader_file!("qk_norm_none.wgsl") };
        let rope = [shader_file!("rope_angle.wgsl"), shader_file!("rope_head.wgsl")];
        [vec![kv.file(), norm], rope.to_vec(), vec![shader_file!("rope_cache.wgsl")]].concat()
    }
}
