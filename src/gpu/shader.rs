//! Shader composition: the one place that turns a kernel variant into WGSL source.
//!
//! Every variant pagoda can run is a [`KernelVariant`]; [`KernelVariant::source`] composes its
//! WGSL from the files in `shaders/` (a kernel body, a weight-format or KV-format snippet) after
//! a header of constants injected from Rust. The runtime builds pipelines from it,
//! `tests/shader_portability.rs` validates and translates every entry of [`all_variants`], and
//! `tests/shader_contract.rs` checks each one against its Rust side.
//!
//! Each kernel family's module says what its variants are made of, in one place (the
//! `Family` it implements, `shader/family.rs`: label, workgroup size, parameter block, files and
//! injected constants, as ggml-webgpu's `get_*_pipeline` does): `linear` (with the epilogues in
//! `linear_epilogue`), `attention`, `rope`, `norm`, `embed`, `elementwise`, `lora`,
//! `top_k` and `moe_route`; the weight formats' files are in `weights`, the reduction trees' in `tree`, and
//! the variants the tests build in `catalog`. `KernelVariant::family` names each variant's.
//!
//! # The contract between a kernel and its caller
//!
//! - **Parameters.** Each kernel reads one uniform `P` whose struct is declared in its WGSL file
//!   and, with the same name and fields in the same order, in [`params`] (e.g.
//!   [`params::RmsNormParams`]). [`KernelVariant::params`] says which one a variant takes.
//! - **Binding slots.** A shader declares each resource as
//!   `@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;`; the composer numbers them
//!   in declaration order (`SLOT_X`, from 0) and naga's reflection of the composed module
//!   ([`reflect::Reflection`], kept with the pipeline) gives Rust each binding by the name of
//!   its variable: a kernel binds `("X", buffer)` pairs, and a name the shader does not declare,
//!   or one it declares and the kernel leaves out, is a [`GpuError::Binding`](crate::gpu::GpuError).
//! - **Workgroup size.** [`KernelVariant::workgroup_size`] (one of [`WORKGROUP_SIZE`],
//!   [`TOP_K_WG`], [`LINEAR_WG`], [`LINEAR_GEMM_WG`], [`LINEAR_SEQ_WG`],
//!   [`ATTENTION_SPLIT_WG`], [`ATTENTION_DOT_LANES`], [`LINEAR_COOP_WG`], [`LORA_GROUPS_WG`]) is
//!   injected as `WG`, which the shader uses in `@workgroup_size(WG)`, and the dispatch sizes
//!   its grid with the same constant.
//! - **Specialisation.** `HD`, `MAX_BS`, `CHUNK`, `DOT_LANES` and `GH` (attention), `PART_KEYS`
//!   (split-KV's largest partition), `TM`, `TN`, `GATES`, `BANDS` and `TILE`
//!   (linear), `MT`, `NT`, `KT` and `CS` (the cooperative-matrix linear's tile and matrix
//!   size: [`CoopTile`], [`CoopShape`]), `NORM_WG` and `NORM_ROWS` (the RMSNorm scales'
//!   partial sums, in rms_norm and the norming linears), `TREE_LANES` (the lanes a subgroup
//!   tree's shuffles span: [`Tree`]), `W_TEXELS` (a weight texture's row, for the kernels that
//!   read weights from textures: [`WeightSource`]).
//! - **Workgroup memory.** What the shader's `var<workgroup>`s take, sized by those constants,
//!   is what naga's layouter makes of them ([`reflect::Reflection::workgroup_bytes`]); the
//!   adapter choices (the GEMM tile) are checked against the device's limit with it.
//!
//! Every composed shader starts with a comment naming its files, then its injected constants,
//! each with the Rust item it comes from, e.g. for RMSNorm:
//!
//! ```text
//! // Kernel `rms_norm`, composed by pagoda's src/gpu/shader/compose.rs: the constants below,
//! // each injected from the Rust item named in its comment, then these files of shaders/:
//! // tree_shared.wgsl, rms_scale.wgsl, rms_norm.wgsl.
//! const WG: u32 = 64u; // shader::WORKGROUP_SIZE
//! const NORM_WG: u32 = 64u; // shader::WORKGROUP_SIZE (rms_norm's)
//! const NORM_ROWS: u32 = 1u; // KernelVariant::rows_per_workgroup
//! const SLOT_P: u32 = 0u; // binding 0 of `P` in declaration order
//! const SLOT_X: u32 = 1u; // binding 1 of `X` in declaration order
//! ...
//! ```
//!
//! # A weight format's lane partial sum
//!
//! The K-split linear kernels (the decode GEMV, `linear_ksplit.wgsl`, and the prefill GEMM,
//! `linear_gemm.wgsl`) cut a row's K into runs of 16 weights; lane `l` of the GEMV and lane `l` of
//! every GEMM band add the partial sums of runs `l, l + LINEAR_WG, ...` in order, and one fixed
//! tree adds the lanes'. What a run is belongs to the weight format alone, in its
//! `shaders/wfmt_<type>.wgsl` (or `wrun_groups.wgsl`, two groups of 8 in k order, for the formats
//! without one of their own): `run_quads(r)` (the k of the run's four quads of activations),
//! `lane_run(rb, r)` (its weights decoded once: quants, scales, minimums) and
//! `lane_partial(run, x)` (its sum against one row's sixteen activations). Both kernels call the
//! same three functions, so a format's arithmetic, and so its bits, is written once, and a
//! prefill row has the decode row's bits. Changing one format's mat-vec touches its
//! `wfmt_<type>.wgsl`, and `src/gpu/shader/weights.rs`'s `format_files` only when it starts or
//! stops sharing a file (`wrun_groups.wgsl`, `wbits.wgsl`, ...); `tests/kernels_reference.rs`
//! checks it against the CPU reference and the GEMM's bits against the GEMV's.
//!
//! # Row and column markers of the linear kernels
//!
//! The linear kernels keep one accumulator per (row, column) of their tile in plain registers.
//! A line whose first word is `ROWS` is repeated for rows `0..TM`, with `RR` and the identifier
//! suffix `_R` replaced by the row number; a line (or repeated row) whose first word is `COLS`
//! is repeated likewise for columns `0..TN` (`CC`, `_C`). With `TM = 2` and `TN = 2`,
//!
//! ```text
//! ROWS let xr_R = x_row(m0, RRu);
//! ROWS COLS var acc_R_C = 0.0;
//! ```
//!
//! becomes
//!
//! ```text
//! let xr_0 = x_row(m0, 0u);
//! let xr_1 = x_row(m0, 1u);
//! var acc_0_0 = 0.0;
//! var acc_0_1 = 0.0;
//! var acc_1_0 = 0.0;
//! var acc_1_1 = 0.0;
//! ```
//!
//! A line (or repeated row) whose first word is `PAIRS` is repeated for the column pairs
//! `(2p, 2p + 1)` instead (`CC` and `_C` the first column, `DD` and `_D` the second): the
//! rotary epilogue's.
//!
//! Before that, a line whose first word is `GATED` is kept (without the word) only in the
//! variants of a gated weight ([`LinearEpilogue::Gated`]), one whose first word is `PAIRED`
//! only in those of the rotary epilogue ([`LinearEpilogue::RopeCache`]), and one whose first
//! word is `PLAIN` only in the others (store, accumulate, bias).
//!

mod attention;
mod catalog;
mod compose;
mod elementwise;
mod embed;
mod family;
mod linear;
mod linear_epilogue;
mod lora;
mod moe_route;
mod norm;
pub mod params;
pub mod reflect;
mod rope;
mod top_k;
mod tree;
mod unroll;
mod weights;

pub use super::linear_coop::{CoopElem, CoopShape, CoopTile, LINEAR_COOP_WG};
pub use attention::{
    ATTENTION_DOT_LANES, ATTENTION_MAX_GROUP, ATTENTION_SPLIT_CHUNK, ATTENTION_SPLIT_WG, AttentionPath,
    FLASH_KEY_LANES, FLASH_MAX_GROUP, FLASH_WG, KV_PARTITION_TOKENS, KvFormat, MAX_BLOCK_SIZE,
    attention_group,
};
pub use catalog::{SUBGROUP_SIZES, TESTED_HEAD_DIMS, all_variants, coop_variants};
pub use elementwise::GateActivation;
pub use linear::{
    LINEAR_GEMM_BAND_ROWS, LINEAR_GEMM_BANDS, LINEAR_GEMM_WG, LINEAR_GEMV_ROWS, LINEAR_KSPLIT_COLS,
    LINEAR_SEQ_COLS, LINEAR_SEQ_ROW_TILES, LINEAR_SEQ_WG, LINEAR_WG, LinearKernel, LinearPath,
    LinearPrologue, XLoad,
};
pub use linear_epilogue::LinearEpilogue;
pub use lora::LORA_GROUPS_WG;
pub use top_k::TOP_K_WG;
pub use tree::{TREE_LANES, Tree};
pub use weights::{WEIGHT_DTYPES, WEIGHT_TEXELS, WeightSource};

use crate::dtype::DType;
use family::Family;
use params::ParamsLayout;

/// Invocations per workgroup of every kernel but top-k, linear and the split-KV and subgroup
/// attention kernels: the elementwise kernels, embedding, RoPE + cache (one invocation per
/// head), per-query attention (one invocation per (token, head)) and RMSNorm (one workgroup
/// per row).
pub const WORKGROUP_SIZE: u32 = 64;

/// One specialisation of one kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelVariant {
    /// Embedding rows gathered from a weight table of this type.
    Embed {
        /// Table element type.
        dtype: DType,
        /// Where the table's words are read from.
        source: WeightSource,
    },
    /// RMSNorm.
    RmsNorm,
    /// `act(a) * b`.
    GatedMul {
        /// The activation.
        act: GateActivation,
    },
    /// gpt-oss's clamped SwiGLU of a gate and an up projection (`swiglu_clamped.wgsl`).
    SwigluClamped,
    /// `a *= s`.
    Scale,
    /// `a = c * tanh(a / c)`.
    Softcap,
    /// `a += b`.
    AddInPlace,
    /// Rows of a matrix picked by an index list.
    GatherRows,
    /// Rows of a matrix, each scaled, put at the rows an index list names (an expert's
    /// outputs, weighted, into their tokens' slots).
    ScatterRows,
    /// Token ids copied between buffers by (source, destination) index pairs.
    CopyIds,
    /// `x += Σ_j y_j` over a token's expert slots, in slot order.
    MoeCombine,
    /// Batched LoRA shrink: each row times its adapter's `A` for a run of targets
    /// (`lora_shrink.wgsl`).
    LoraShrink,
    /// [`Self::LoraShrink`] over groups of up to four rows of one adapter and four columns an
    /// invocation, `x` and `A` read as 16-byte units (`lora_shrink_groups.wgsl`: `K` a multiple
    /// of 4).
    LoraShrinkGroups,
    /// Batched LoRA expand: each row's shrunk values times its adapter's `B`, scaled and added,
    /// over groups of up to four rows of one adapter and four columns an invocation
    /// (`lora_expand_groups.wgsl`).
    LoraExpandGroups,
    /// Gemma's sandwich between two linears: `x += rms_norm(o) * post`, then
    /// `h = rms_norm(x) * pre` (`rms_norm_sandwich.wgsl`: `src/gpu/norm_sandwich.rs`).
    RmsNormSandwich,
    /// Top-k (and argmax as k = 1) per row.
    TopK,
    /// A mixture-of-experts router's choice per token: its experts and their weights
    /// (`moe_route.wgsl`).
    MoeRoute,
    /// `y = x · Wᵀ`.
    Linear {
        /// Weight element type.
        dtype: DType,
        /// Where the weight's words are read from.
        source: WeightSource,
        /// Reduction strategy.
        path: LinearPath,
        /// The kernel and its tile (one of the path's [`LinearPath::kernels`]): on the K-split
        /// path the GEMV for decode batches, the GEMM for prefill.
        kernel: LinearKernel,
        /// How it loads its activations ([`XLoad::Words`] on the sequential path).
        x_load: XLoad,
        /// How the K-split GEMV adds its lanes' sums, and a fused RMSNorm its squares; on the
        /// sequential path over subgroups, the subgroup's width its lanes and norm read
        /// ([`LinearPath::tree`]; [`Tree::Shared`] for the GEMM tiles).
        tree: Tree,
        /// What it does to its input rows first.
        prologue: LinearPrologue,
        /// What it does with each output.
        epilogue: LinearEpilogue,
    },
    /// RoPE on the fused Q/K/V projection and the paged K/V write (both RoPE modes, chosen
    /// by a parameter).
    RopeCache {
        /// Pool element format.
        kv: KvFormat,
        /// Query and key heads RMS-normed first (Qwen3, Gemma 3).
        qk_norm: bool,
    },
    /// Paged attention.
    Attention {
        /// Pool element format.
        kv: KvFormat,
        /// Head dimension (even).
        head_dim: u32,
        /// How one query's context is spread.
        path: AttentionPath,
        /// Query heads of one KV head computed together, each key and value read once for
        /// them all ([`attention_group`] on [`AttentionPath::PerQuerySubgroup`],
        /// [`crate::gpu::flash_group`] on [`AttentionPath::Flash`], else 1).
        group: u32,
        /// How split-KV combines its partitions ([`Tree::Shared`] on the other paths).
        tree: Tree,
        /// Each head's softmax has a learned sink logit (gpt-oss; `shaders/sink_logit.wgsl`
        /// holds the formula), bound at `SINKS`.
        sinks: bool,
    },
    /// Flash attention for decode steps of the models with Q/K norms, the rope_cache kernel's
    /// work for its own token done first (`shaders/flash_qk_rope.wgsl`:
    /// `src/gpu/attention_rope.rs`); otherwise [`AttentionPath::Flash`]'s kernel.
    FlashRope {
        /// Pool element format.
        kv: KvFormat,
        /// Head dimension (even).
        head_dim: u32,
        /// Query heads of one KV head a workgroup computes ([`crate::gpu::flash_group`]).
        group: u32,
        /// RoPE pairs (p, p + head_dim / 2) rather than (2p, 2p + 1) (`HALF_SPLIT`).
        half_split: bool,
    },
}

impl KernelVariant {
    /// True when the variant needs the SHADER_F16 feature.
    pub fn needs_f16(&self) -> bool {
        self.family().needs_f16(self)
    }

    /// True when the variant needs the EXPERIMENTAL_COOPERATIVE_MATRIX feature (the
    /// cooperative-matrix path, not emulated).
    pub fn needs_coop(&self) -> bool {
        self.family().needs_coop(self)
    }

    /// True when the variant needs the SUBGROUP feature.
    pub fn needs_subgroup(&self) -> bool {
        self.family().needs_subgroup(self)
    }

    /// The module of the variant's kernel family, which says what it is made of.
    fn family(&self) -> &'static dyn Family {
        match self {
            Self::Embed { .. } => &embed::Embed,
            Self::RmsNorm | Self::RmsNormSandwich => &norm::Norm,
            Self::GatedMul { .. }
            | Self::Scale
            | Self::Softcap
            | Self::AddInPlace
            | Self::GatherRows
            | Self::ScatterRows
            | Self::CopyIds
            | Self::MoeCombine
            | Self::SwigluClamped => &elementwise::Elementwise,
            Self::TopK => &top_k::TopK,
            Self::MoeRoute => &moe_route::MoeRoute,
            Self::LoraShrink | Self::LoraShrinkGroups | Self::LoraExpandGroups => &lora::Lora,
            Self::Linear { .. } => &linear::Linear,
            Self::RopeCache { .. } => &rope::RopeCache,
            Self::Attention { .. } | Self::FlashRope { .. } => &attention::Attention,
        }
    }

    /// A short unique name, used as the pipeline label.
    pub fn label(&self) -> String {
        self.family().label(self)
    }

    /// Invocations per workgroup, injected into the shader as `WG`.
    pub fn workgroup_size(&self) -> u32 {
        self.family().workgroup(self).0
    }

    /// Output columns one invocation (sequential linear) or workgroup (K-split) computes; 1
    /// for every other kernel.
    pub fn columns_tile(&self) -> u32 {
        match *self {
            Self::Linear { path, kernel, epilogue, .. } => linear::columns_tile(path, kernel, epilogue),
            _ => 1,
        }
    }

    /// Rows of x one invocation (sequential linear) or workgroup (K-split: the GEMM's bands
    /// together) computes ([`LinearKernel::rows`]); 1 for every other kernel.
    pub fn rows_per_workgroup(&self) -> u32 {
        match self {
            Self::Linear { kernel, .. } => kernel.rows(),
            _ => 1,
        }
    }

    /// The layout of the parameter block the variant reads as `P` ([`reflect::PARAMS`]).
    pub fn params(&self) -> ParamsLayout {
        self.family().params(self)
    }
}
