//! The linear family, `y = x · Wᵀ` for every weight type: the sequential K loop
//! (`shaders/linear_seq.wgsl`), the K-split decode GEMV (`linear_ksplit.wgsl`) and prefill GEMM
//! (`linear_gemm.wgsl`), and the cooperative-matrix tiles (`linear_coop.wgsl`,
//! [`crate::gpu::linear_coop`]): the paths ([`LinearPath`]) and kernels ([`LinearKernel`]) a
//! variant is built with, the constants they are sized by, and each variant's label, workgroup
//! size, files and injected constants, and what a kernel does to its input rows first
//! ([`LinearPrologue`]). What it does with each output is in [`super::linear_epilogue`]; the
//! weight formats' files are in [`super::weights`].

use super::family::{Family, Injected, ShaderFile, shader_file};
use super::linear_epilogue::LinearEpilogue;
use super::norm::{scale_constants, scale_file};
use super::params::{KernelParams, LinearParams, ParamsLayout};
use super::tree::Tree;
use super::unroll::{select_epilogue, unroll};
use super::weights::{WeightSource, weight_files};
use super::{KernelVariant, WORKGROUP_SIZE};
use crate::gpu::linear_coop::{CoopElem, CoopShape, CoopTile, LINEAR_COOP_WG};

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
    /// Reads x as stored, each row through the rows of the expert its id names of a stacked
    /// weight (`shaders/wfirst_ids.wgsl`, llama.cpp's `mul_mat_id`), and the bias epilogue
    /// through that expert's row of stacked biases: kernels of one row a tile.
    ExpertRows,
}

impl LinearPrologue {
    /// The prologues every linear structure is built with ([`Self::ExpertRows`] runs on the
    /// one-row kernels only).
    pub const ALL: [LinearPrologue; 3] = [Self::Plain, Self::RmsNorm, Self::SandwichNorm];

    /// What a variant's label says of the prologue.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Plain => "",
            Self::RmsNorm => "rms-",
            Self::SandwichNorm => "sandwich-",
            Self::ExpertRows => "ids-",
        }
    }

    /// The files of the input's loads (`xin`): a fused norm's scales (each subgroup's own with
    /// `norm_in_lanes`) and its weight, loaded as `x_load` loads the activations; then where
    /// the weight's rows start (`wfirst`).
    pub(super) fn files(self, x_load: XLoad, norm_in_lanes: bool) -> Vec<ShaderFile> {
        let first = match self {
            Self::ExpertRows => shader_file!("wfirst_ids.wgsl"),
            _ => shader_file!("wfirst_weight.wgsl"),
        };
        [self.input_files(x_load, norm_in_lanes), vec![first]].concat()
    }

    fn input_files(self, x_load: XLoad, norm_in_lanes: bool) -> Vec<ShaderFile> {
        let input = match self {
            Self::Plain | Self::ExpertRows => return vec![shader_file!("xin_plain.wgsl")],
            Self::RmsNorm => shader_file!("xin_rms_norm.wgsl"),
            Self::SandwichNorm => shader_file!("xin_sandwich.wgsl"),
        };
        let weight = match x_load {
            XLoad::Words => shader_file!("xnorm_f32.wgsl"),
            XLoad::Units => shader_file!("xnorm_vec4.wgsl"),
        };
        vec![scale_file(norm_in_lanes), weight, input]
    }

    /// The file of the activations' loads (`xsrc`) as `x_load` loads them: with the sandwich,
    /// also the previous projection's output and the post-norm's weight.
    pub(super) fn activations_file(self, x_load: XLoad) -> ShaderFile {
        match (self, x_load) {
            (Self::SandwichNorm, XLoad::Words) => shader_file!("xsrc_sandwich_f32.wgsl"),
            (Self::SandwichNorm, XLoad::Units) => shader_file!("xsrc_sandwich_vec4.wgsl"),
            (_, XLoad::Words) => shader_file!("xsrc_f32.wgsl"),
            (_, XLoad::Units) => shader_file!("xsrc_vec4.wgsl"),
        }
    }

    /// The constants of a fused norm's scales over `rows` rows of x.
    pub(super) fn constants(self, rows: u32) -> Vec<Injected> {
        match self {
            Self::Plain | Self::ExpertRows => Vec::new(),
            Self::RmsNorm | Self::SandwichNorm => scale_constants(rows),
        }
    }
}

/// Partial sums a K-split GEMM of `band_rows` rows a band passes down its tree at once (`TILE`,
/// its workgroup memory): half the lanes of every band, all their outputs.
fn gemm_exchange_floats(band_rows: u32) -> u32 {
    LINEAR_WG / 2 * LINEAR_GEMM_BANDS * band_rows * LINEAR_KSPLIT_COLS
}

// The rotary epilogue takes a tile's columns in pairs.
const _: () = assert!(LINEAR_SEQ_COLS.is_multiple_of(2) && LINEAR_KSPLIT_COLS.is_multiple_of(2));
// A subgroup size that divides the sequential workgroup divides the norm's partials
// (rms_scale_lanes.wgsl gives each lane WORKGROUP_SIZE / size of them).
const _: () = assert!(WORKGROUP_SIZE.is_multiple_of(LINEAR_SEQ_WG));

/// Output columns one invocation (sequential path) or workgroup (K-split, cooperative) of
/// `kernel` on `path` computes with `epilogue`: its weight rows over the epilogue's gates.
pub(super) fn columns_tile(path: LinearPath, kernel: LinearKernel, epilogue: LinearEpilogue) -> u32 {
    match (path, kernel) {
        (LinearPath::Sequential { .. }, _) => LINEAR_SEQ_COLS / epilogue.gates(),
        (LinearPath::KSplit, _) => LINEAR_KSPLIT_COLS / epilogue.gates(),
        (_, LinearKernel::Coop(tile)) => tile.cols / epilogue.gates(),
        _ => 1,
    }
}

/// The family of [`KernelVariant::Linear`].
pub(super) struct Linear;

impl Family for Linear {
    fn label(&self, variant: &KernelVariant) -> String {
        let KernelVariant::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue } =
            *variant
        else {
            return String::new();
        };
        let path = match path {
            LinearPath::Sequential { subgroup: Some(sg) } => format!("seq-sg{sg}"),
            LinearPath::Sequential { subgroup: None } => "seq".into(),
            LinearPath::KSplit => "ksplit".into(),
            LinearPath::Coop { shape, emulated } => {
                format!("coop{}-{}", if emulated { "-emulated" } else { "" }, shape.name())
            }
        };
        let norm = prologue.name();
        let x_load = match x_load {
            XLoad::Words => "",
            XLoad::Units => "-x16",
        };
        let (dtype, epilogue, source, tree, tile) =
            (dtype.name(), epilogue.name(), source.suffix(), tree.suffix(), kernel.label());
        format!("linear/{dtype}{source}/{path}{x_load}{tree}/{tile}/{norm}{epilogue}")
    }

    fn workgroup(&self, variant: &KernelVariant) -> (u32, &'static str) {
        let KernelVariant::Linear { kernel, .. } = *variant else {
            return (WORKGROUP_SIZE, "WORKGROUP_SIZE");
        };
        match kernel {
            LinearKernel::Sequential { .. } => (LINEAR_SEQ_WG, "LINEAR_SEQ_WG"),
            LinearKernel::Gemv { .. } => (LINEAR_WG, "LINEAR_WG"),
            LinearKernel::Gemm { .. } => (LINEAR_GEMM_WG, "LINEAR_GEMM_WG"),
            LinearKernel::Coop(_) => (LINEAR_COOP_WG, "LINEAR_COOP_WG"),
        }
    }

    /// The rotary epilogue into f16 rounded by shader-f16, and the matrices of f16 inputs.
    fn needs_f16(&self, variant: &KernelVariant) -> bool {
        let KernelVariant::Linear { path, epilogue, .. } = *variant else { return false };
        let f16_matrices =
            matches!(path, LinearPath::Coop { shape, emulated: false } if shape.elem == CoopElem::F16);
        epilogue.needs_f16() || f16_matrices
    }

    /// The sequential path over subgroups, the cooperative-matrix path (emulated too) and the
    /// subgroup trees.
    fn needs_subgroup(&self, variant: &KernelVariant) -> bool {
        let KernelVariant::Linear { path, tree, .. } = *variant else { return false };
        matches!(path, LinearPath::Sequential { subgroup: Some(_) } | LinearPath::Coop { .. })
            || matches!(tree, Tree::Subgroup { .. })
    }

    /// The cooperative-matrix path, not emulated.
    fn needs_coop(&self, variant: &KernelVariant) -> bool {
        matches!(*variant, KernelVariant::Linear { path: LinearPath::Coop { emulated: false, .. }, .. })
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        LinearParams::LAYOUT
    }

    /// Its tree's, the common parts and the activations' loads, the weight format's, the
    /// input's (a fused norm's scales and weights), the kernel's body and its epilogue's.
    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        let KernelVariant::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue } =
            *variant
        else {
            return Vec::new();
        };
        let body = match (path, kernel) {
            (LinearPath::Sequential { subgroup: Some(_) }, _) => {
                vec![shader_file!("xload_subgroup.wgsl"), shader_file!("linear_seq.wgsl")]
            }
            (_, LinearKernel::Sequential { .. }) => {
                vec![shader_file!("xload_direct.wgsl"), shader_file!("linear_seq.wgsl")]
            }
            (_, LinearKernel::Gemv { .. }) => vec![shader_file!("linear_ksplit.wgsl")],
            (_, LinearKernel::Gemm { .. }) => vec![shader_file!("linear_gemm.wgsl")],
            (_, LinearKernel::Coop(_)) => coop_files(path),
        };
        [
            vec![tree.file(), shader_file!("linear_common.wgsl"), prologue.activations_file(x_load)],
            weight_files(dtype, source),
            prologue.files(x_load, norm_in_lanes(path, tree)),
            body,
            epilogue.files(),
        ]
        .concat()
    }

    /// A fused norm's, the tree's and the weight texture's, then its row and column tiles, and
    /// for the K-split kernels the gates and the GEMM's bands and tree exchange.
    fn constants(&self, variant: &KernelVariant) -> Vec<Injected> {
        let KernelVariant::Linear { source, path, kernel, tree, prologue, epilogue, .. } = *variant else {
            return Vec::new();
        };
        let mut out = prologue.constants(kernel.rows());
        out.extend(tree.constants());
        out.extend(source.constants());
        let tm = Injected::new("TM", kernel.row_tile(), "LinearKernel::row_tile");
        let gates = Injected::new("GATES", epilogue.gates(), "LinearEpilogue::gates (gate and up rows)");
        let tn = Injected::new(
            "TN",
            columns_tile(path, kernel, epilogue),
            match path {
                LinearPath::Sequential { .. } => "KernelVariant::columns_tile (shader::LINEAR_SEQ_COLS rows)",
                LinearPath::KSplit => "KernelVariant::columns_tile (shader::LINEAR_KSPLIT_COLS weight rows)",
                LinearPath::Coop { .. } => "KernelVariant::columns_tile (CoopTile::cols weight rows)",
            },
        );
        let tiles = match kernel {
            LinearKernel::Sequential { .. } => vec![tm, tn],
            LinearKernel::Gemv { .. } => vec![tm, tn, gates],
            LinearKernel::Gemm { band_rows } => {
                let bands = Injected::new("BANDS", LINEAR_GEMM_BANDS, "shader::LINEAR_GEMM_BANDS");
                let tile =
                    Injected::new("TILE", gemm_exchange_floats(band_rows), "shader::gemm_exchange_floats");
                vec![tm, tn, gates, bands, tile]
            }
            LinearKernel::Coop(tile) => {
                let LinearPath::Coop { shape, .. } = path else { return out };
                vec![
                    Injected::new("MT", tile.rows, "CoopTile::rows"),
                    Injected::new("NT", tile.cols, "CoopTile::cols"),
                    Injected::new("KT", tile.depth, "CoopTile::depth"),
                    Injected::new("CS", shape.size, "CoopShape::size"),
                    gates,
                ]
            }
        };
        out.extend(tiles);
        out
    }

    /// The epilogue's lines kept (`PLAIN`, `GATED`, `PAIRED`) and the tile's rows and columns
    /// written out (`ROWS`, `COLS`, `PAIRS`).
    fn expand(&self, variant: &KernelVariant, src: String) -> String {
        let KernelVariant::Linear { path, kernel, epilogue, .. } = *variant else { return src };
        unroll(
            &select_epilogue(&src, epilogue.shape()),
            kernel.row_tile(),
            columns_tile(path, kernel, epilogue),
        )
    }
}

/// True when each subgroup of a normed variant on `path` with `tree` computes its RMSNorm
/// scales on its own (`rms_scale_lanes.wgsl`: [`LinearPath::norms_in_subgroups`]).
fn norm_in_lanes(path: LinearPath, tree: Tree) -> bool {
    match (path, tree) {
        (LinearPath::Sequential { subgroup: Some(sg) }, Tree::Subgroup { lanes }) => {
            lanes == sg && path.norms_in_subgroups()
        }
        _ => false,
    }
}

/// The cooperative-matrix kernel's files on `path` (none off it): its inputs' type, the
/// matrices (or their emulation) and the kernel (see [`crate::gpu::linear_coop`]).
fn coop_files(path: LinearPath) -> Vec<ShaderFile> {
    let LinearPath::Coop { shape, emulated } = path else { return Vec::new() };
    let input = match (shape.elem, emulated) {
        (CoopElem::F16, false) => shader_file!("coop_in_f16.wgsl"),
        (CoopElem::F16, true) => shader_file!("coop_in_f16_emu.wgsl"),
        (CoopElem::F32, _) => shader_file!("coop_in_f32.wgsl"),
    };
    let multiply = match (emulated, shape.size) {
        (true, _) => vec![shader_file!("coop_mma_emu.wgsl")],
        (false, 8) => vec![shader_file!("coop_mat8.wgsl"), shader_file!("coop_mma.wgsl")],
        (false, _) => vec![shader_file!("coop_mat16.wgsl"), shader_file!("coop_mma.wgsl")],
    };
    [vec![input], multiply, vec![shader_file!("linear_coop.wgsl")]].concat()
}
