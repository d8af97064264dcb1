//! Paged attention: the batch layout, the bindings every attention kernel shares, and the
//! choice among per-query, subgroup, split-KV and flash kernels
//! ([`Capabilities::attention_path_for`](crate::gpu::Capabilities::attention_path_for));
//! flash attention's own grid and constants are in [`crate::gpu::attention_flash`].

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::kv_cache::{KvCache, KvCacheShape};
use crate::gpu::resource::DeviceBuffer;
use crate::gpu::shader::params::AttentionParams;
use crate::gpu::shader::{AttentionPath, KernelVariant, attention_group};
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::{dims2, u};

/// The varlen batch layout paged attention reads, as u32 tensors.
#[derive(Debug, Clone)]
pub struct AttentionBatch {
    /// `[B + 1]`: first query token of each sequence in the flattened batch, then the total.
    pub query_start_loc: Tensor,
    /// `[B]`: tokens of each sequence after this step (cached prefix + new tokens).
    pub seq_lens: Tensor,
    /// `[B, max_blocks]`: physical KV block of each logical block of each sequence.
    pub block_table: Tensor,
}

impl AttentionBatch {
    /// Checks the three tensors agree on a batch of B > 0 sequences; returns `(B,
    /// max_blocks)`.
    fn check(&self) -> Result<(usize, usize), GpuError> {
        let b = self.seq_lens.len();
        let (tb, max_blocks) = dims2(&self.block_table, "block_table")?;
        self.seq_lens.expect("seq_lens", Elem::U32, &[b])?;
        self.query_start_loc.expect("query_start_loc", Elem::U32, &[b + 1])?;
        self.block_table.expect("block_table", Elem::U32, &[b, max_blocks])?;
        if b == 0 || tb != b || max_blocks == 0 {
            return Err(GpuError::Shape(format!(
                "attention: batch of {b} sequences with a {tb} x {max_blocks} block table"
            )));
        }
        Ok((b, max_blocks))
    }
}

/// Checks attention's queries `q: f32 [T, >= heads * head_dim]` and `out: f32 [T, heads *
/// head_dim]` against a cache of shape `s` (`heads` a multiple of its KV heads); returns `(T,
/// q's row stride)`.
fn check_attention_q(
    q: &Tensor,
    out: &Tensor,
    heads: usize,
    s: KvCacheShape,
) -> Result<(usize, usize), GpuError> {
    let (t, q_stride) = dims2(q, "attention q")?;
    if q.elem() != Elem::F32 || q_stride < heads * s.head_dim {
        return Err(GpuError::Shape(format!(
            "attention q: {:?} {:?} holds no {heads} heads of {}",
            q.elem(),
            q.shape(),
            s.head_dim
        )));
    }
    out.expect("attention out", Elem::F32, &[t, heads * s.head_dim])?;
    if heads == 0 || !heads.is_multiple_of(s.num_kv_heads) {
        return Err(GpuError::Shape(format!(
            "attention: {heads} heads is not a multiple of {} KV heads",
            s.num_kv_heads
        )));
    }
    Ok((t, q_stride))
}

/// The bindings every attention kernel takes: the queries, `layer`'s K and V caches, the
/// batch's block table, lengths and query starts, the output, and the sinks where given.
pub(crate) fn attention_bindings(
    q: &Tensor,
    (kc, vc): &(DeviceBuffer, DeviceBuffer),
    batch: &AttentionBatch,
    sinks: Option<&Tensor>,
    out: &Tensor,
) -> impl Iterator<Item = Binding> {
    [
        Binding::tensor("Q", q),
        Binding::buffer("K_CACHE", kc),
        Binding::buffer("V_CACHE", vc),
        Binding::tensor("BLOCK_TABLE", &batch.block_table),
        Binding::tensor("SEQ_LENS", &batch.seq_lens),
        Binding::tensor("QUERY_START", &batch.query_start_loc),
        Binding::tensor("OUT", out),
    ]
    .into_iter()
    .chain(sinks.map(|s| Binding::tensor("SINKS", s)))
}

/// Checks paged attention's inputs (queries `q`, `out`, the batch, `spec`) against `cache`;
/// returns the kernels' parameters.
pub(crate) fn attention_params(
    q: &Tensor,
    cache: &KvCache,
    batch: &AttentionBatch,
    spec: &AttentionSpec,
    out: &Tensor,
) -> Result<AttentionParams, GpuError> {
    let heads = spec.heads;
    let s = cache.shape();
    let (t, q_stride) = check_attention_q(q, out, heads, s)?;
    let (b, max_blocks) = batch.check()?;
    if spec.window == Some(0) || spec.softcap.is_some_and(|c| c <= 0.0) {
        return Err(GpuError::Shape(format!("attention: window and soft-cap must be positive: {spec:?}")));
    }
    Ok(AttentionParams {
        tokens: u(t),
        heads: u(heads),
        kv_heads: u(s.num_kv_heads),
        block_size: u(s.block_size),
        max_blocks: u(max_blocks),
        num_seqs: u(b),
        scale: spec.scale,
        window: spec.window.map_or(0, u),
        softcap: spec.softcap.unwrap_or(0.0),
        q_stride: u(q_stride),
        head_dim: u(s.head_dim),
        qk_eps: 0.0,
    })
}

/// How one layer attends: its query heads, the scale of its scores, its sliding window and
/// the soft-cap of its scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSpec {
    /// Query heads (a multiple of the cache's KV heads: GQA).
    pub heads: usize,
    /// Scores are `q·k * scale`.
    pub scale: f32,
    /// Keys a query sees, itself included (a sliding-window layer); `None` sees them all.
    pub window: Option<usize>,
    /// Scores become `softcap * tanh(score / softcap)` (Gemma 2).
    pub softcap: Option<f32>,
}

impl AttentionSpec {
    /// Plain causal attention of `heads` heads of `head_dim`, scaled by `1 / sqrt(head_dim)`.
    pub fn causal(heads: usize, head_dim: usize) -> Self {
        Self { heads, scale: 1.0 / (head_dim as f32).sqrt(), window: None, softcap: None }
    }
}
impl Step<'_> {
    /// Paged attention: `out: f32 [T, heads * head_dim]` over layer `layer` of `cache` for the
    /// varlen `batch`, the queries in the first `heads * head_dim` columns of `q: f32 [T, W]`
    /// (the fused projection's row, or just the queries); causal inside the new tokens, full
    /// over the cached prefix, GQA when `heads` is a multiple of the cache's KV heads, scores
    /// scaled, windowed and soft-capped as `spec` says.
    pub fn paged_attention(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        layer: usize,
        batch: &AttentionBatch,
        spec: &AttentionSpec,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.paged_attention_sinks(q, cache, layer, batch, spec, None, out)
    }

    /// [`Self::paged_attention`] with each head's attention sink, `sinks: f32 [heads]` (a
    /// logit in the softmax's denominator with no value: gpt-oss; the formula is in
    /// `shaders/sink_logit.wgsl`).
    #[allow(clippy::too_many_arguments)]
    pub fn paged_attention_sinks(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        layer: usize,
        batch: &AttentionBatch,
        spec: &AttentionSpec,
        sinks: Option<&Tensor>,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let heads = spec.heads;
        if let Some(sinks) = sinks {
            sinks.expect("attention sinks", Elem::F32, &[heads])?;
        }
        let s = cache.shape();
        let params = attention_params(q, cache, batch, spec, out)?;
        let (t, max_blocks) = (params.tokens as usize, params.max_blocks as usize);
        let walk = spec.window.map_or(max_blocks * s.block_size, |w| w.min(max_blocks * s.block_size));
        let path = self.ctx.capabilities().attention_path_for(walk);
        if let AttentionPath::Flash = path {
            return self.flash_attention(q, cache, layer, batch, spec, sinks, out);
        }
        let group = match path {
            AttentionPath::PerQuerySubgroup => attention_group(u(heads / s.num_kv_heads)),
            _ => 1,
        };
        let tree = self.ctx.capabilities().attention_tree(path);
        let (kv, head_dim, with_sinks) = (cache.format(), u(s.head_dim), sinks.is_some());
        let variant = KernelVariant::Attention { kv, head_dim, path, group, tree, sinks: with_sinks };
        let grid = match path {
            AttentionPath::PerQuery => self.grid_1d(variant, t * heads),
            AttentionPath::PerQuerySubgroup => self.grid_groups(t * heads / group as usize),
            _ => self.grid_groups(t * heads),
        };
        let bindings = attention_bindings(q, cache.layer(layer)?, batch, sinks, out);
        self.dispatch(variant, &params, bindings, grid)
    }
}
