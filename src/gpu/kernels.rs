//! One typed function per kernel, recorded into a [`Step`]. Each checks its shapes and returns
//! [`GpuError::Shape`] on a mismatch instead of dispatching.

use super::GpuError;
use super::bind_cache::Binding;
use super::caps::Capabilities;
use super::kv_cache::{KvCache, KvCacheShape};
use super::options::GemvRows;
use super::resource::DeviceBuffer;
use super::shader::params::{
    AttentionParams, ElementwiseParams, EmbedParams, LinearParams, RmsNormParams, RopeCacheParams, TopKParams,
};
use super::shader::{
    AttentionPath, GateActivation, KernelVariant, LINEAR_SEQ_ROW_TILES, LinearEpilogue, LinearPath,
    LinearPrologue, WeightSource, XLoad, attention_group,
};
use super::step::Step;
use super::tensor::{Elem, Tensor};
use super::weights::Weight;
use crate::dtype::DType;

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
    /// `f32 [head_dim / 2]` (see [`rope_inv_freq`](super::rope_inv_freq)).
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
    fn check(&self, t: usize) -> Result<&'a (DeviceBuffer, DeviceBuffer), GpuError> {
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
    fn rotates_neighbours(&self) -> bool {
        self.mode == RopeMode::Interleaved && self.qk_norm.is_none()
    }

    /// Columns of the Q/K/V row: the query heads, then the key heads, then the value heads.
    fn row_width(&self) -> usize {
        let s = self.cache.shape();
        (self.heads + 2 * s.num_kv_heads) * s.head_dim
    }
}

/// What a linear kernel does with its outputs, with the tensors the epilogue reads.
#[derive(Debug, Clone, Copy)]
enum Epilogue<'a> {
    Store,
    Accumulate,
    Bias(&'a Tensor),
    Gated(GateActivation),
    RopeCache(&'a RopeCacheArgs<'a>, Option<&'a Tensor>),
}

impl Epilogue<'_> {
    fn kind(self) -> LinearEpilogue {
        match self {
            Self::Store => LinearEpilogue::Store,
            Self::Accumulate => LinearEpilogue::Accumulate,
            Self::Bias(_) => LinearEpilogue::Bias,
            Self::Gated(act) => LinearEpilogue::Gated(act),
            Self::RopeCache(rope, bias) => {
                LinearEpilogue::RopeCache { kv: rope.cache.format(), bias: bias.is_some() }
            }
        }
    }
}

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
pub(super) fn attention_bindings(
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
pub(super) fn attention_params(
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

/// What a linear layer reads: a tensor as stored, or a tensor RMS-normed on the way in.
#[derive(Debug, Clone, Copy)]
pub enum LinearInput<'a> {
    /// `x` as stored.
    Plain(&'a Tensor),
    /// `x / sqrt(mean(x²) + eps) * weight` per row, computed by the linear kernel itself with
    /// the bits of [`Step::rms_norm`]: the RMSNorm fused into the projection it feeds.
    RmsNormed {
        /// The rows to norm, f32 `[M, K]`.
        x: &'a Tensor,
        /// The norm's weight, f32 `[K]`.
        weight: &'a Tensor,
        /// Added to the mean square.
        eps: f32,
    },
}

impl<'a> LinearInput<'a> {
    /// `x` RMS-normed with `weight` and `eps` on the way into the linear.
    pub fn rms_normed(x: &'a Tensor, weight: &'a Tensor, eps: f32) -> Self {
        Self::RmsNormed { x, weight, eps }
    }

    fn x(self) -> &'a Tensor {
        match self {
            Self::Plain(x) | Self::RmsNormed { x, .. } => x,
        }
    }
}

impl<'a> From<&'a Tensor> for LinearInput<'a> {
    fn from(x: &'a Tensor) -> Self {
        Self::Plain(x)
    }
}

/// Batch sizes (rows) that between them take every linear kernel and tile a device uses
/// ([`Capabilities::linear_kernel`]), the smallest batch of each: a warm-up step of each builds
/// every linear pipeline.
pub fn linear_warm_up_rows(caps: &Capabilities) -> Vec<usize> {
    let seq = LINEAR_SEQ_ROW_TILES[LINEAR_SEQ_ROW_TILES.len() - 1];
    let gemv = GemvRows::MAX_READS * caps.gemv_max_rows();
    // Past the GEMV's batches, the GEMM's tiles from the smallest up.
    let largest = (gemv + caps.gemm_max_rows()).max(seq) as usize;
    // The kernel only changes with the batch.
    (1..=largest).filter(|&m| m == 1 || caps.linear_kernel(m) != caps.linear_kernel(m - 1)).collect()
}

/// The linear variant a device runs for `m` rows of `input` through `w`.
fn linear_variant(
    caps: &Capabilities,
    input: LinearInput<'_>,
    w: &Weight,
    m: usize,
    epilogue: LinearEpilogue,
) -> KernelVariant {
    let prologue = match input {
        LinearInput::Plain(_) => LinearPrologue::Plain,
        LinearInput::RmsNormed { .. } => LinearPrologue::RmsNorm,
    };
    linear_variant_of(caps, w.dtype(), w.source(), w.cols(), m, prologue, epilogue)
}

/// The linear variant a device runs for `m` rows through a weight of `dtype` with rows of `k`
/// weights read from `source`: what [`Step`]'s linear calls dispatch, for callers that have
/// only a model's shapes (`examples/kernel_spirv.rs`, the kernel cost report).
pub fn linear_variant_of(
    caps: &Capabilities,
    dtype: DType,
    source: WeightSource,
    k: usize,
    m: usize,
    prologue: LinearPrologue,
    epilogue: LinearEpilogue,
) -> KernelVariant {
    let kernel = caps.linear_kernel(m);
    KernelVariant::Linear {
        dtype,
        source,
        path: caps.linear_path(),
        kernel,
        x_load: XLoad::of(caps.linear_path(), k),
        tree: caps.linear_tree(kernel),
        prologue,
        epilogue,
    }
}

/// Checks a projection of `m` rows into columns `col0..` of a `width`-wide Q/K/V row for the
/// rotary epilogue, which takes whole pairs of a head; returns the layer's K and V pools.
fn check_fused_rope<'c>(
    rope: &RopeCacheArgs<'c>,
    w: &Weight,
    m: usize,
    width: usize,
    col0: usize,
) -> Result<&'c (DeviceBuffer, DeviceBuffer), GpuError> {
    let pools = rope.check(m)?;
    if width != rope.row_width() {
        return Err(GpuError::Shape(format!(
            "linear_rope_cache: a row of {width} columns is not the Q/K/V row of {}",
            rope.row_width()
        )));
    }
    if !rope.rotates_neighbours() {
        return Err(GpuError::Shape("linear_rope_cache: only interleaved RoPE without Q/K norms".into()));
    }
    if splits_pairs(w, col0) {
        return Err(GpuError::Shape(format!(
            "linear_rope_cache: {} at column {col0} splits a pair",
            w.name()
        )));
    }
    Ok(pools)
}

/// True when `w` written from column `col0` would cut a column pair between two parts.
fn splits_pairs(w: &Weight, col0: usize) -> bool {
    !col0.is_multiple_of(2) || w.parts.iter().any(|p| !p.row0.is_multiple_of(2) || !p.rows.is_multiple_of(2))
}

fn u(n: usize) -> u32 {
    n as u32
}

/// Checks a linear layer's shapes, `x: [M, K]` through `w` into columns `col0..` of
/// `out: f32 [M, width]` with `epilogue` (gated weights for the gated epilogues only); returns
/// `(M, K, width)`.
fn check_linear_shapes(
    x: &Tensor,
    w: &Weight,
    out: &Tensor,
    col0: usize,
    epilogue: LinearEpilogue,
) -> Result<(usize, usize, usize), GpuError> {
    let (m, k) = dims2(x, "linear x")?;
    if k != w.cols() {
        return Err(GpuError::Shape(format!("linear: x has {k} columns, {} has {}", w.name(), w.cols())));
    }
    if w.is_gated() != epilogue.is_gated() {
        return Err(GpuError::Shape(format!(
            "linear: {} is {}gated, the {epilogue:?} epilogue needs the other kind",
            w.name(),
            if w.is_gated() { "" } else { "not " }
        )));
    }
    let (om, width) = dims2(out, "linear out")?;
    if om != m || out.elem() != Elem::F32 || col0 + w.rows() > width {
        return Err(GpuError::Shape(format!(
            "linear out: {:?} {:?} cannot hold [{m}, {}] at column {col0}",
            out.elem(),
            out.shape(),
            w.rows()
        )));
    }
    Ok((m, k, width))
}

/// What a linear layer's epilogue binds beyond x, the weights and the output (a bias first,
/// then the rotary epilogue's tensors and pools), and the head counts its parameters carry.
struct EpilogueBindings {
    bindings: [Option<Binding>; 6],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl EpilogueBindings {
    /// Checks and collects `epi`'s tensors for `m` rows through `w` into columns `col0..` of
    /// a `width`-wide output.
    fn of(epi: Epilogue<'_>, w: &Weight, m: usize, width: usize, col0: usize) -> Result<Self, GpuError> {
        let mut out = Self { bindings: Default::default(), heads: 0, kv_heads: 0, head_dim: 0 };
        if let Epilogue::Bias(bias) | Epilogue::RopeCache(_, Some(bias)) = epi {
            bias.expect("linear bias", Elem::F32, &[w.rows()])?;
            out.bindings[0] = Some(Binding::tensor("BIAS", bias));
        }
        if let Epilogue::RopeCache(rope, _) = epi {
            let (kc, vc) = check_fused_rope(rope, w, m, width, col0)?;
            let s = rope.cache.shape();
            (out.heads, out.kv_heads, out.head_dim) = (rope.heads, s.num_kv_heads, s.head_dim);
            let [_, rotary @ ..] = &mut out.bindings;
            *rotary = [
                Binding::tensor("POSITIONS", rope.positions),
                Binding::tensor("INV_FREQ", rope.inv_freq),
                Binding::tensor("SLOT_MAPPING", rope.slot_mapping),
                Binding::buffer("K_CACHE", kc),
                Binding::buffer("V_CACHE", vc),
            ]
            .map(Some);
        }
        Ok(out)
    }
}

/// The grid of `variant` (a linear on `path`) over a weight part of `rows` rows and
/// `row_groups` workgroups of rows, and the columns of workgroups it folds into the grid's x
/// (K-split workgroups past `max_dim` wrap into z; 0 on the sequential path).
fn linear_grid(
    path: LinearPath,
    variant: &KernelVariant,
    rows: usize,
    row_groups: usize,
    max_dim: usize,
) -> ([u32; 3], usize) {
    match path {
        LinearPath::Sequential { .. } => {
            let per_group = (variant.workgroup_size() * variant.columns_tile()) as usize;
            ([u(rows.div_ceil(per_group)), u(row_groups), 1], 0)
        }
        LinearPath::KSplit => {
            let col_groups = rows.div_ceil(variant.columns_tile() as usize);
            let nx = col_groups.min(max_dim);
            ([u(nx), u(row_groups), u(col_groups.div_ceil(nx))], nx)
        }
    }
}

fn dims2(t: &Tensor, what: &str) -> Result<(usize, usize), GpuError> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => Err(GpuError::Shape(format!("{what}: expected 2 dimensions, got {:?}", t.shape()))),
    }
}

impl Step<'_> {
    /// `out[t, :] = table[ids[t], :]` for `ids: u32 [T]`, `out: f32 [T, D]`, a `[vocab, D]` table
    /// of any weight type. Ids outside the table leave their row untouched.
    pub fn embed(&mut self, ids: &Tensor, table: &Weight, out: &Tensor) -> Result<(), GpuError> {
        let t = ids.len();
        ids.expect("embed ids", Elem::U32, &[t])?;
        out.expect("embed out", Elem::F32, &[t, table.cols()])?;
        let variant = KernelVariant::Embed { dtype: table.dtype(), source: table.source() };
        for part in &table.parts {
            let params =
                EmbedParams { tokens: u(t), d: u(table.cols()), row0: u(part.row0), rows: u(part.rows) };
            let grid = self.grid_1d(variant, t * table.cols());
            let bindings =
                [Binding::tensor("IDS", ids), Binding::new("W", &part.words), Binding::tensor("OUT", out)];
            self.dispatch(variant, &params, bindings, grid)?;
        }
        Ok(())
    }

    /// `out = x / sqrt(mean(x²) + eps) * weight` per row; `x`, `out`: f32 `[R, D]`, `weight`: `[D]`.
    pub fn rms_norm(&mut self, x: &Tensor, weight: &Tensor, eps: f32, out: &Tensor) -> Result<(), GpuError> {
        self.record_rms_norm(x, weight, eps, out, false)
    }

    /// `out += x / sqrt(mean(x²) + eps) * weight` per row (Gemma's sandwich: a projection's
    /// output normed and added to the residual stream) in one dispatch, with the bits of
    /// [`Self::rms_norm`] into a scratch tensor then [`Self::add_in_place`] of it into `out`;
    /// `x`, `out`: f32 `[R, D]` (distinct tensors), `weight`: `[D]`.
    pub fn rms_norm_add(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.record_rms_norm(x, weight, eps, out, true)
    }

    fn record_rms_norm(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &Tensor,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        let (rows, d) = dims2(x, "rms_norm x")?;
        weight.expect("rms_norm weight", Elem::F32, &[d])?;
        out.expect("rms_norm out", Elem::F32, &[rows, d])?;
        let params = RmsNormParams { rows: u(rows), d: u(d), eps, accumulate: u32::from(accumulate) };
        let grid = self.grid_groups(rows);
        let bindings =
            [Binding::tensor("X", x), Binding::tensor("WEIGHT", weight), Binding::tensor("OUT", out)];
        self.dispatch(KernelVariant::RmsNorm, &params, bindings, grid)
    }

    /// The input of the linear layers that `rms_norm(x, weight, eps)` feeds: where the adapter
    /// fuses norms into the row tile these rows take ([`Capabilities::fuses_norms`]), `x`
    /// normed on the way into each of them, recording nothing; elsewhere the norm recorded
    /// into `out` (shaped as `x`) and `out` returned. Either way the linears get the same bits.
    pub fn rms_norm_input<'a>(
        &mut self,
        x: &'a Tensor,
        weight: &'a Tensor,
        eps: f32,
        out: &'a Tensor,
    ) -> Result<LinearInput<'a>, GpuError> {
        let (rows, _) = dims2(x, "rms_norm x")?;
        let caps = self.ctx.capabilities();
        if caps.fuses_norms(caps.linear_kernel(rows)) {
            return Ok(LinearInput::rms_normed(x, weight, eps));
        }
        self.rms_norm(x, weight, eps, out)?;
        Ok(LinearInput::Plain(out))
    }

    /// `out = x · wᵀ` for `x: f32 [M, K]` (as stored or [`LinearInput::RmsNormed`]), `w: [N, K]`
    /// of any weight type, `out: f32 [M, N]`. Every output is one fma chain over k ascending, so
    /// a row's bits never depend on M.
    pub fn linear<'a>(
        &mut self,
        x: impl Into<LinearInput<'a>>,
        w: &Weight,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.record_linear(x.into(), w, out, 0, Epilogue::Store)
    }

    /// `out += x · wᵀ` (a projection and the residual add after it in one dispatch); the same
    /// bits as [`Self::linear`] then [`Self::add_in_place`].
    pub fn linear_add<'a>(
        &mut self,
        x: impl Into<LinearInput<'a>>,
        w: &Weight,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.record_linear(x.into(), w, out, 0, Epilogue::Accumulate)
    }

    /// `out[:, col0..col0 + N] = x · wᵀ (+ bias)` for `out: f32 [M, W]` and `bias: f32 [N]`: a
    /// projection writing its slice of a wider output (Q, K and V into one row).
    pub fn linear_into<'a>(
        &mut self,
        x: impl Into<LinearInput<'a>>,
        w: &Weight,
        bias: Option<&Tensor>,
        out: &Tensor,
        col0: usize,
    ) -> Result<(), GpuError> {
        let epilogue = bias.map_or(Epilogue::Store, Epilogue::Bias);
        self.record_linear(x.into(), w, out, col0, epilogue)
    }

    /// `out = act(x · gateᵀ) * (x · upᵀ)` for a gated weight (uploaded with
    /// [`GpuContext::upload_gated_weight`](super::GpuContext::upload_gated_weight)), `out: f32
    /// [M, N]`: the gated MLP's two projections and its activation in one dispatch, with the
    /// same bits as two [`Self::linear`]s and [`Self::gated_mul`].
    pub fn linear_gated<'a>(
        &mut self,
        x: impl Into<LinearInput<'a>>,
        w: &Weight,
        act: GateActivation,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.record_linear(x.into(), w, out, 0, Epilogue::Gated(act))
    }

    /// True when the model's Q/K/V projection `w` (with its `bias`, written from column `col0`)
    /// takes RoPE and the K/V write in its epilogue: the adapter fuses them
    /// ([`Capabilities::fuses_rope`]) and [`Self::can_fuse_rope_cache`].
    pub fn fuses_rope_cache(
        &self,
        x: LinearInput<'_>,
        w: &Weight,
        bias: Option<&Tensor>,
        col0: usize,
        rope: &RopeCacheArgs,
    ) -> bool {
        self.ctx.capabilities().fuses_rope() && self.can_fuse_rope_cache(x, w, bias, col0, rope)
    }

    /// True when [`Self::linear_rope_cache`] can run this projection here: the rotation pairs
    /// neighbouring columns (interleaved, no Q/K norms), the weight's parts split on whole pairs
    /// and the kernel's storage buffers fit the device's limit (8 plain, 9 with a bias or a fused
    /// norm, 10 with both: WebGPU's default limit is 8).
    pub fn can_fuse_rope_cache(
        &self,
        x: LinearInput<'_>,
        w: &Weight,
        bias: Option<&Tensor>,
        col0: usize,
        rope: &RopeCacheArgs,
    ) -> bool {
        let caps = self.ctx.capabilities();
        let epilogue = LinearEpilogue::RopeCache { kv: rope.cache.format(), bias: bias.is_some() };
        let variant = linear_variant(caps, x, w, 1, epilogue);
        rope.rotates_neighbours()
            && !splits_pairs(w, col0)
            && variant
                .reflect()
                .is_ok_and(|r| r.storage_buffers <= caps.limits.max_storage_buffers_per_shader_stage)
    }

    /// `out[:, col0..col0 + N] = x · wᵀ (+ bias)` for a Q/K/V projection writing its columns of
    /// the row [`Self::rope_cache`] takes, with that kernel's work in the epilogue: query columns
    /// stored rotated, key and value columns stored as projected and written (keys rotated) into
    /// the cache. The same bits as [`Self::linear_into`] then [`Self::rope_cache`]; only
    /// interleaved RoPE without Q/K norms ([`Self::can_fuse_rope_cache`] says when).
    pub fn linear_rope_cache<'a>(
        &mut self,
        x: impl Into<LinearInput<'a>>,
        w: &Weight,
        bias: Option<&Tensor>,
        out: &Tensor,
        col0: usize,
        rope: &RopeCacheArgs,
    ) -> Result<(), GpuError> {
        self.record_linear(x.into(), w, out, col0, Epilogue::RopeCache(rope, bias))
    }

    fn record_linear(
        &mut self,
        input: LinearInput<'_>,
        w: &Weight,
        out: &Tensor,
        col0: usize,
        epi: Epilogue<'_>,
    ) -> Result<(), GpuError> {
        let epilogue = epi.kind();
        let x = input.x();
        let (m, k, width) = check_linear_shapes(x, w, out, col0, epilogue)?;
        let epi = EpilogueBindings::of(epi, w, m, width, col0)?;
        let (norm, eps) = match input {
            LinearInput::Plain(_) => (None, 0.0),
            LinearInput::RmsNormed { weight, eps, .. } => {
                weight.expect("linear norm weight", Elem::F32, &[k])?;
                (Some(weight), eps)
            }
        };
        if m == 0 {
            return Ok(());
        }
        let caps = self.ctx.capabilities();
        let variant = linear_variant(caps, input, w, m, epilogue);
        let row_groups = m.div_ceil(variant.rows_per_workgroup() as usize);
        let max_dim = caps.limits.max_compute_workgroups_per_dimension as usize;
        if row_groups > max_dim {
            return Err(GpuError::TooLarge(format!("linear: {m} rows exceed the dispatch limit")));
        }
        for part in &w.parts {
            let (grid, nx) = linear_grid(caps.linear_path(), &variant, part.rows, row_groups, max_dim);
            let params = LinearParams {
                m: u(m),
                n_part: u(part.rows),
                k: u(k),
                ldy: u(width),
                n0: u(part.row0),
                nx: u(nx),
                y0: u(col0),
                eps,
                heads: u(epi.heads),
                kv_heads: u(epi.kv_heads),
                hd: u(epi.head_dim),
            };
            let bindings =
                [Binding::tensor("X", x), Binding::new("W", &part.words), Binding::tensor("Y", out)]
                    .into_iter()
                    .chain(epi.bindings.iter().flatten().cloned())
                    .chain(norm.map(|g| Binding::tensor("NORM", g)));
            self.dispatch(variant, &params, bindings, grid)?;
        }
        Ok(())
    }

    /// Records elementwise kernel `variant` over `n` values (rows of `d`), `value` its scalar
    /// parameter: one invocation a value.
    fn elementwise<const N: usize>(
        &mut self,
        variant: KernelVariant,
        n: usize,
        d: usize,
        value: f32,
        bindings: [Binding; N],
    ) -> Result<(), GpuError> {
        let grid = self.grid_1d(variant, n);
        self.dispatch(variant, &ElementwiseParams { n: u(n), d: u(d), value }, bindings, grid)
    }

    /// `out = act(gate) * up` elementwise (SwiGLU with SiLU, Gemma's GeGLU with PyTorch's
    /// tanh-approximated GELU); all three f32 of the same shape.
    pub fn gated_mul(
        &mut self,
        act: GateActivation,
        gate: &Tensor,
        up: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let variant = KernelVariant::GatedMul { act };
        up.expect("gated mul up", Elem::F32, gate.shape())?;
        out.expect("gated mul out", Elem::F32, gate.shape())?;
        let bindings =
            [Binding::tensor("GATE", gate), Binding::tensor("UP", up), Binding::tensor("OUT", out)];
        self.elementwise(variant, gate.len(), 1, 0.0, bindings)
    }

    /// gpt-oss's clamped SwiGLU elementwise: `out = (clamp(up, ±limit) + 1) · g · σ(1.702 g)`
    /// with `g = min(gate, limit)`; all three f32 of the same shape.
    pub fn swiglu_clamped(
        &mut self,
        limit: f32,
        gate: &Tensor,
        up: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        if !(limit.is_finite() && limit > 0.0) {
            return Err(GpuError::Shape(format!("swiglu_clamped: the limit must be positive, not {limit}")));
        }
        up.expect("swiglu up", Elem::F32, gate.shape())?;
        out.expect("swiglu out", Elem::F32, gate.shape())?;
        let bindings =
            [Binding::tensor("GATE", gate), Binding::tensor("UP", up), Binding::tensor("OUT", out)];
        self.elementwise(KernelVariant::SwigluClamped, gate.len(), 1, limit, bindings)
    }

    /// `x *= factor` elementwise, in place.
    pub fn scale(&mut self, x: &Tensor, factor: f32) -> Result<(), GpuError> {
        self.elementwise(KernelVariant::Scale, x.len(), 1, factor, [Binding::tensor("X", x)])
    }

    /// `x = cap * tanh(x / cap)` elementwise, in place (Gemma 2's final-logit soft-capping).
    pub fn softcap(&mut self, x: &Tensor, cap: f32) -> Result<(), GpuError> {
        if cap <= 0.0 || cap.is_nan() {
            return Err(GpuError::Shape(format!("softcap: the cap must be positive, not {cap}")));
        }
        self.elementwise(KernelVariant::Softcap, x.len(), 1, cap, [Binding::tensor("X", x)])
    }

    /// `x += y` elementwise (the residual add); both f32 of the same shape.
    pub fn add_in_place(&mut self, x: &Tensor, y: &Tensor) -> Result<(), GpuError> {
        x.expect("add x", Elem::F32, y.shape())?;
        let bindings = [Binding::tensor("X", x), Binding::tensor("Y", y)];
        self.elementwise(KernelVariant::AddInPlace, x.len(), 1, 0.0, bindings)
    }

    /// `out[r, :] = src[indices[r], :]` for `src: f32 [T, D]`, `indices: u32 [R]`, `out: [R, D]`
    /// (e.g. the rows that need logits, before the LM head).
    pub fn gather_rows(&mut self, src: &Tensor, indices: &Tensor, out: &Tensor) -> Result<(), GpuError> {
        let (_, d) = dims2(src, "gather_rows src")?;
        let r = indices.len();
        indices.expect("gather_rows indices", Elem::U32, &[r])?;
        out.expect("gather_rows out", Elem::F32, &[r, d])?;
        let bindings =
            [Binding::tensor("SRC", src), Binding::tensor("INDICES", indices), Binding::tensor("OUT", out)];
        self.elementwise(KernelVariant::GatherRows, r * d, d, 0.0, bindings)
    }

    /// `out[indices[r], :] = src[r, :] * scales[r]` for `src: f32 [R, D]`, `indices: u32 [R]`,
    /// `scales: u32 [R]` (f32 bits), `out: f32 [N, D]`: an expert's output rows, weighted by
    /// the router, put at their tokens' slots. Rows `indices` does not name keep their values.
    pub fn scatter_rows(
        &mut self,
        src: &Tensor,
        indices: &Tensor,
        scales: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let (r, d) = dims2(src, "scatter_rows src")?;
        let (_, out_d) = dims2(out, "scatter_rows out")?;
        indices.expect("scatter_rows indices", Elem::U32, &[r])?;
        scales.expect("scatter_rows scales", Elem::U32, &[r])?;
        if out_d != d {
            return Err(GpuError::Shape(format!("scatter_rows: rows of {d} into rows of {out_d}")));
        }
        let bindings = [
            Binding::tensor("SRC", src),
            Binding::tensor("INDICES", indices),
            Binding::tensor("SCALES", scales),
            Binding::tensor("OUT", out),
        ];
        self.elementwise(KernelVariant::ScatterRows, r * d, d, 0.0, bindings)
    }

    /// `x += y[0] + y[1] + ... + y[k - 1]` for `x: f32 [T, D]` and `y: f32 [k * T, D]`
    /// (slot-major: block `j` holds every token's `j`-th weighted expert output), each token's
    /// sum in slot order.
    pub fn moe_combine(&mut self, x: &Tensor, y: &Tensor, k: usize) -> Result<(), GpuError> {
        let (t, d) = dims2(x, "moe_combine x")?;
        y.expect("moe_combine y", Elem::F32, &[k * t, d])?;
        if k == 0 {
            return Err(GpuError::Shape("moe_combine: no expert slots".into()));
        }
        let bindings = [Binding::tensor("X", x), Binding::tensor("Y", y)];
        self.elementwise(KernelVariant::MoeCombine, t * d, k, 0.0, bindings)
    }

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

    /// The `k` largest logits of each row of `logits: f32 [R, V]`, largest first with ties to
    /// the lower index, into `values: f32 [R, k]` and `ids: u32 [R, k]`. NaN is never chosen.
    pub fn top_k(
        &mut self,
        logits: &Tensor,
        k: usize,
        values: &Tensor,
        ids: &Tensor,
    ) -> Result<(), GpuError> {
        let (rows, v) = dims2(logits, "top_k logits")?;
        if k == 0 || k > v {
            return Err(GpuError::Shape(format!("top_k: k = {k} for rows of {v}")));
        }
        values.expect("top_k values", Elem::F32, &[rows, k])?;
        ids.expect("top_k ids", Elem::U32, &[rows, k])?;
        let grid = self.grid_groups(rows);
        let bindings = [
            Binding::tensor("LOGITS", logits),
            Binding::tensor("VALUES", values),
            Binding::tensor("IDS", ids),
        ];
        self.dispatch(KernelVariant::TopK, &TopKParams { rows: u(rows), v: u(v), k: u(k) }, bindings, grid)
    }

    /// The index of the largest logit of each row (ties to the lower index) into `ids: u32 [R, 1]`,
    /// with its value into `values: f32 [R, 1]`.
    pub fn argmax(&mut self, logits: &Tensor, values: &Tensor, ids: &Tensor) -> Result<(), GpuError> {
        self.top_k(logits, 1, values, ids)
    }
}
