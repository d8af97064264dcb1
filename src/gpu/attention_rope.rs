//! Flash attention that does the rope_cache kernel's work for its own token
//! (`shaders/flash_qk_rope.wgsl`): the decode step of a model with Q/K norms (Qwen3, Gemma 3)
//! in one dispatch where it took two, as the projection's rotary epilogue does for the others.
//!
//! - **What it does.** Each workgroup (flash's: one query token, `GH` query heads of one KV
//!   head) RMS-norms and rotates its query heads as it loads them, and its token's key head as
//!   it writes it, with the value head, into the cache, then walks the keys as flash attention
//!   does. The norm and the rotation are `shaders/qk_norm_rms.wgsl` and `shaders/rope_head.wgsl`,
//!   the rope_cache kernel's own, so a key in the cache and a query have the same bits whichever
//!   kernel turned them (the invariance rule: a decode step's keys are read by later prefill
//!   chunks and the other way round).
//! - **When.** Only when every sequence of the step has one new token: a workgroup reads no key
//!   another workgroup writes in the same dispatch (the other query groups of its KV head write
//!   the same bits to the same words). Prefill steps keep the rope_cache dispatch. And only where
//!   the adapter attends with flash ([`Capabilities::attention_path_for`](super::Capabilities::attention_path_for))
//!   and the kernel's 11 storage buffers fit the device's limit (WebGPU's default is 8).
//! - **Grid, constants, workgroup memory.** Flash attention's ([`super::attention_flash`]).

use super::GpuError;
use super::attention_flash::flash_group;
use super::bind_cache::Binding;
use super::kernels::{
    AttentionBatch, AttentionSpec, RopeCacheArgs, RopeMode, attention_bindings, attention_params, u,
};
use super::shader::{AttentionPath, KernelVariant};
use super::step::Step;
use super::tensor::{Elem, Tensor};

/// The kernel of a flash attention with RoPE over `rope`'s cache.
fn variant(rope: &RopeCacheArgs) -> KernelVariant {
    let s = rope.cache.shape();
    let heads_per_kv = u(rope.heads / s.num_kv_heads.max(1));
    let head_dim = u(s.head_dim);
    let group = flash_group(heads_per_kv, head_dim);
    let half_split = rope.mode == RopeMode::HalfSplit;
    KernelVariant::FlashRope { kv: rope.cache.format(), head_dim, group, half_split }
}

impl Step<'_> {
    /// True when [`Self::flash_rope_attention`] can take `rope`'s work and the attention of a
    /// step of `tokens` tokens over `batch`: a model with Q/K norms, one new token a sequence,
    /// flash attention on this adapter for the layer's walk, and the kernel's storage buffers
    /// within the device's limit.
    pub fn fuses_rope_attention(
        &self,
        rope: &RopeCacheArgs,
        batch: &AttentionBatch,
        spec: &AttentionSpec,
        tokens: usize,
    ) -> bool {
        let caps = self.ctx.capabilities();
        let s = rope.cache.shape();
        let max_blocks = batch.block_table.shape().get(1).copied().unwrap_or(0);
        let walk = spec.window.map_or(max_blocks * s.block_size, |w| w.min(max_blocks * s.block_size));
        rope.qk_norm.is_some()
            && tokens == batch.seq_lens.len()
            && caps.attention_path_for(walk) == AttentionPath::Flash
            && variant(rope)
                .reflect()
                .is_ok_and(|r| r.storage_buffers <= caps.limits.max_storage_buffers_per_shader_stage)
    }

    /// [`Self::rope_cache`] then [`Self::paged_attention`] in one dispatch, for a step whose
    /// every sequence has one new token: `qkv: f32 [T, (heads + 2 kv_heads) * head_dim]` as
    /// projected (left so), the queries and key normed and rotated by `rope` (which must have
    /// Q/K norms), the key and value written into its cache, `out: f32 [T, heads * head_dim]`.
    /// The same bits as the two dispatches; [`Self::fuses_rope_attention`] says when it runs.
    pub fn flash_rope_attention(
        &mut self,
        qkv: &Tensor,
        rope: &RopeCacheArgs,
        batch: &AttentionBatch,
        spec: &AttentionSpec,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        if !self.ctx.capabilities().supports_flash_attention() {
            return Err(GpuError::Unsupported("flash attention with RoPE needs subgroups of 8 lanes".into()));
        }
        let t = qkv.shape().first().copied().unwrap_or(0);
        qkv.expect("flash_rope_attention qkv", Elem::F32, &[t, rope.row_width()])?;
        let pools = rope.check(t)?;
        let Some((norm, eps)) = rope.qk_norm else {
            return Err(GpuError::Shape("flash_rope_attention: only for Q/K-normed heads".into()));
        };
        if spec.heads != rope.heads {
            return Err(GpuError::Shape(format!(
                "flash_rope_attention: {} heads attended, {} in the row",
                spec.heads, rope.heads
            )));
        }
        let mut params = attention_params(qkv, rope.cache, batch, spec, out)?;
        if params.num_seqs != params.tokens {
            return Err(GpuError::Shape(format!(
                "flash_rope_attention: {} tokens in {} sequences, not one each",
                params.tokens, params.num_seqs
            )));
        }
        params.qk_eps = eps;
        let variant = variant(rope);
        let KernelVariant::FlashRope { group, .. } = variant else {
            return Err(GpuError::Unsupported("flash attention with RoPE variant".into()));
        };
        let grid = self.grid_groups(t * rope.heads / group as usize);
        let bindings = attention_bindings(qkv, pools, batch, None, out).chain([
            Binding::tensor("POSITIONS", rope.positions),
            Binding::tensor("INV_FREQ", rope.inv_freq),
            Binding::tensor("SLOT_MAPPING", rope.slot_mapping),
            Binding::tensor("QK_NORM", norm),
        ]);
        self.dispatch(variant, &params, bindings, grid)
    }
}
