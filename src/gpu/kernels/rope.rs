//! RoPE on the fused Q/K/V row and the paged K/V write (`shaders/rope_cache.wgsl`, with
//! `qk_norm_rms.wgsl` for Qwen3's and Gemma 3's Q/K norms): one invocation a head,
//! [`WORKGROUP_SIZE`](crate::gpu::shader::WORKGROUP_SIZE) a workgroup; the grid covers the
//! tokens' heads. The same work runs in a projection's epilogue where
//! [`RopeCacheArgs`] rotates neighbouring pairs ([`super::linear`]).

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::kv_cache::KvCache;
use crate::gpu::resource::DeviceBuffer;
use crate::gpu::shader::KernelVariant;
use crate::gpu::shader::params::RopeCacheParams;
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::{dims2, u};

/// Which pairs of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Pairs (2i, 2i + 1): GGUF llama files store Q/K rows permuted for it, and half-split
    /// models without Q/K norms are loaded so.
    Interleaved,
    /// Pairs (i, i + head_dim / 2), NeoX style: models with Q/K norms (Qwen3, Gemma 3).
    HalfSplit,
}

/// What RoPE and the paged K/V write of one layer read besides its Q/K/V row: [`Step::rope_cache`]
/// as its own dispatch, or in the projections' epilogue ([`Step::linear_rope_cache`]).
#[derive(Debug, Clone, Copy)]
pub struct RopeCacheArgs<'a> {
    /// `u32 [T]`: each token's position.
    pub positions: &'a Tensor,
    /// `f32 [head_dim / 2]` (see [`rope_inv_freq`](crate::gpu::rope_inv_freq)).
    pub inv_freq: &'a Tensor,
    /// Query and key heads RMS-normed first with `f32 [2, head_dim]` weights and this eps
    /// (Qwen3, Gemma 3).
    pub qk_norm: Option<(&'a Tensor, f32)>,
    /// `u32 [T]`: each token's cache slot (block * block_size + offset; `u32::MAX` skips it).
    pub slot_mapping: &'a Tensor,
    /// The paged pools.
    pub cache: &'a KvCache,
    /// The layer of `cache` written.
    pub layer: usize,
    /// Query heads of the row.
    pub heads: usize,
    /// Which pairs of a head rotate together.
    pub mode: RopeMode,
}

impl<'a> RopeCacheArgs<'a> {
    /// Checks the inputs' shapes for `t` tokens; returns the layer's K and V pools.
    pub(crate) fn check(&self, t: usize) -> Result<&'a (DeviceBuffer, DeviceBuffer), GpuError> {
        let hd = self.cache.shape().head_dim;
        self.positions.expect("rope_cache positions", Elem::U32, &[t])?;
        self.slot_mapping.expect("rope_cache slot_mapping", Elem::U32, &[t])?;
        self.inv_freq.expect("rope_cache inv_freq", Elem::F32, &[hd / 2])?;
        if let Some((weights, _)) = self.qk_norm {
            weights.expect("rope_cache qk_norm", Elem::F32, &[2, hd])?;
        }
        self.cache.layer(self.layer)
    }

    /// True when the rotation can run in a projection's epilogue, which sees a few neighbouring
    /// columns at a time: interleaved pairs, no Q/K norms (those need the whole head).
    pub(super) fn rotates_neighbours(&self) -> bool {
        self.mode == RopeMode::Interleaved && self.qk_norm.is_none()
    }

    /// Columns of the Q/K/V row: the query heads, then the key heads, then the value heads.
    pub(crate) fn row_width(&self) -> usize {
        let s = self.cache.shape();
        (self.heads + 2 * s.num_kv_heads) * s.head_dim
    }
}
impl Step<'_> {
    /// RoPE and the paged K/V write on `qkv: f32 [T, (heads + 2 kv_heads) * head_dim]` (query
    /// heads, key heads, value heads): the query heads rotated in place, the key heads rotated
    /// and written with the value heads into the layer of the cache `rope` names, at its slots
    /// (see [`RopeCacheArgs`]); with Q/K norms, the query and key heads RMS-normed first.
    pub fn rope_cache(&mut self, qkv: &Tensor, rope: &RopeCacheArgs) -> Result<(), GpuError> {
        let s = rope.cache.shape();
        let (t, width) = dims2(qkv, "rope_cache qkv")?;
        let hd = s.head_dim;
        qkv.expect("rope_cache qkv", Elem::F32, &[t, rope.row_width()])?;
        let (kc, vc) = rope.check(t)?;
        let variant = KernelVariant::RopeCache { kv: rope.cache.format(), qk_norm: rope.qk_norm.is_some() };
        let params = RopeCacheParams {
            tokens: u(t),
            heads: u(rope.heads),
            kv_heads: u(s.num_kv_heads),
            hd: u(hd),
            half_split: u32::from(rope.mode == RopeMode::HalfSplit),
            eps: rope.qk_norm.map_or(0.0, |(_, eps)| eps),
        };
        let grid = self.grid_1d(variant, t * width / hd);
        let bindings = [
            Binding::tensor("QKV", qkv),
            Binding::tensor("POSITIONS", rope.positions),
            Binding::tensor("INV_FREQ", rope.inv_freq),
            Binding::tensor("SLOT_MAPPING", rope.slot_mapping),
            Binding::buffer("K_CACHE", kc),
            Binding::buffer("V_CACHE", vc),
        ]
        .into_iter()
        .chain(rope.qk_norm.map(|(w, _)| Binding::tensor("QK_NORM", w)));
        self.dispatch(variant, &params, bindings, grid)
    }
}
