//! Flash-decoding paged attention (`shaders/attention_flash.wgsl`): what the kernel is built
//! with and how it is dispatched.
//!
//! - **Workgroup.** [`FLASH_WG`](super::FLASH_WG) = 64 invocations for one query token and `GH` query heads of
//!   one KV head ([`flash_group`]), so every key and value is read once for the group: 8 key
//!   lanes ([`FLASH_KEY_LANES`](super::FLASH_KEY_LANES)) of 8 dimension lanes ([`ATTENTION_DOT_LANES`]). Dimension
//!   lane `dl` holds pairs `dl, dl + 8, ...` of the heads; key lane `kl` walks keys
//!   `kl, kl + 8, ...` of the context (8 partitions fixed by the keys' positions), an online
//!   softmax step a key; a key's q·k is summed in the order of every attention kernel (pair `d`
//!   into partial `d % 8`, the butterfly 4, 2, 1), across the dimension lanes by subgroup
//!   shuffles. The 8 key lanes' states are combined in a fixed tree in workgroup memory.
//! - **Grid.** `tokens * heads / GH` workgroups, flattened over x and y.
//! - **Constants.** `HD`, `GH` (compile time: the registers hold `GH` heads' queries and
//!   outputs), `DOT_LANES`; loop bounds (keys, block size, window, soft-cap) are uniforms
//!   ([`AttentionParams`]).
//! - **Workgroup memory.** The key lanes' maxima and sums of the `GH` heads, and one head's
//!   weighted values (naga's layout of them: [`Reflection::workgroup_bytes`](super::shader::reflect::Reflection::workgroup_bytes)).
//! - **Sinks.** As every attention kernel, each head ends with `sink_finish` over the combined
//!   maximum and sum: `shaders/sink_logit.wgsl` for the variant with sinks (one logit per
//!   query head, f32 `[heads]`, gpt-oss), `shaders/sink_none.wgsl` without.
//! - **Decisions.** Needs subgroups of at least 8 lanes ([`Capabilities::supports_flash_attention`](super::Capabilities::supports_flash_attention)); the capability layer
//!   makes it the default attention of non-CPU adapters that have them
//!   ([`Capabilities::attention_path_for`](super::Capabilities::attention_path_for)). The
//!   group is the largest divisor of the query heads per KV head up to [`flash_max_group`],
//!   which keeps `GH` times a lane's pairs at most [`FLASH_GROUP_PAIRS`] (registers).
//!
//! Which keys a lane walks and the combine's tree depend only on the query's position and the
//! model's shapes, so a token's output has the same bits alone, batched, in prefill chunks of
//! any size, or decoding.

use super::GpuError;
use super::kernels::{AttentionBatch, AttentionSpec, attention_bindings, attention_params};
use super::kv_cache::KvCache;
use super::shader::{ATTENTION_DOT_LANES, AttentionPath, FLASH_MAX_GROUP, KernelVariant, Tree};
use super::step::Step;
use super::tensor::{Elem, Tensor};

/// Most dimension pairs of all its heads' queries (and as many of outputs) one lane holds.
pub const FLASH_GROUP_PAIRS: u32 = 32;

/// Dimension pairs of one head a lane holds for heads of `head_dim`.
fn lane_pairs(head_dim: u32) -> u32 {
    (head_dim / 2).div_ceil(ATTENTION_DOT_LANES).max(1)
}

/// Most query heads a flash workgroup holds for heads of `head_dim`: 8 for heads of 64, 4 for
/// 128, 2 for 256.
pub fn flash_max_group(head_dim: u32) -> u32 {
    (FLASH_GROUP_PAIRS / lane_pairs(head_dim)).clamp(1, FLASH_MAX_GROUP)
}

/// Query heads a flash workgroup computes together for `heads_per_kv` query heads a KV head of
/// `head_dim`: the largest divisor of `heads_per_kv` up to [`flash_max_group`], so a group
/// never straddles two KV heads.
pub fn flash_group(heads_per_kv: u32, head_dim: u32) -> u32 {
    let max = flash_max_group(head_dim).min(heads_per_kv.max(1));
    (1..=max).rev().find(|g| heads_per_kv.is_multiple_of(*g)).unwrap_or(1)
}

/// The flash variant for a cache of `kv` heads of `head_dim`, `heads_per_kv` query heads a KV
/// head, with or without sinks.
pub fn variant(kv: super::KvFormat, head_dim: u32, heads_per_kv: u32, sinks: bool) -> KernelVariant {
    KernelVariant::Attention {
        kv,
        head_dim,
        path: AttentionPath::Flash,
        group: flash_group(heads_per_kv, head_dim),
        tree: Tree::Shared,
        sinks,
    }
}

impl Step<'_> {
    /// Paged attention by the flash kernel, whatever the adapter's default: as
    /// [`Step::paged_attention`], plus optional attention `sinks: f32 [heads]` (one logit per
    /// query head that joins each query's softmax without a value). An
    /// [`GpuError::Unsupported`] error on an adapter without subgroups of at least 8 lanes.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attention(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        layer: usize,
        batch: &AttentionBatch,
        spec: &AttentionSpec,
        sinks: Option<&Tensor>,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        if !self.ctx.capabilities().supports_flash_attention() {
            return Err(GpuError::Unsupported(format!(
                "flash attention needs subgroups of at least {ATTENTION_DOT_LANES} lanes"
            )));
        }
        let params = attention_params(q, cache, batch, spec, out)?;
        if let Some(s) = sinks {
            s.expect("attention sinks", Elem::F32, &[spec.heads])?;
        }
        let heads_per_kv = params.heads / params.kv_heads;
        let head_dim = cache.shape().head_dim as u32;
        let variant = variant(cache.format(), head_dim, heads_per_kv, sinks.is_some());
        let KernelVariant::Attention { group, .. } = variant else {
            return Err(GpuError::Unsupported("flash attention variant".into()));
        };
        let grid = self.grid_groups((params.tokens * params.heads / group) as usize);
        let bindings = attention_bindings(q, cache.layer(layer)?, batch, sinks, out);
        self.dispatch(variant, &params, bindings, grid)
    }
}

#[cfg(test)]
mod tests {
    use super::{flash_group, flash_max_group, variant};
    use crate::gpu::KvFormat;
    use crate::gpu::{AttentionPath, AttentionStrategy, Capabilities, FeatureMask};

    /// An adapter with subgroups of `sizes` lanes (none where `None`), forced to `forced`.
    fn caps(is_cpu: bool, sizes: Option<(u32, u32)>, forced: Option<AttentionStrategy>) -> Capabilities {
        Capabilities {
            adapter_name: "test".into(),
            backend: "Vulkan".into(),
            driver: String::new(),
            device_type: if is_cpu { "Cpu" } else { "DiscreteGpu" }.into(),
            is_cpu,
            shader_f16: true,
            subgroup: sizes.is_some(),
            subgroup_sizes: sizes.unwrap_or((0, 0)),
            timestamp_query: false,
            masked: FeatureMask::default(),
            webgpu_default_limits: false,
            limits: wgpu::Limits::default(),
            forced_linear: None,
            forced_attention: forced,
            forced_norm: None,
            forced_rope: None,
            forced_gemm_rows: None,
            forced_gemv_rows: None,
            forced_weight_source: None,
            forced_submit: None,
            profile_kernels: false,
            coop: Err("a hand-made adapter".into()),
        }
    }

    #[test]
    fn gpus_with_subgroups_of_8_lanes_or_more_take_flash_by_default() {
        let flash = AttentionPath::Flash;
        assert_eq!(caps(false, Some((32, 32)), None).attention_path(), flash);
        assert_eq!(caps(false, Some((8, 64)), None).attention_path(), flash);
        assert_eq!(caps(false, Some((4, 4)), None).attention_path(), AttentionPath::SplitKv);
        assert_eq!(caps(false, None, None).attention_path(), AttentionPath::SplitKv);
        let forced = Some(AttentionStrategy::Flash);
        assert_eq!(caps(false, None, forced).attention_path(), AttentionPath::SplitKv);
        let split = Some(AttentionStrategy::SplitKv);
        assert_eq!(caps(false, Some((32, 32)), split).attention_path(), AttentionPath::SplitKv);
        // Lavapipe keeps its per-query kernel unless flash is forced.
        assert_eq!(caps(true, Some((8, 8)), None).attention_path(), AttentionPath::PerQuerySubgroup);
        assert_eq!(caps(true, Some((8, 8)), forced).attention_path(), flash);
        assert_eq!(caps(true, Some((8, 8)), forced).attention_path_for(40_000), flash);
    }

    #[test]
    fn groups_fit_the_registers_and_divide_the_heads_of_a_kv_head() {
        let max: Vec<u32> = [64, 72, 80, 96, 128, 256].into_iter().map(flash_max_group).collect();
        assert_eq!(max, [8, 6, 6, 5, 4, 2]);
        // SmolLM2 (3), Llama-3.2-1B (4), Qwen2.5-0.5B (7), gpt-oss (8), 16 per KV head.
        let hd64: Vec<u32> = [1, 3, 4, 7, 8, 16].into_iter().map(|r| flash_group(r, 64)).collect();
        assert_eq!(hd64, [1, 3, 4, 7, 8, 8]);
        let hd128: Vec<u32> = [1, 3, 4, 6, 8].into_iter().map(|r| flash_group(r, 128)).collect();
        assert_eq!(hd128, [1, 3, 4, 3, 4]);
        assert_eq!(flash_group(4, 256), 2);
    }

    #[test]
    fn workgroup_memory_is_the_lanes_states_and_one_heads_values() {
        assert_eq!(
            variant(KvFormat::F32, 64, 8, false).reflect().unwrap().workgroup_bytes,
            4 * 2 * 8 * 8 + 8 * 8 * 32
        );
        assert_eq!(
            variant(KvFormat::F32, 256, 2, true).reflect().unwrap().workgroup_bytes,
            4 * 2 * 8 * 2 + 8 * 8 * 128
        );
    }
}
