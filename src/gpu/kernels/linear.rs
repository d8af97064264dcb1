//! The linear kernels (`y = x · Wᵀ` with a prologue and an epilogue): which variant a batch
//! takes on this adapter ([`linear_variant_of`]: path, kernel and row tile, weight source,
//! activation loads, tree), its grid over the weight's parts, and the epilogues' bindings.
//! The shader side (files, constants, workgroup sizes) is in [`crate::gpu::shader`].

use crate::dtype::DType;
use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::caps::Capabilities;
use crate::gpu::options::GemvRows;
use crate::gpu::resource::DeviceBuffer;
use crate::gpu::shader::params::LinearParams;
use crate::gpu::shader::{
    GateActivation, KernelVariant, LINEAR_SEQ_ROW_TILES, LinearEpilogue, LinearKernel, LinearPath,
    LinearPrologue, WeightSource, XLoad,
};
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};
use crate::gpu::weights::Weight;

use super::rope::RopeCacheArgs;
use super::{dims2, u};

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
    /// Gemma's sandwich before the RMSNorm: `x' = x + rms_norm(o) * post` per row, read as
    /// `rms_norm(x') * pre` and written to `x_out` (the residual stream's other buffer), with
    /// the bits of [`Step::rms_norm_add`] then [`Self::RmsNormed`]. See
    /// [`Step::sandwich_input`](crate::gpu::Step::sandwich_input).
    Sandwich(SandwichInput<'a>),
    /// `x` as stored, row `i` through the rows of expert `ids[i]` of the stacked weight the
    /// linear's weight is a view of ([`Weight::expert_words`]): llama.cpp's `mul_mat_id`, a
    /// token's pair with one of its experts a row, with the bits that row has through that
    /// expert's own view. One-row kernels, the stored, bias or gated epilogue: stacked `[E, N]`
    /// biases add each row's expert's row.
    ExpertRows {
        /// The rows, f32 `[M, K]`.
        x: &'a Tensor,
        /// Each row's expert, u32 `[M]`.
        ids: &'a Tensor,
    },
}

/// The tensors of [`LinearInput::Sandwich`].
#[derive(Debug, Clone, Copy)]
pub struct SandwichInput<'a> {
    /// The residual stream, f32 `[M, K]`.
    pub x: &'a Tensor,
    /// The previous projection's output, f32 `[M, K]`.
    pub o: &'a Tensor,
    /// The post-norm's weight, f32 `[K]`.
    pub post: &'a Tensor,
    /// The pre-norm's weight (the linear's input norm), f32 `[K]`.
    pub pre: &'a Tensor,
    /// Added to both norms' mean squares.
    pub eps: f32,
    /// Where `x'` goes, f32 `[M, K]`: another buffer than `x` and `o`.
    pub x_out: &'a Tensor,
}

impl<'a> LinearInput<'a> {
    /// `x` RMS-normed with `weight` and `eps` on the way into the linear.
    pub fn rms_normed(x: &'a Tensor, weight: &'a Tensor, eps: f32) -> Self {
        Self::RmsNormed { x, weight, eps }
    }

    fn x(self) -> &'a Tensor {
        match self {
            Self::Plain(x)
            | Self::RmsNormed { x, .. }
            | Self::Sandwich(SandwichInput { x, .. })
            | Self::ExpertRows { x, .. } => x,
        }
    }
}

impl<'a> From<&'a Tensor> for LinearInput<'a> {
    fn from(x: &'a Tensor) -> Self {
        Self::Plain(x)
    }
}

impl SandwichInput<'_> {
    /// Checks the tensors for `m` rows of `k` columns; returns the norms' `eps`.
    fn check(&self, m: usize, k: usize) -> Result<f32, GpuError> {
        for (what, t) in [("o", self.o), ("x_out", self.x_out)] {
            t.expect(&format!("linear sandwich {what}"), Elem::F32, &[m, k])?;
        }
        for (what, w) in [("post", self.post), ("pre", self.pre)] {
            w.expect(&format!("linear sandwich {what}"), Elem::F32, &[k])?;
        }
        let id = self.x_out.buffer.id();
        if id == self.x.buffer.id() || id == self.o.buffer.id() {
            return Err(GpuError::Shape("linear sandwich: x_out shares a buffer with x or o".into()));
        }
        Ok(self.eps)
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
        LinearInput::Sandwich(_) => LinearPrologue::SandwichNorm,
        LinearInput::ExpertRows { .. } => LinearPrologue::ExpertRows,
    };
    // each row its own expert's weight rows: a tile of one row
    let m = if prologue == LinearPrologue::ExpertRows { 1 } else { m };
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

/// Checks a linear layer's shapes, `x: [M, K]` through `w` into columns `col0..` of
/// `out: f32 [M, width]` with `epilogue` (gated weights for the gated epilogues only); returns
/// `(M, K, width)`.
/// Checks a linear by ids ([`LinearInput::ExpertRows`]): `ids` names one expert of `w`'s stack
/// a row, the variant takes one row a tile, the epilogue stores, adds a bias or gates. Returns the ids and
/// the words between two experts.
fn check_expert_rows<'a>(
    ids: &'a Tensor,
    w: &Weight,
    m: usize,
    epilogue: LinearEpilogue,
    variant: &KernelVariant,
) -> Result<(&'a Tensor, usize), GpuError> {
    ids.expect("linear expert ids", Elem::U32, &[m])?;
    let stride = w.expert_words().ok_or_else(|| {
        GpuError::Shape(format!("linear by expert ids: {} is not a view of a stacked weight", w.name()))
    })?;
    if !matches!(epilogue, LinearEpilogue::Store | LinearEpilogue::Bias | LinearEpilogue::Gated(_)) {
        return Err(GpuError::Shape(format!("linear by expert ids: no {epilogue:?} epilogue")));
    }
    if variant.rows_per_workgroup() != 1
        || matches!(variant, KernelVariant::Linear { kernel: LinearKernel::Coop(_), .. })
    {
        return Err(GpuError::Unsupported("linear by expert ids: no one-row kernel on this path".into()));
    }
    Ok((ids, stride))
}

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
/// then the rotary epilogue's tensors and pools), the head counts its parameters carry, and
/// where the bias epilogue's row starts (`b0`) and the values between two experts' rows by id.
struct EpilogueBindings {
    bindings: [Option<Binding>; 6],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    b0: usize,
    b_stride: usize,
}

impl EpilogueBindings {
    /// Checks and collects `epi`'s tensors for `m` rows through `w` into columns `col0..` of
    /// a `width`-wide output, its rows by expert id when `by_ids`.
    fn of(
        epi: Epilogue<'_>,
        w: &Weight,
        m: usize,
        width: usize,
        col0: usize,
        by_ids: bool,
    ) -> Result<Self, GpuError> {
        let mut out =
            Self { bindings: Default::default(), heads: 0, kv_heads: 0, head_dim: 0, b0: 0, b_stride: 0 };
        if let Epilogue::Bias(bias) = epi {
            (out.b0, out.b_stride) = bias_rows(bias, w, by_ids)?;
            out.bindings[0] = Some(Binding::tensor("BIAS", bias));
        }
        if let Epilogue::RopeCache(_, Some(bias)) = epi {
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

/// Checks the bias epilogue's `bias` for `w`: `[N]` of its own, or stacked `[E, N]` biases of
/// the experts `w`'s stack holds (gpt-oss's), whose row the weight's expert names (by ids: the
/// row each row of x names). Returns the first value of its row and the values between two
/// experts' rows by id.
fn bias_rows(bias: &Tensor, w: &Weight, by_ids: bool) -> Result<(usize, usize), GpuError> {
    let n = w.rows();
    let [experts, len] = *bias.shape() else {
        return bias.expect("linear bias", Elem::F32, &[n]).map(|()| (0, 0));
    };
    bias.expect("linear bias", Elem::F32, &[experts, n])?;
    match (w.expert(), by_ids) {
        (Some(_), true) => Ok((0, n)),
        (Some(e), false) if e < experts => Ok((e * n, 0)),
        _ => Err(GpuError::Shape(format!(
            "linear bias: {experts} experts' biases of {len} for {}, which is not one of theirs",
            w.name()
        ))),
    }
}

/// The grid of `variant` (a linear on `path`) over a weight part of `rows` rows and
/// `row_groups` workgroups of rows, and the columns of workgroups it folds into the grid's x
/// (K-split and cooperative workgroups past `max_dim` wrap into z; 0 on the sequential path).
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
        LinearPath::KSplit | LinearPath::Coop { .. } => {
            let col_groups = rows.div_ceil(variant.columns_tile() as usize);
            let nx = col_groups.min(max_dim);
            ([u(nx), u(row_groups), u(col_groups.div_ceil(nx))], nx)
        }
    }
}
impl Step<'_> {
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
    /// projection writing its slice of a wider output (Q, K and V into one row). For `w` a view
    /// of one expert of a stack, `bias` may be the stack's `f32 [E, N]` biases: the expert's row
    /// is added (by ids, [`LinearInput::ExpertRows`], each row's expert's row).
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
    /// [`GpuContext::upload_gated_weight`](crate::gpu::GpuContext::upload_gated_weight)), `out: f32
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
        let by_id_rows = matches!(input, LinearInput::ExpertRows { .. });
        let epi = EpilogueBindings::of(epi, w, m, width, col0, by_id_rows)?;
        let (norm, eps) = match input {
            LinearInput::Plain(_) | LinearInput::ExpertRows { .. } => (None, 0.0),
            LinearInput::RmsNormed { weight, eps, .. } => {
                weight.expect("linear norm weight", Elem::F32, &[k])?;
                (Some(weight), eps)
            }
            LinearInput::Sandwich(s) => (Some(s.pre), s.check(m, k)?),
        };
        let sandwich = match input {
            LinearInput::Sandwich(s) => {
                [Binding::tensor("O", s.o), Binding::tensor("POST", s.post), Binding::tensor("XOUT", s.x_out)]
                    .map(Some)
            }
            _ => Default::default(),
        };
        if m == 0 {
            return Ok(());
        }
        let caps = self.ctx.capabilities();
        let variant = linear_variant(caps, input, w, m, epilogue);
        let by_ids = match input {
            LinearInput::ExpertRows { ids, .. } => Some(check_expert_rows(ids, w, m, epilogue, &variant)?),
            _ => None,
        };
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
                w0: u(if by_ids.is_some() { 0 } else { w.word0() }),
                w_stride: u(by_ids.map_or(0, |(_, stride)| stride)),
                b0: u(epi.b0),
                b_stride: u(epi.b_stride),
            };
            let bindings =
                [Binding::tensor("X", x), Binding::new("W", &part.words), Binding::tensor("Y", out)]
                    .into_iter()
                    .chain(epi.bindings.iter().flatten().cloned())
                    .chain(norm.map(|g| Binding::tensor("NORM", g)))
                    .chain(by_ids.map(|(ids, _)| Binding::tensor("IDS", ids)))
                    .chain(sandwich.iter().flatten().cloned());
            self.dispatch(variant, &params, bindings, grid)?;
        }
        Ok(())
    }
}
