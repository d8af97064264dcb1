//! Shader composition: the one place that turns a kernel variant into WGSL source.
//!
//! Every variant pagoda can run is a [`KernelVariant`]; [`KernelVariant::source`] composes its
//! WGSL from the files in `shaders/` (a kernel body, a weight-format or KV-format snippet) after
//! a header of constants injected from Rust. The runtime builds pipelines from it,
//! `tests/shader_portability.rs` validates and translates every entry of [`all_variants`], and
//! `tests/shader_contract.rs` checks each one against its Rust side.
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
//!   [`ATTENTION_SPLIT_WG`], [`ATTENTION_DOT_LANES`], [`LINEAR_COOP_WG`]) is injected as `WG`, which the shader
//!   uses in `@workgroup_size(WG)`, and the dispatch sizes its grid with the same constant.
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
//! `wfmt_<type>.wgsl`, and `src/gpu/shader/compose.rs`'s `format_files` only when it starts or
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

mod compose;
pub mod params;
pub mod reflect;
mod unroll;

use params::{
    AttentionParams, ElementwiseParams, EmbedParams, KernelParams, LinearParams, LoraParams, ParamsLayout,
    RmsNormParams, RopeCacheParams, TopKParams,
};

pub use super::linear_coop::{CoopElem, CoopShape, CoopTile, LINEAR_COOP_WG};
use crate::dtype::DType;

/// How a linear layer reduces over K. Both keep one fixed order per output row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearPath {
    /// One invocation per output with a sequential K loop (fast on CPU drivers such as
    /// lavapipe); with `Some(size)` the activations are shared across subgroup lanes with
    /// `subgroupBroadcast`, specialised for that subgroup size.
    Sequential {
        /// Subgroup size the variant is built for, or `None` for plain loads.
        subgroup: Option<u32>,
    },
    /// K split across a workgroup of `WG` invocations and a fixed tree reduction per output,
    /// [`LINEAR_KSPLIT_COLS`] weight rows a workgroup (fast on discrete GPUs for decode).
    KSplit,
    /// Tiles multiplied with cooperative matrices of `shape` (`shaders/linear_coop.wgsl`,
    /// [`crate::gpu::linear_coop`]), one k-step of the matrix size at a time in the hardware's
    /// order; every batch, decode rows padded to the tile, takes the same steps. `emulated`
    /// multiplies in plain arithmetic instead (adapters without matrices: the tests).
    Coop {
        /// The matrices' size and input type.
        shape: CoopShape,
        /// Plain arithmetic over workgroup memory instead of the matrices
        /// (`shaders/coop_mma_emu.wgsl`).
        emulated: bool,
    },
}

/// The linear kernel a variant runs, with its tile: the sequential K loop (`linear_seq.wgsl`), or
/// on the K-split path the GEMV (decode, `linear_ksplit.wgsl`) and the GEMM (prefill,
/// `linear_gemm.wgsl`), all of them in one reduction order per output, so which one a batch
/// takes never changes a row's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearKernel {
    /// One invocation per output tile of `rows` rows of x ([`LINEAR_SEQ_ROW_TILES`]), a
    /// sequential loop over K.
    Sequential {
        /// Rows of x an invocation computes.
        rows: u32,
    },
    /// One workgroup per [`LINEAR_KSPLIT_COLS`] weight rows and `rows` rows of x
    /// ([`LINEAR_GEMV_ROWS`]; llama.cpp's `NUM_COLS` activation columns), K split over its
    /// lanes: each lane's run of weights decoded once and multiplied by every row's activations.
    Gemv {
        /// Rows of x a workgroup computes.
        rows: u32,
    },
    /// [`LINEAR_GEMM_BANDS`] bands of GEMV lanes, each on its own `band_rows` rows of one
    /// weight tile ([`LINEAR_GEMM_BAND_ROWS`]).
    Gemm {
        /// Rows of x each band computes.
        band_rows: u32,
    },
    /// One workgroup of [`LINEAR_COOP_WG`] per tile of the cooperative-matrix path
    /// ([`CoopShape::tiles`]).
    Coop(CoopTile),
}

impl LinearKernel {
    /// Rows of x one invocation (sequential), one workgroup (GEMV) or one band (GEMM) computes:
    /// the shader's `TM`.
    pub fn row_tile(self) -> u32 {
        match self {
            Self::Sequential { rows } | Self::Gemv { rows } => rows,
            Self::Gemm { band_rows } => band_rows,
            Self::Coop(tile) => tile.rows,
        }
    }

    /// Rows of x a workgroup computes: [`Self::row_tile`], the GEMM's bands together.
    pub fn rows(self) -> u32 {
        match self {
            Self::Gemm { band_rows } => band_rows * LINEAR_GEMM_BANDS,
            _ => self.row_tile(),
        }
    }

    /// What a variant's label says of the kernel and its tile.
    fn label(self) -> String {
        match self {
            Self::Sequential { rows } => format!("tm{rows}"),
            Self::Gemv { rows } => format!("gemv{rows}"),
            Self::Gemm { .. } => format!("gemm{}", self.rows()),
            Self::Coop(t) => format!("coop{}x{}x{}", t.rows, t.cols, t.depth),
        }
    }
}

impl LinearPath {
    /// The kernels the path's variants are built with: the sequential tiles, or the K-split
    /// GEMV's rows and the GEMM's band rows.
    pub fn kernels(self) -> Vec<LinearKernel> {
        match self {
            Self::Sequential { .. } => {
                LINEAR_SEQ_ROW_TILES.map(|rows| LinearKernel::Sequential { rows }).to_vec()
            }
            Self::KSplit => {
                let gemv = LINEAR_GEMV_ROWS.map(|rows| LinearKernel::Gemv { rows });
                let gemm = LINEAR_GEMM_BAND_ROWS.map(|band_rows| LinearKernel::Gemm { band_rows });
                [gemv.as_slice(), gemm.as_slice()].concat()
            }
            Self::Coop { shape, .. } => shape.tiles().map(LinearKernel::Coop).to_vec(),
        }
    }

    /// The weight sources the path reads from: the K-split path's workgroups already read
    /// consecutive words and keep to buffers.
    pub fn weight_sources(self) -> &'static [WeightSource] {
        match self {
            Self::Sequential { .. } => &WeightSource::ALL,
            Self::KSplit | Self::Coop { .. } => &[WeightSource::Buffer],
        }
    }

    /// The activation loads the path's variants are built with ([`XLoad::of`] picks one by K).
    pub fn x_loads(self) -> &'static [XLoad] {
        match self {
            Self::Sequential { .. } => &[XLoad::Words],
            Self::KSplit | Self::Coop { .. } => &[XLoad::Words, XLoad::Units],
        }
    }

    /// True when each subgroup of the path's normed variants sums the RMSNorm scales on its own,
    /// without workgroup memory or barriers (`shaders/rms_scale_lanes.wgsl`): the sequential
    /// path over subgroups whose size divides its workgroup (8 or 16 lanes), and so the
    /// norm's [`WORKGROUP_SIZE`] partials.
    pub fn norms_in_subgroups(self) -> bool {
        matches!(self, Self::Sequential { subgroup: Some(sg) } if LINEAR_SEQ_WG.is_multiple_of(sg))
    }

    /// The tree the path's `kernel` takes where the GEMV's and split-KV's is `adapter`
    /// ([`Tree::for_subgroups`]): that one for the K-split GEMV (of any rows), the subgroup
    /// size's for the sequential path over subgroups (its lanes and a fused RMSNorm's squares),
    /// [`Tree::Shared`] for the others (their `Lanes` and a fused RMSNorm's tree).
    pub fn tree(self, kernel: LinearKernel, adapter: Tree) -> Tree {
        match (self, kernel) {
            (_, LinearKernel::Gemv { .. }) => adapter,
            (Self::Sequential { subgroup: Some(lanes) }, _) => Tree::Subgroup { lanes },
            _ => Tree::Shared,
        }
    }

    /// The trees the path's `kernel` is built with: [`Self::tree`] on every adapter.
    pub fn trees(self, kernel: LinearKernel) -> Vec<Tree> {
        let mut trees: Vec<Tree> =
            Tree::all().into_iter().map(|adapter| self.tree(kernel, adapter)).collect();
        trees.dedup();
        trees
    }
}

/// How a linear kernel loads its activations (and a normed input's RMSNorm weight): each of a
/// K-split lane's quads as one aligned 16-byte unit where every row starts on one (K a multiple
/// of 4, as every model's rows are: one load a quad instead of four), else a word at a time (the
/// sequential path always: CPU adapters share each word across a subgroup instead). Loads only,
/// so the bits are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XLoad {
    /// Words (`shaders/xsrc_f32.wgsl`, `xnorm_f32.wgsl`).
    Words,
    /// Aligned 16-byte units (`shaders/xsrc_vec4.wgsl`, `xnorm_vec4.wgsl`).
    Units,
}

impl XLoad {
    /// The loads of rows of `k` activations on `path`.
    pub fn of(path: LinearPath, k: usize) -> Self {
        match path {
            LinearPath::KSplit | LinearPath::Coop { .. } if k.is_multiple_of(4) => Self::Units,
            _ => Self::Words,
        }
    }
}

/// How a K-split GEMV (its lanes' sums and a fused RMSNorm's squares) or a split-KV attention
/// workgroup adds its invocations' partial results: one fixed tree either way (partial t takes
/// partial t + s for s = WG / 2, ..., 1), so the same bits; over subgroups the levels narrower
/// than the tree's lanes are shuffles instead of rounds of workgroup memory and barriers. The
/// sequential path over subgroups of 8 or 16 sums a fused RMSNorm's squares in each subgroup
/// alone (over wider fixed subgroups its fused norm shuffles the levels under the workgroup's
/// 16 lanes). The other trees stay in workgroup memory: the prefill GEMM's (its bands would
/// each need subgroups of their own) and the RMSNorm kernel's (before the tiles of more than
/// one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tree {
    /// Every level through workgroup memory (`shaders/tree_shared.wgsl`).
    Shared,
    /// The levels narrower than `lanes` in `subgroupShuffleXor` (`shaders/tree_subgroup.wgsl`,
    /// `TREE_LANES`), for subgroups of at least that many lanes.
    Subgroup {
        /// Lanes the shuffles span: a power of two no larger than the adapter's smallest
        /// subgroup.
        lanes: u32,
    },
}

/// The shuffle widths of the GEMV's and split-KV's subgroup trees: an adapter takes the widest
/// its smallest subgroup holds (8 on lavapipe and Intel, 32 on NVIDIA and AMD under Vulkan),
/// and one whose subgroups may have fewer than 8 lanes keeps [`Tree::Shared`] (wgpu reports 4
/// for Metal, and for Vulkan drivers without subgroup size control).
pub const TREE_LANES: [u32; 2] = [8, 32];

impl Tree {
    /// The GEMV's and split-KV's tree on an adapter whose smallest subgroup has `min_lanes`
    /// lanes (`None`: no subgroups).
    pub fn for_subgroups(min_lanes: Option<u32>) -> Self {
        let widest = TREE_LANES.into_iter().rev().find(|&lanes| min_lanes.is_some_and(|min| lanes <= min));
        widest.map_or(Self::Shared, |lanes| Self::Subgroup { lanes })
    }

    /// Every tree the GEMV and split-KV are built with.
    pub fn all() -> [Self; 3] {
        [Self::Shared, Self::Subgroup { lanes: TREE_LANES[0] }, Self::Subgroup { lanes: TREE_LANES[1] }]
    }

    /// What a variant's label adds for this tree.
    fn suffix(self) -> String {
        match self {
            Self::Shared => String::new(),
            Self::Subgroup { lanes } => format!("-sgtree{lanes}"),
        }
    }
}

/// The activation of a gated MLP: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateActivation {
    /// SiLU (SwiGLU: Llama, Qwen, Mistral, Phi-3).
    Silu,
    /// PyTorch's tanh-approximated GELU (GeGLU: Gemma).
    GeluTanh,
}

impl GateActivation {
    fn name(self) -> &'static str {
        match self {
            Self::Silu => "silu",
            Self::GeluTanh => "gelu_tanh",
        }
    }
}

/// What a linear kernel does with each output it computes. Every epilogue writes the bits
/// the separate kernel would: the product is rounded to f32 first either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearEpilogue {
    /// `y = acc`.
    Store,
    /// `y += acc`: the residual add fused into the projection before it.
    Accumulate,
    /// `y = acc + bias[n]`: Q/K/V biases.
    Bias,
    /// `y = act(gate) * up` over a gated weight, whose parts hold their gate rows and then as
    /// many up rows: the gated MLP's two projections and its activation in one dispatch.
    Gated(GateActivation),
    /// A Q/K/V projection's outputs (plus their biases when `bias`) rotated (interleaved RoPE)
    /// and the keys and values written into a paged KV pool of format `kv`: the bias epilogue
    /// and the rope_cache kernel in the projection, a pair of columns at a time.
    RopeCache {
        /// Pool element format.
        kv: KvFormat,
        /// Biases added before the rotation (Qwen2's Q/K/V).
        bias: bool,
    },
}

/// How a linear kernel hands its outputs to the epilogue (which of the kernels' `PLAIN`,
/// `GATED` and `PAIRED` lines the composer keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EmitShape {
    /// One output at a time (`emit`).
    Single,
    /// A gate and an up sum per output (`emit_gated`).
    Gated,
    /// Two neighbouring columns at once (`emit_pair`).
    Pairs,
}

impl LinearEpilogue {
    /// Every epilogue.
    pub const ALL: [LinearEpilogue; 11] = [
        Self::Store,
        Self::Accumulate,
        Self::Bias,
        Self::Gated(GateActivation::Silu),
        Self::Gated(GateActivation::GeluTanh),
        Self::RopeCache { kv: KvFormat::F32, bias: false },
        Self::RopeCache { kv: KvFormat::F16Packed, bias: false },
        Self::RopeCache { kv: KvFormat::F16Native, bias: false },
        Self::RopeCache { kv: KvFormat::F32, bias: true },
        Self::RopeCache { kv: KvFormat::F16Packed, bias: true },
        Self::RopeCache { kv: KvFormat::F16Native, bias: true },
    ];

    /// True for the gated epilogues (two rows per output).
    pub fn is_gated(self) -> bool {
        matches!(self, Self::Gated(_))
    }

    /// Weight rows each output reads: 2 for the gated epilogues (gate and up), else 1.
    pub fn gates(self) -> u32 {
        if self.is_gated() { 2 } else { 1 }
    }

    fn shape(self) -> EmitShape {
        match self {
            Self::Store | Self::Accumulate | Self::Bias => EmitShape::Single,
            Self::Gated(_) => EmitShape::Gated,
            Self::RopeCache { .. } => EmitShape::Pairs,
        }
    }

    fn name(self) -> String {
        match self {
            Self::Store => "store".into(),
            Self::Accumulate => "accumulate".into(),
            Self::Bias => "bias".into(),
            Self::Gated(act) => format!("gated-{}", act.name()),
            Self::RopeCache { kv, bias } => {
                format!("{}rope-cache-{}", if bias { "bias-" } else { "" }, kv.name())
            }
        }
    }
}

/// What a linear kernel does to its input rows before the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearPrologue {
    /// Reads x as stored.
    Plain,
    /// Reads `rms_norm(x) * g`: the RMSNorm that feeds the projection, computed per row tile
    /// with the rms_norm kernel's order, so the product has the bits of the two kernels.
    RmsNorm,
    /// Gemma's sandwich before the RMSNorm: reads `rms_norm(x + rms_norm(o) * post) * g` and
    /// writes `x + rms_norm(o) * post` (the new residual) to another buffer from one workgroup
    /// of each row tile, with the bits of the rms_norm kernel's add and then [`Self::RmsNorm`]
    /// (`shaders/xin_sandwich.wgsl`).
    SandwichNorm,
}

impl LinearPrologue {
    /// Every prologue.
    pub const ALL: [LinearPrologue; 3] = [Self::Plain, Self::RmsNorm, Self::SandwichNorm];
}

/// How the attention kernel spreads one query's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// One invocation per (query token, head) walking the whole context (CPU drivers without
    /// subgroups of [`ATTENTION_DOT_LANES`]).
    PerQuery,
    /// The same walk by one subgroup of [`ATTENTION_DOT_LANES`] lanes per query token and
    /// [`attention_group`] heads of a KV head, each lane holding every eighth pair of the
    /// heads' dimensions: the same bits as `PerQuery`, with a key's and a value's pairs read
    /// side by side and once for the group (CPU drivers whose subgroups have exactly that many
    /// lanes).
    PerQuerySubgroup,
    /// One workgroup of [`ATTENTION_SPLIT_WG`] per (query token, head): the context cut into
    /// partitions fixed by its length (at most [`KV_PARTITION_TOKENS`] keys each), combined in a
    /// fixed tree.
    SplitKv,
    /// Flash-decoding (`shaders/attention_flash.wgsl`, [`crate::gpu::FLASH_WG`]): one workgroup
    /// per query token and [`crate::gpu::flash_group`] heads of a KV head, its lanes over the
    /// keys (partitions fixed by the keys' positions) and the heads' dimensions, the partitions
    /// combined in a fixed tree; prefill and decode tokens alike.
    Flash,
}

/// Element format of the paged K/V pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvFormat {
    /// f32 values.
    F32,
    /// f16 values packed two per u32 with `pack2x16float` (no shader-f16 needed).
    F16Packed,
    /// f16 values rounded by shader-f16's own conversion, a pair to a u32 word read with
    /// `unpack2x16float` (one 32-bit load a pair); same memory layout as `F16Packed`.
    F16Native,
}

impl KvFormat {
    /// Bytes per stored element.
    pub fn elem_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16Packed | Self::F16Native => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16Packed => "f16-packed",
            Self::F16Native => "f16-native",
        }
    }
}

/// Invocations per workgroup of every kernel but top-k, linear and the split-KV and subgroup
/// attention kernels: the elementwise kernels, embedding, RoPE + cache (one invocation per
/// head), per-query attention (one invocation per (token, head)) and RMSNorm (one workgroup
/// per row).
pub const WORKGROUP_SIZE: u32 = 64;
/// Invocations per workgroup of top-k (one workgroup per row).
pub const TOP_K_WG: u32 = 256;
/// Invocations per output of the K-split linear kernels (the lanes K is split across): the
/// decode GEMV's workgroup, and each row band of the prefill GEMM.
pub const LINEAR_WG: u32 = 64;
/// Row bands of a K-split prefill (GEMM) workgroup: each band of [`LINEAR_WG`] lanes computes
/// its own rows of the same columns, all of them reading one dequantized weight tile.
pub const LINEAR_GEMM_BANDS: u32 = 4;
/// Invocations per workgroup of the K-split prefill GEMM.
pub const LINEAR_GEMM_WG: u32 = LINEAR_WG * LINEAR_GEMM_BANDS;
/// Weight rows a K-split workgroup reads (its output columns, or half as many columns of a
/// gated weight, each with a gate and an up row): in the prefill GEMM one per band when the
/// bands stage a chunk of the tile together, so it equals [`LINEAR_GEMM_BANDS`]; the decode
/// GEMV reads as many against one load of the activations.
pub const LINEAR_KSPLIT_COLS: u32 = LINEAR_GEMM_BANDS;
/// Invocations per workgroup of the sequential linear kernels (small, so that decode-sized
/// layers still give every CPU thread a workgroup).
pub const LINEAR_SEQ_WG: u32 = 16;
/// Weight rows each invocation of the sequential linear kernels reads at once: one activation
/// load then serves this many rows (as many output columns, or half as many of a gated
/// weight, whose columns read a gate and an up row each, keeping the registers the same).
pub const LINEAR_SEQ_COLS: u32 = 4;
/// Invocations per workgroup of split-KV attention: partitions one query works on at once.
pub const ATTENTION_SPLIT_WG: u32 = 32;
/// Head dimensions split-KV attention combines at once in its workgroup memory.
pub const ATTENTION_SPLIT_CHUNK: u32 = 32;
/// Partial sums every attention kernel splits a query·key product into (dimension pair `d` into
/// partial `d % ATTENTION_DOT_LANES`), added by a fixed butterfly: the lanes, and the
/// workgroup, of [`AttentionPath::PerQuerySubgroup`], so every path sums a score alike (the
/// other kernels hold the partials in two `vec4`s: it is 8).
pub const ATTENTION_DOT_LANES: u32 = 8;
/// Most query heads of one KV head the subgroup attention kernel computes together.
pub const ATTENTION_MAX_GROUP: u32 = 4;
/// Invocations per workgroup of flash attention: [`FLASH_KEY_LANES`] key lanes (`shaders/attention_flash.wgsl`) of
/// [`ATTENTION_DOT_LANES`] dimension lanes.
pub const FLASH_WG: u32 = 64;
/// Key lanes of a flash workgroup: keys `kl, kl + FLASH_KEY_LANES, ...` go to key lane `kl`.
pub const FLASH_KEY_LANES: u32 = FLASH_WG / ATTENTION_DOT_LANES;
/// Most query heads of one KV head a flash workgroup computes together.
pub const FLASH_MAX_GROUP: u32 = 8;

/// Query heads the subgroup attention kernel computes together for a model with
/// `heads_per_kv` query heads on each KV head: the largest divisor of it up to
/// [`ATTENTION_MAX_GROUP`], so a group never straddles two KV heads.
pub fn attention_group(heads_per_kv: u32) -> u32 {
    (1..=ATTENTION_MAX_GROUP.min(heads_per_kv)).rev().find(|g| heads_per_kv.is_multiple_of(*g)).unwrap_or(1)
}

/// Most keys a split-KV partition holds. The n keys a query sees are cut into partitions of
/// ceil(n / [`ATTENTION_SPLIT_WG`]) keys while that is at most this (so even a short context
/// spreads over the whole workgroup), else into partitions of this many. An invocation walks
/// its partition's keys one by one, which is the kernel's latency at small batches: with
/// partitions of 128 keys an H200 took 119 µs a layer to attend over the 16 to 80 keys of a
/// batch-1 decode, with partitions of 16 (one KV block) 68 µs.
pub const KV_PARTITION_TOKENS: u32 = 16;
/// Largest KV block size the attention kernel accepts.
pub const MAX_BLOCK_SIZE: u32 = 64;
/// Row tiles the sequential linear kernels are built with: a batch takes the largest it fills
/// (1 for decode-sized batches; on lavapipe 8 rows beat 4 by 5-10% from batches of 8 up, and
/// 16 lose).
pub const LINEAR_SEQ_ROW_TILES: [u32; 3] = [1, 4, 8];
/// Rows of x the K-split GEMV is built for: 1 for a decode step of one sequence, 2, 4 and 8 for
/// batched decode (llama.cpp's `NUM_COLS`, up to 8 activation columns a weight read), a batch
/// taking the fewest that hold it, in groups of 8 past that.
pub const LINEAR_GEMV_ROWS: [u32; 4] = [1, 2, 4, 8];
/// Rows each band of the K-split prefill GEMM is built for, whose tile is [`LINEAR_GEMM_BANDS`]
/// times as many rows (8, 16 or 32: the adapter sets the largest, the batch picks one up to it).
pub const LINEAR_GEMM_BAND_ROWS: [u32; 3] = [2, 4, 8];
/// Weight element types the linear and embedding kernels read.
pub const WEIGHT_DTYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4NL,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q2K,
    DType::Q3K,
    DType::IQ4XS,
    DType::MXFP4,
];

/// Texels in a row of a weight texture ([`WeightSource::Texture`]), injected as `W_TEXELS`.
pub const WEIGHT_TEXELS: u32 = 2048;

/// Where a linear or embedding kernel reads its weight's u32 words from. Both hold the same
/// words (the layout of `weights.rs`), so the source never changes a result's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightSource {
    /// A storage buffer (`shaders/wsrc_buffer.wgsl`).
    Buffer,
    /// An rgba32uint texture, [`WEIGHT_TEXELS`] texels a row (`shaders/wsrc_texture.wgsl`): a
    /// CPU driver fetches a texel for all lanes at once where it loads a storage word lane by
    /// lane. The sequential path only.
    Texture,
}

impl WeightSource {
    /// Both sources.
    pub const ALL: [Self; 2] = [Self::Buffer, Self::Texture];

    /// The name `PAGODA_WEIGHTS` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Buffer => "buffer",
            Self::Texture => "texture",
        }
    }

    /// What a variant's label adds for this source.
    fn suffix(self) -> &'static str {
        match self {
            Self::Buffer => "",
            Self::Texture => "@texture",
        }
    }
}

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
    /// Batched LoRA shrink: each row times its adapter's `A` (`lora_shrink.wgsl`).
    LoraShrink,
    /// Batched LoRA expand: each row's shrunk values times its adapter's `B`, scaled and added
    /// (`lora_expand.wgsl`).
    LoraExpand,
    /// Gemma's sandwich between two linears: `x += rms_norm(o) * post`, then
    /// `h = rms_norm(x) * pre` (`rms_norm_sandwich.wgsl`: `src/gpu/norm_sandwich.rs`).
    RmsNormSandwich,
    /// Top-k (and argmax as k = 1) per row.
    TopK,
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
        matches!(
            self,
            Self::RopeCache { kv: KvFormat::F16Native, .. }
                | Self::Attention { kv: KvFormat::F16Native, .. }
                | Self::FlashRope { kv: KvFormat::F16Native, .. }
                | Self::Linear { epilogue: LinearEpilogue::RopeCache { kv: KvFormat::F16Native, .. }, .. }
        ) || matches!(self, Self::Linear { path: LinearPath::Coop { shape, emulated: false }, .. } if shape.elem == CoopElem::F16)
    }

    /// True when the variant needs the EXPERIMENTAL_COOPERATIVE_MATRIX feature (the
    /// cooperative-matrix path, not emulated).
    pub fn needs_coop(&self) -> bool {
        matches!(self, Self::Linear { path: LinearPath::Coop { emulated: false, .. }, .. })
    }

    /// True when the variant needs the SUBGROUP feature.
    pub fn needs_subgroup(&self) -> bool {
        matches!(
            self,
            Self::Linear { path: LinearPath::Sequential { subgroup: Some(_) } | LinearPath::Coop { .. }, .. }
                | Self::Linear { tree: Tree::Subgroup { .. }, .. }
                | Self::Attention { path: AttentionPath::PerQuerySubgroup | AttentionPath::Flash, .. }
                | Self::Attention { tree: Tree::Subgroup { .. }, .. }
                | Self::FlashRope { .. }
        )
    }

    /// A short unique name, used as the pipeline label.
    pub fn label(&self) -> String {
        match self {
            Self::Embed { dtype, source } => format!("embed/{}{}", dtype.name(), source.suffix()),
            Self::RmsNorm => "rms_norm".into(),
            Self::RmsNormSandwich => "rms_norm_sandwich".into(),
            Self::GatedMul { act } => format!("gated_mul/{}", act.name()),
            Self::Scale => "scale".into(),
            Self::Softcap => "softcap".into(),
            Self::AddInPlace => "add_in_place".into(),
            Self::GatherRows => "gather_rows".into(),
            Self::ScatterRows => "scatter_rows".into(),
            Self::CopyIds => "copy_ids".into(),
            Self::MoeCombine => "moe_combine".into(),
            Self::SwigluClamped => "swiglu_clamped".into(),
            Self::LoraShrink => "lora_shrink".into(),
            Self::LoraExpand => "lora_expand".into(),
            Self::TopK => "top_k".into(),
            Self::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue } => {
                let path = match path {
                    LinearPath::Sequential { subgroup: Some(sg) } => format!("seq-sg{sg}"),
                    LinearPath::Sequential { subgroup: None } => "seq".into(),
                    LinearPath::KSplit => "ksplit".into(),
                    LinearPath::Coop { shape, emulated } => {
                        format!("coop{}-{}", if *emulated { "-emulated" } else { "" }, shape.name())
                    }
                };
                let norm = match prologue {
                    LinearPrologue::Plain => "",
                    LinearPrologue::RmsNorm => "rms-",
                    LinearPrologue::SandwichNorm => "sandwich-",
                };
                let x_load = match x_load {
                    XLoad::Words => "",
                    XLoad::Units => "-x16",
                };
                let (dtype, epilogue, source, tree, tile) =
                    (dtype.name(), epilogue.name(), source.suffix(), tree.suffix(), kernel.label());
                format!("linear/{dtype}{source}/{path}{x_load}{tree}/{tile}/{norm}{epilogue}")
            }
            Self::RopeCache { kv, qk_norm } => {
                format!("rope_cache/{}{}", kv.name(), if *qk_norm { "/qk-norm" } else { "" })
            }
            Self::Attention { kv, head_dim, path, group, tree, sinks } => {
                let path = match path {
                    AttentionPath::PerQuery => "per-query".to_string(),
                    AttentionPath::PerQuerySubgroup => format!("per-query-sg{ATTENTION_DOT_LANES}"),
                    AttentionPath::SplitKv => "split-kv".to_string(),
                    AttentionPath::Flash => "flash".to_string(),
                };
                let group = if *group > 1 { format!("/g{group}") } else { String::new() };
                format!(
                    "attention/{}/hd{head_dim}/{path}{}{group}{}",
                    kv.name(),
                    tree.suffix(),
                    if *sinks { "/sinks" } else { "" }
                )
            }
            Self::FlashRope { kv, head_dim, group, half_split } => {
                let mode = if *half_split { "half-split" } else { "interleaved" };
                format!("attention/{}/hd{head_dim}/flash-qk-rope-{mode}/g{group}", kv.name())
            }
        }
    }

    /// Invocations per workgroup, injected into the shader as `WG`.
    pub fn workgroup_size(&self) -> u32 {
        self.workgroup_constant().0
    }

    /// The workgroup size and the name of the constant it comes from.
    fn workgroup_constant(&self) -> (u32, &'static str) {
        match self {
            Self::TopK => (TOP_K_WG, "TOP_K_WG"),
            Self::Linear { kernel, .. } => match kernel {
                LinearKernel::Sequential { .. } => (LINEAR_SEQ_WG, "LINEAR_SEQ_WG"),
                LinearKernel::Gemv { .. } => (LINEAR_WG, "LINEAR_WG"),
                LinearKernel::Gemm { .. } => (LINEAR_GEMM_WG, "LINEAR_GEMM_WG"),
                LinearKernel::Coop(_) => (LINEAR_COOP_WG, "LINEAR_COOP_WG"),
            },
            Self::Attention { path: AttentionPath::SplitKv, .. } => {
                (ATTENTION_SPLIT_WG, "ATTENTION_SPLIT_WG")
            }
            Self::Attention { path: AttentionPath::PerQuerySubgroup, .. } => {
                (ATTENTION_DOT_LANES, "ATTENTION_DOT_LANES")
            }
            Self::Attention { path: AttentionPath::Flash, .. } | Self::FlashRope { .. } => {
                (FLASH_WG, "FLASH_WG")
            }
            _ => (WORKGROUP_SIZE, "WORKGROUP_SIZE"),
        }
    }

    /// Output columns one invocation (sequential linear) or workgroup (K-split) computes; 1
    /// for every other kernel.
    pub fn columns_tile(&self) -> u32 {
        match self {
            Self::Linear { path: LinearPath::Sequential { .. }, epilogue, .. } => {
                LINEAR_SEQ_COLS / epilogue.gates()
            }
            Self::Linear { path: LinearPath::KSplit, epilogue, .. } => LINEAR_KSPLIT_COLS / epilogue.gates(),
            Self::Linear { kernel: LinearKernel::Coop(tile), epilogue, .. } => tile.cols / epilogue.gates(),
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
        match self {
            Self::Embed { .. } => EmbedParams::LAYOUT,
            Self::RmsNorm | Self::RmsNormSandwich => RmsNormParams::LAYOUT,
            Self::GatedMul { .. }
            | Self::Scale
            | Self::Softcap
            | Self::AddInPlace
            | Self::GatherRows
            | Self::ScatterRows
            | Self::CopyIds
            | Self::MoeCombine
            | Self::SwigluClamped => ElementwiseParams::LAYOUT,
            Self::TopK => TopKParams::LAYOUT,
            Self::LoraShrink | Self::LoraExpand => LoraParams::LAYOUT,
            Self::Linear { .. } => LinearParams::LAYOUT,
            Self::RopeCache { .. } => RopeCacheParams::LAYOUT,
            Self::Attention { .. } | Self::FlashRope { .. } => AttentionParams::LAYOUT,
        }
    }
}

// The rotary epilogue takes a tile's columns in pairs.
const _: () = assert!(LINEAR_SEQ_COLS.is_multiple_of(2) && LINEAR_KSPLIT_COLS.is_multiple_of(2));
// A subgroup size that divides the sequential workgroup divides the norm's partials
// (rms_scale_lanes.wgsl gives each lane WORKGROUP_SIZE / size of them).
const _: () = assert!(WORKGROUP_SIZE.is_multiple_of(LINEAR_SEQ_WG));

/// Head dimensions the attention kernel is specialised for ahead of time in the tests.
pub const TESTED_HEAD_DIMS: [u32; 6] = [64, 72, 80, 96, 128, 256];
/// Subgroup sizes the subgroup variants are built for (lavapipe 8, Intel 16, NVIDIA/Apple 32, AMD 64).
pub const SUBGROUP_SIZES: [u32; 4] = [8, 16, 32, 64];

/// Partial sums a K-split GEMM of `band_rows` rows a band passes down its tree at once (`TILE`,
/// its workgroup memory): half the lanes of every band, all their outputs.
pub(crate) fn gemm_exchange_floats(band_rows: u32) -> u32 {
    LINEAR_WG / 2 * LINEAR_GEMM_BANDS * band_rows * LINEAR_KSPLIT_COLS
}

/// The variants the portability and contract tests build: every kernel structure a linear
/// path has (row tile, weight source, activation load, tree) for every weight type, each with
/// one of the prologue and epilogue pairs in turn (so every type meets every pair), and every
/// structure with every pair for [`FULL_CROSS_DTYPE`] (the prologues and epilogues are the same
/// code whatever the weight type); the single kernels, embeddings, RoPE and attention variants
/// in full.
pub fn all_variants() -> Vec<KernelVariant> {
    let mut out = vec![
        KernelVariant::RmsNorm,
        KernelVariant::RmsNormSandwich,
        KernelVariant::GatedMul { act: GateActivation::Silu },
        KernelVariant::GatedMul { act: GateActivation::GeluTanh },
        KernelVariant::Scale,
        KernelVariant::Softcap,
        KernelVariant::AddInPlace,
        KernelVariant::GatherRows,
        KernelVariant::ScatterRows,
        KernelVariant::CopyIds,
        KernelVariant::MoeCombine,
        KernelVariant::SwigluClamped,
        KernelVariant::LoraShrink,
        KernelVariant::LoraExpand,
        KernelVariant::TopK,
    ];
    let mut paths = vec![LinearPath::Sequential { subgroup: None }, LinearPath::KSplit];
    paths.extend(SUBGROUP_SIZES.iter().map(|&sg| LinearPath::Sequential { subgroup: Some(sg) }));
    let pairs: Vec<_> = prologue_epilogue_pairs().collect();
    for (index, dtype) in WEIGHT_DTYPES.into_iter().enumerate() {
        for source in WeightSource::ALL {
            out.push(KernelVariant::Embed { dtype, source });
        }
        // Each type starts the turn of pairs elsewhere, so every path meets every pair.
        let mut turn = index * 7;
        for &path in &paths {
            for structure in linear_structures(dtype, path) {
                if dtype == FULL_CROSS_DTYPE {
                    out.extend(pairs.iter().map(|&(prologue, epilogue)| structure(prologue, epilogue)));
                } else {
                    let (prologue, epilogue) = pairs[turn % pairs.len()];
                    out.push(structure(prologue, epilogue));
                    turn += 1;
                }
            }
        }
    }
    for kv in [KvFormat::F32, KvFormat::F16Packed, KvFormat::F16Native] {
        out.push(KernelVariant::RopeCache { kv, qk_norm: false });
        out.push(KernelVariant::RopeCache { kv, qk_norm: true });
        for head_dim in TESTED_HEAD_DIMS {
            // sinks (gpt-oss) at its head dimension only
            for sinks in [false, true].into_iter().take(1 + usize::from(head_dim == 64)) {
                let path = AttentionPath::PerQuery;
                let tree = Tree::Shared;
                out.push(KernelVariant::Attention { kv, head_dim, path, group: 1, tree, sinks });
                for tree in Tree::all() {
                    let path = AttentionPath::SplitKv;
                    out.push(KernelVariant::Attention { kv, head_dim, path, group: 1, tree, sinks });
                }
                for group in 1..=ATTENTION_MAX_GROUP {
                    let path = AttentionPath::PerQuerySubgroup;
                    let tree = Tree::Shared;
                    out.push(KernelVariant::Attention { kv, head_dim, path, group, tree, sinks });
                }
            }
            for group in 1..=crate::gpu::flash_max_group(head_dim) {
                let (path, tree) = (AttentionPath::Flash, Tree::Shared);
                out.push(KernelVariant::Attention { kv, head_dim, path, group, tree, sinks: false });
            }
        }
        // Flash with sinks at gpt-oss's heads (64 dimensions, 8 query heads a KV head) and one
        // head a group.
        for group in [1, 8] {
            let (path, tree) = (AttentionPath::Flash, Tree::Shared);
            out.push(KernelVariant::Attention { kv, head_dim: 64, path, group, tree, sinks: true });
        }
        // Flash with the Q/K norms and RoPE of its token: one head a group and the most,
        // half-split (Qwen3, Gemma 3), and interleaved once.
        for head_dim in [64, 128, 256] {
            for group in [1, crate::gpu::flash_max_group(head_dim)] {
                out.push(KernelVariant::FlashRope { kv, head_dim, group, half_split: true });
            }
        }
        out.push(KernelVariant::FlashRope { kv, head_dim: 128, group: 4, half_split: false });
    }
    out
}

/// The cooperative-matrix linear variants the portability and contract tests build, apart
/// from [`all_variants`] (naga writes the matrices in SPIR-V and MSL only): every weight type
/// on every matrix shape ([`CoopShape::ALL`]) and tile, through the adapter's matrices and
/// emulated, each with the next prologue and epilogue pair in turn (each shape's 32 meet all
/// 25) and the activation loads alternating.
pub fn coop_variants() -> Vec<KernelVariant> {
    let pairs: Vec<_> = prologue_epilogue_pairs().collect();
    let mut out = Vec::new();
    for shape in CoopShape::ALL {
        for emulated in [false, true] {
            let path = LinearPath::Coop { shape, emulated };
            for kernel in path.kernels() {
                for dtype in WEIGHT_DTYPES {
                    let turn = out.len();
                    let (prologue, epilogue) = pairs[turn % pairs.len()];
                    let x_load = path.x_loads()[turn % 2];
                    let (source, tree) = (WeightSource::Buffer, Tree::Shared);
                    out.push(KernelVariant::Linear {
                        dtype,
                        source,
                        path,
                        kernel,
                        x_load,
                        tree,
                        prologue,
                        epilogue,
                    });
                }
            }
        }
    }
    out
}

/// The weight type whose linear kernels the tests build with every prologue and epilogue on
/// every structure: f32, the quickest to compose and validate (a Q4_K variant takes about six
/// times as long: with it, this cross took most of the two shader tests' time).
const FULL_CROSS_DTYPE: DType = DType::F32;

/// The epilogues of the linears Gemma's sandwich feeds (the Q/K/V projection's, stored or
/// rotated into the cache, and the MLP's GELU-gated one): the tests build the sandwich prologue
/// with these only, its code being the same whatever the epilogue.
const SANDWICH_EPILOGUES: [LinearEpilogue; 3] = [
    LinearEpilogue::Store,
    LinearEpilogue::RopeCache { kv: KvFormat::F16Packed, bias: false },
    LinearEpilogue::Gated(GateActivation::GeluTanh),
];

/// Every (prologue, epilogue) pair the tests build, prologues outer: 25, the plain and normed
/// inputs with every epilogue and the sandwich with [`SANDWICH_EPILOGUES`].
fn prologue_epilogue_pairs() -> impl Iterator<Item = (LinearPrologue, LinearEpilogue)> {
    LinearPrologue::ALL.into_iter().flat_map(|p| {
        let tested =
            move |e: &LinearEpilogue| p != LinearPrologue::SandwichNorm || SANDWICH_EPILOGUES.contains(e);
        LinearEpilogue::ALL.into_iter().filter(tested).map(move |e| (p, e))
    })
}

/// Every kernel structure of `dtype`'s linear variants on `path` (kernel and tile, weight
/// source, activation load, tree) that [`is_sampled`] keeps, each as the variant it is with a
/// given prologue and epilogue.
fn linear_structures(
    dtype: DType,
    path: LinearPath,
) -> Vec<impl Fn(LinearPrologue, LinearEpilogue) -> KernelVariant> {
    let mut out = Vec::new();
    for kernel in path.kernels() {
        for &source in path.weight_sources() {
            for &x_load in path.x_loads() {
                for tree in path.trees(kernel) {
                    if !is_sampled(kernel, x_load, tree) {
                        continue;
                    }
                    out.push(move |prologue, epilogue| KernelVariant::Linear {
                        dtype,
                        source,
                        path,
                        kernel,
                        x_load,
                        tree,
                        prologue,
                        epilogue,
                    });
                }
            }
        }
    }
    out
}

/// True for the linear structures [`all_variants`] holds: every one but the GEMV's over 2 and
/// 4 rows, whose code differs from the 8 rows' only by the count of its unrolled row lines, of
/// which it keeps one (16-byte loads, the shared tree).
fn is_sampled(kernel: LinearKernel, x_load: XLoad, tree: Tree) -> bool {
    let widest = LINEAR_GEMV_ROWS[LINEAR_GEMV_ROWS.len() - 1];
    match kernel {
        LinearKernel::Gemv { rows } if rows != 1 && rows != widest => {
            x_load == XLoad::Units && tree == Tree::Shared
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::{KernelVariant, LinearPath, Tree, all_variants, attention_group};

    #[test]
    fn adapters_take_the_widest_tree_their_smallest_subgroup_holds() {
        let trees: Vec<Tree> = [None, Some(4), Some(8), Some(16), Some(32), Some(64)]
            .into_iter()
            .map(Tree::for_subgroups)
            .collect();
        let lanes = |lanes| Tree::Subgroup { lanes };
        assert_eq!(trees, [Tree::Shared, Tree::Shared, lanes(8), lanes(8), lanes(32), lanes(32)]);
    }

    /// The sequential kernel's subgroup lane and its subgroups' norm come from its tree's file,
    /// so every variant over subgroups of `sg` lanes is built with the tree of `sg` lanes.
    #[test]
    fn sequential_variants_over_subgroups_take_their_subgroups_tree() {
        for variant in all_variants() {
            if let KernelVariant::Linear { path: LinearPath::Sequential { subgroup }, tree, .. } = variant {
                let want = subgroup.map_or(Tree::Shared, |lanes| Tree::Subgroup { lanes });
                assert_eq!(tree, want, "{}", variant.label());
            }
        }
    }

    /// How many variants the portability and contract tests build: 15 single kernels (the
    /// LoRA shrink and expand, the experts' scatter and combine, gpt-oss's clamped SwiGLU and
    /// the token-id copy and Gemma's sandwich among them), 2 embeddings for each of the 16 weight types, the linear
    /// structures (30 on the five sequential paths: 3 row tiles x 2 weight sources; 20 on the
    /// K-split path: the GEMV of 1 and of 8 rows with each of the 2 activation loads and 3
    /// trees, of 2 and of 4 rows with one, and the GEMM's 3 tiles with each load) once for 15
    /// types and with all 25 prologue and epilogue pairs for f32, and 91 RoPE and attention
    /// variants for each of the 3 KV formats (2 RoPE; for each of the 6 head dimensions 1
    /// per-query, 3 split-KV and 4 subgroup ones, again with sinks at gpt-oss's head dimension
    /// 64 only; 31 flash ones, a group of each size up to `flash_max_group` (8, 6, 6, 5, 4 and 2
    /// heads), 2 with sinks at 64: groups of 1 and 8, and 7 with the Q/K norms and RoPE of their
    /// token: groups of 1 and the most at 64, 128 and 256, half-split, and 4 of 128 interleaved).
    /// Adding an option multiplies this: a
    /// new dimension should come with a reason.
    #[test]
    fn all_variants_counts_what_the_tests_build() {
        assert_eq!(all_variants().len(), 15 + 16 * 2 + 15 * 50 + 50 * 25 + 3 * (2 + 6 * 8 + 8 + 31 + 2 + 7));
    }

    /// Every weight type meets every prologue and epilogue pair, and every linear structure
    /// meets every pair (with f32 at least).
    #[test]
    fn the_sampled_linears_cover_every_type_pair_and_structure_pair() {
        use super::WEIGHT_DTYPES;
        use std::collections::HashSet;
        let mut type_pairs = HashSet::new();
        let mut structure_pairs = HashSet::new();
        for variant in all_variants() {
            if let KernelVariant::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue } =
                variant
            {
                type_pairs.insert((dtype, prologue, epilogue));
                structure_pairs.insert((
                    format!("{path:?} {kernel:?} {source:?} {x_load:?} {tree:?}"),
                    prologue,
                    epilogue,
                ));
            }
        }
        let pairs = super::prologue_epilogue_pairs().count();
        assert_eq!(pairs, 25);
        assert_eq!(type_pairs.len(), WEIGHT_DTYPES.len() * pairs);
        assert_eq!(structure_pairs.len(), 50 * pairs);
    }

    #[test]
    fn attention_groups_divide_the_heads_of_a_kv_head() {
        let groups: Vec<u32> =
            [1, 2, 3, 4, 5, 6, 7, 8, 10, 14, 16].into_iter().map(attention_group).collect();
        assert_eq!(groups, [1, 2, 3, 4, 1, 3, 1, 4, 2, 2, 4]);
    }
}
