//! The device-capability layer: which kernel variant each family uses on this adapter, and why.

use super::options::{
    AttentionStrategy, FeatureMask, Fusion, GemmRows, GemvRows, LinearStrategy, SubmitStrategy,
};
use super::shader::{
    ATTENTION_DOT_LANES, ATTENTION_MAX_GROUP, AttentionPath, CoopShape, FLASH_KEY_LANES, FLASH_MAX_GROUP,
    KernelVariant, KvFormat, LINEAR_GEMM_BANDS, LINEAR_GEMV_ROWS, LINEAR_SEQ_ROW_TILES, LinearEpilogue,
    LinearKernel, LinearPath, LinearPrologue, Tree, WeightSource, XLoad,
};
use crate::dtype::DType;

/// The KV element precision a caller asks for; [`Capabilities::kv_format`] says what it
/// becomes on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvPrecision {
    /// f16 where the adapter has SHADER_F16, else f32.
    #[default]
    Auto,
    /// Half precision (packed in u32 words without SHADER_F16).
    F16,
    /// Single precision.
    F32,
}

/// What the opened device offers pagoda, after masking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Adapter name.
    pub adapter_name: String,
    /// Backend name (`Vulkan`, `Metal`, ...).
    pub backend: String,
    /// Driver name and version.
    pub driver: String,
    /// CPU, integrated, discrete, virtual or other.
    pub device_type: String,
    /// True for CPU (software) adapters such as lavapipe.
    pub is_cpu: bool,
    /// SHADER_F16 enabled on the device.
    pub shader_f16: bool,
    /// SUBGROUP enabled on the device.
    pub subgroup: bool,
    /// Smallest and largest subgroup size the adapter reports.
    pub subgroup_sizes: (u32, u32),
    /// TIMESTAMP_QUERY enabled on the device.
    pub timestamp_query: bool,
    /// Features the adapter has but the options masked.
    pub masked: FeatureMask,
    /// True when the device runs with WebGPU's default limits instead of the adapter's.
    pub webgpu_default_limits: bool,
    /// The limits the device was created with.
    pub limits: wgpu::Limits,
    /// Linear strategy forced by the options, if any.
    pub forced_linear: Option<LinearStrategy>,
    /// Attention strategy forced by the options, if any.
    pub forced_attention: Option<AttentionStrategy>,
    /// Norm fusion forced by the options, if any.
    pub forced_norm: Option<Fusion>,
    /// RoPE + K/V write fusion forced by the options, if any.
    pub forced_rope: Option<Fusion>,
    /// Largest K-split GEMM tile forced by the options, if any.
    pub forced_gemm_rows: Option<GemmRows>,
    /// Most rows of a K-split GEMV workgroup forced by the options, if any.
    pub forced_gemv_rows: Option<GemvRows>,
    /// Weight source forced by the options, if any.
    pub forced_weight_source: Option<WeightSource>,
    /// Submit strategy forced by the options, if any.
    pub forced_submit: Option<SubmitStrategy>,
    /// Every dispatch timed with timestamp queries
    /// ([`GpuOptions::profile_kernels`](super::GpuOptions::profile_kernels)).
    pub profile_kernels: bool,
    /// The cooperative matrices the linear path takes on this adapter
    /// ([`CoopShape::choose`]), or why it offers none.
    pub coop: Result<CoopShape, String>,
}

/// The longest walk, in keys, per-query attention takes on a CPU adapter before the engine
/// chooses split-KV. Lavapipe ends every loop of a shader invocation once their iterations
/// together pass 65,535, and a per-query walk costs two a key (its score and value loops) and
/// one a block: it comes out wrong from about 31,000 keys. This keeps a quarter in hand; a
/// split-KV invocation walks 1/[`ATTENTION_SPLIT_WG`](super::shader::ATTENTION_SPLIT_WG) of it.
pub const CPU_PER_QUERY_MAX_KEYS: usize = 24_576;

/// The largest K-split prefill GEMM tile, in rows, an adapter takes unless forced (each
/// dequantized weight chunk serves that many rows). 16 on every adapter: on an H200 it
/// prefilled a Llama-3.2-1B in Q4_K at 1,372 tok/s (512 tokens) and 883 (2048), against 1,252
/// and 834 for 8 rows and 743 and 577 for 32 (8 rows × 4 columns of sums a lane).
pub const GEMM_PREFERRED_ROWS: u32 = 16;

impl Capabilities {
    /// The reduction path of the linear kernels on this device: sequential on CPU adapters
    /// (with subgroup broadcast when subgroups of a fixed size >= 8 exist), K-split elsewhere.
    pub fn linear_path(&self) -> LinearPath {
        if let Some(path) = self.coop_path() {
            return path;
        }
        let sequential = match self.forced_linear {
            Some(LinearStrategy::Sequential) => true,
            // Forced matrices the adapter lacks: the context refused to open.
            Some(LinearStrategy::KSplit | LinearStrategy::Coop | LinearStrategy::CoopEmulated(_)) => false,
            None => self.is_cpu,
        };
        if !sequential {
            return LinearPath::KSplit;
        }
        let (min, max) = self.subgroup_sizes;
        let subgroup = (self.subgroup && min == max && min >= 8).then_some(min);
        LinearPath::Sequential { subgroup }
    }

    /// The cooperative-matrix path where this device takes it: as forced, the adapter's
    /// matrices ([`Self::coop`]) or emulated ones. Per adapter: every batch, decode rows too,
    /// then takes it. Not the default where matrices are offered until the path has passed
    /// `kernels_coop` and the GPU bench on such an adapter: it has never run on one.
    fn coop_path(&self) -> Option<LinearPath> {
        match (self.forced_linear, &self.coop) {
            (Some(LinearStrategy::CoopEmulated(shape)), _) => {
                Some(LinearPath::Coop { shape, emulated: true })
            }
            (Some(LinearStrategy::Coop), Ok(shape)) => {
                Some(LinearPath::Coop { shape: *shape, emulated: false })
            }
            _ => None,
        }
    }

    /// How the K-split GEMV and split-KV attention add their partial results: the levels
    /// narrower than 8 or 32 lanes in shuffles where the adapter's smallest subgroup holds that
    /// many (the same bits; [`Tree::for_subgroups`]).
    pub fn tree(&self) -> Tree {
        Tree::for_subgroups(self.subgroup.then_some(self.subgroup_sizes.0))
    }

    /// The tree of a linear `kernel` ([`LinearPath::tree`]: [`Self::tree`] for the K-split
    /// GEMV).
    pub fn linear_tree(&self, kernel: LinearKernel) -> Tree {
        self.linear_path().tree(kernel, self.tree())
    }

    /// The linear kernel a batch of `m` rows takes on this device: on the sequential path the
    /// largest tile the batch fills; on the K-split path the GEMV while at most
    /// [`GemvRows::MAX_READS`] workgroups of [`Self::gemv_max_rows`] rows hold the batch (so
    /// each weight is read at most that many times a step), of the fewest rows that hold it
    /// up to that many, and the GEMM of [`Self::gemm_band_rows`] past it. Every kernel sums each
    /// output of a row in the same order, so which one a batch takes never changes its bits.
    pub fn linear_kernel(&self, m: usize) -> LinearKernel {
        match self.linear_path() {
            LinearPath::Sequential { .. } => {
                let rows = LINEAR_SEQ_ROW_TILES.into_iter().rev().find(|&tile| tile as usize <= m);
                LinearKernel::Sequential { rows: rows.unwrap_or(1) }
            }
            LinearPath::KSplit => {
                let most = self.gemv_max_rows();
                if m <= (GemvRows::MAX_READS * most) as usize {
                    let rows = LINEAR_GEMV_ROWS.into_iter().find(|&rows| rows as usize >= m || rows == most);
                    LinearKernel::Gemv { rows: rows.unwrap_or(most) }
                } else {
                    LinearKernel::Gemm { band_rows: self.gemm_band_rows(m) }
                }
            }
            LinearPath::Coop { shape, .. } => LinearKernel::Coop(shape.tile_for(m)),
        }
    }

    /// The most rows of x a K-split GEMV workgroup takes: as forced, else [`GemvRows::MOST`]
    /// (8: llama.cpp's most activation columns a weight read; an H200 decoded 32 requests of a
    /// Llama-3.2-1B in Q4_K slower than 8 through the GEMM's tiles of 16 rows, each tile
    /// reading the weights again and each band decoding them again).
    pub fn gemv_max_rows(&self) -> u32 {
        self.forced_gemv_rows.unwrap_or(GemvRows::MOST).rows()
    }

    /// The tree of an attention kernel on `path`: [`Self::tree`] for split-KV, whose variants
    /// are the only attention ones built with a subgroup tree.
    pub fn attention_tree(&self, path: AttentionPath) -> Tree {
        match path {
            AttentionPath::SplitKv => self.tree(),
            AttentionPath::PerQuery | AttentionPath::PerQuerySubgroup | AttentionPath::Flash => Tree::Shared,
        }
    }

    /// Where the linear and embedding kernels read weights from: textures on the sequential
    /// path of a CPU adapter (lavapipe gathers a texel for all lanes at once but loads storage
    /// words lane by lane), buffers elsewhere and always on the K-split path.
    pub fn weight_source(&self) -> WeightSource {
        self.weight_source_and_reason().0
    }

    /// [`Self::weight_source`] and why, in words.
    fn weight_source_and_reason(&self) -> (WeightSource, &'static str) {
        match self.linear_path() {
            LinearPath::KSplit => return (WeightSource::Buffer, "the k-split path"),
            LinearPath::Coop { .. } => return (WeightSource::Buffer, "the cooperative-matrix path"),
            LinearPath::Sequential { .. } => {}
        }
        match self.forced_weight_source {
            Some(source) => (source, "forced"),
            None if self.is_cpu => (WeightSource::Texture, "CPU adapter"),
            None => (WeightSource::Buffer, "not a CPU adapter"),
        }
    }

    /// The attention kernel on this device for contexts up to [`CPU_PER_QUERY_MAX_KEYS`] keys:
    /// per query on CPU adapters (one subgroup per token and group of a KV head's query heads
    /// where subgroups have [`ATTENTION_DOT_LANES`] lanes, else one invocation per token and
    /// head), flash attention on other adapters with subgroups of at least
    /// [`ATTENTION_DOT_LANES`] lanes (discrete and integrated GPUs), split-KV on the rest.
    pub fn attention_path(&self) -> AttentionPath {
        self.attention_path_for(0)
    }

    /// True when the adapter can run flash attention: subgroups of at least
    /// [`ATTENTION_DOT_LANES`] lanes (the dimension lanes' shuffles stay inside one).
    pub fn supports_flash_attention(&self) -> bool {
        self.subgroup && self.subgroup_sizes.0 >= ATTENTION_DOT_LANES
    }

    /// The attention kernel for a layer whose queries walk at most `keys` keys (the block
    /// table's width in tokens, or the sliding window): [`Self::attention_path`], except that a
    /// CPU adapter not forced to per-query takes split-KV past [`CPU_PER_QUERY_MAX_KEYS`], where
    /// one invocation's walk would outrun lavapipe's loop limit. The engine's block tables are
    /// as wide as the most blocks a request may hold
    /// ([`crate::core::cache_config::CacheConfig::max_blocks_per_seq`]), so the choice depends
    /// on the model and the engine's configuration only, never on a batch.
    ///
    /// Forced `flash` on an adapter without such subgroups takes split-KV
    /// ([`Self::supports_flash_attention`]); a CPU adapter takes flash only when forced.
    pub fn attention_path_for(&self, keys: usize) -> AttentionPath {
        let flash = self.supports_flash_attention();
        match (self.forced_attention, self.is_cpu && keys <= CPU_PER_QUERY_MAX_KEYS) {
            (Some(AttentionStrategy::PerQuery), _) | (None, true) if self.has_attention_lanes() => {
                AttentionPath::PerQuerySubgroup
            }
            (Some(AttentionStrategy::PerQuery), _) | (None, true) => AttentionPath::PerQuery,
            (Some(AttentionStrategy::Flash), _) if flash => AttentionPath::Flash,
            (None, false) if flash && !self.is_cpu => AttentionPath::Flash,
            (Some(AttentionStrategy::SplitKv | AttentionStrategy::Flash), _) | (None, false) => {
                AttentionPath::SplitKv
            }
        }
    }

    /// How [`Self::variant_summary`] says which tree the GEMV and split-KV take.
    fn tree_words(&self) -> String {
        match self.tree() {
            Tree::Subgroup { lanes } => format!("the tree's levels under {lanes} lanes in subgroup shuffles"),
            Tree::Shared => "every level of the tree in workgroup memory".to_string(),
        }
    }

    /// Why attention runs per query: forced, or a CPU adapter (which takes split-KV past
    /// [`CPU_PER_QUERY_MAX_KEYS`] keys).
    fn per_query_reason(&self) -> String {
        match self.forced_attention {
            Some(_) => "forced".to_string(),
            None => format!("CPU adapter; split-KV for contexts past {CPU_PER_QUERY_MAX_KEYS} keys"),
        }
    }

    /// True when the subgroups have exactly [`ATTENTION_DOT_LANES`] lanes, the one size the
    /// per-query subgroup kernel's sums are written for (lavapipe on 256-bit vectors).
    fn has_attention_lanes(&self) -> bool {
        self.subgroup && self.subgroup_sizes == (ATTENTION_DOT_LANES, ATTENTION_DOT_LANES)
    }

    /// True when the RMSNorm before a linear `kernel` is fused into it: as
    /// forced, else in tiles of one row (decode of one sequence: the K-split GEMV of one row, and
    /// the sequential path's one-row tile) in the K-split GEMV, whose workgroup computes its
    /// row's scale once for all its invocations, and on the sequential path where its subgroups
    /// sum the scale without barriers ([`LinearPath::norms_in_subgroups`]: on lavapipe the
    /// default model's decode steps then take 154 dispatches instead of 215, about 70 µs less
    /// host time and the same device time within the machine's noise; with the workgroup's tree
    /// and its barriers they took 10–15% longer on the device). Not in larger tiles, where every
    /// workgroup norms all its rows again: on an H200 a 32-request decode step of a
    /// Llama-3.2-1B in Q4_K took 55 ms fused and 39 ms with its own norm dispatches, 4,096
    /// tokens of prefill 1.46 s and 1.02 s, while batch 1 took 4.59 ms fused and 5.14 ms apart;
    /// on lavapipe a 128-token prefill with the subgroups' norms fused took 10–30% longer, and
    /// its normed linears 35–47% longer in decode tiles of 4 and 8 rows. Fused or not, the
    /// linears get the same bits. The GEMV over several rows takes the larger tiles' choice:
    /// each of its workgroups would read all its rows twice, once for their scales.
    pub fn fuses_norms(&self, kernel: LinearKernel) -> bool {
        let path = self.linear_path();
        match self.forced_norm {
            Some(strategy) => strategy == Fusion::Fused,
            None => kernel.rows() == 1 && (path == LinearPath::KSplit || path.norms_in_subgroups()),
        }
    }

    /// True when RoPE and the paged K/V write run in the Q/K/V projections' epilogue (where the
    /// model allows it): on every path unless forced apart. The epilogue's work is the
    /// separate kernel's, a pair of columns at a time, so only the dispatch goes.
    pub fn fuses_rope(&self) -> bool {
        self.forced_rope != Some(Fusion::Separate)
    }

    /// How a step's dispatches reach the queue: whole while kernels are timed, else as forced,
    /// else in one command buffer on CPU adapters and in chunks elsewhere (see
    /// [`SubmitStrategy`]).
    pub fn submit_strategy(&self) -> SubmitStrategy {
        self.submit_strategy_and_reason().0
    }

    /// [`Self::submit_strategy`] and why, in words.
    fn submit_strategy_and_reason(&self) -> (SubmitStrategy, &'static str) {
        match self.forced_submit {
            _ if self.profile_kernels => (SubmitStrategy::Whole, "kernels timed"),
            Some(strategy) => (strategy, "forced"),
            None if self.is_cpu => (SubmitStrategy::Whole, "CPU adapter"),
            None => (SubmitStrategy::Chunked, "not a CPU adapter"),
        }
    }

    /// The most rows a K-split prefill GEMM tile takes on this device: as forced, else
    /// [`GEMM_PREFERRED_ROWS`], lowered while its workgroup memory (with the norm's when norms
    /// are fused) exceeds the device's.
    pub fn gemm_max_rows(&self) -> u32 {
        if let Some(forced) = self.forced_gemm_rows {
            return forced.rows();
        }
        let rows =
            GemmRows::ALL.into_iter().rev().find(|&rows| rows <= GEMM_PREFERRED_ROWS && self.gemm_fits(rows));
        rows.unwrap_or(GemmRows::ALL[0])
    }

    /// True when a GEMM tile of `rows` rows (with the norm when norms are fused) fits the
    /// device's workgroup memory.
    pub fn gemm_fits(&self, rows: u32) -> bool {
        let kernel = LinearKernel::Gemm { band_rows: rows / LINEAR_GEMM_BANDS };
        let prologue = if self.fuses_norms(kernel) { LinearPrologue::RmsNorm } else { LinearPrologue::Plain };
        // The weight type and the epilogue do not change the memory.
        let variant = KernelVariant::Linear {
            dtype: DType::F16,
            source: WeightSource::Buffer,
            path: LinearPath::KSplit,
            kernel,
            x_load: XLoad::Words,
            tree: Tree::Shared,
            prologue,
            epilogue: LinearEpilogue::Store,
        };
        // naga's layout of the composed shader's workgroup memory (reflected once a process).
        variant.reflect().is_ok_and(|r| r.workgroup_bytes <= self.limits.max_compute_workgroup_storage_size)
    }

    /// Rows each band of the K-split GEMM computes for a batch of `m` rows: the largest tile up
    /// to [`Self::gemm_max_rows`] that the batch fills, else the smallest. Every tile gives each
    /// output the GEMV's reduction order, so choosing by `m` keeps rows batch-invariant.
    pub fn gemm_band_rows(&self, m: usize) -> u32 {
        let max = self.gemm_max_rows();
        let rows = GemmRows::ALL.into_iter().rev().find(|&rows| rows <= max && rows as usize <= m);
        rows.unwrap_or(GemmRows::ALL[0]) / LINEAR_GEMM_BANDS
    }

    /// The pool format for a requested KV precision: `Auto` is f16 with SHADER_F16 and f32
    /// without; f16 is rounded by shader-f16's conversion with SHADER_F16 and by `pack2x16float`
    /// without (a pair to a u32 word either way).
    pub fn kv_format(&self, requested: KvPrecision) -> KvFormat {
        match (requested, self.shader_f16) {
            (KvPrecision::F32, _) | (KvPrecision::Auto, false) => KvFormat::F32,
            (KvPrecision::F16, false) => KvFormat::F16Packed,
            (KvPrecision::F16 | KvPrecision::Auto, true) => KvFormat::F16Native,
        }
    }

    /// Which variant each kernel family uses and why, one family a line (for `pagoda info`).
    pub fn variant_summary(&self) -> String {
        [
            self.linear_line(),
            self.coop_line(),
            self.kv_line(),
            self.attention_line(),
            self.weights_line(),
            self.norm_line(),
            self.rope_line(),
            self.submit_line(),
            "embedding/rms_norm/rope_cache/gated_mul/add/gather/top_k: one kernel each, specialised by weight type and source, KV format, Q/K norms or activation"
                .into(),
        ]
        .join("\n")
    }

    /// [`Self::variant_summary`]'s line for the linear layers.
    fn linear_line(&self) -> String {
        match self.linear_path() {
            LinearPath::KSplit => format!(
                "linear: k-split, {} invocations per output each summing runs of 16 weights through its format's lane_partial and a fixed tree, decode reading {} weight rows a workgroup with {} ({}), each run decoded once for up to {} rows ({}); prefill and batches of more than {} rows as a GEMM of up to {} rows ({}) by {} weight rows, the same lanes' runs for every row",
                super::shader::LINEAR_WG,
                super::shader::LINEAR_KSPLIT_COLS,
                self.tree_words(),
                if self.forced_linear.is_some() { "forced" } else { "not a CPU adapter" },
                self.gemv_max_rows(),
                if self.forced_gemv_rows.is_some() { "forced" } else { "the default" },
                GemvRows::MAX_READS * self.gemv_max_rows(),
                self.gemm_max_rows(),
                if self.forced_gemm_rows.is_some() { "forced" } else { "the default" },
                super::shader::LINEAR_KSPLIT_COLS,
            ),
            LinearPath::Sequential { subgroup: Some(sg) } => format!(
                "linear: sequential K loop, activations shared by subgroupBroadcast over {sg} lanes ({}, subgroups of fixed size {sg})",
                if self.forced_linear.is_some() { "forced" } else { "CPU adapter" },
            ),
            LinearPath::Coop { shape, emulated } => {
                let [decode, prefill] = shape.tiles();
                format!(
                    "linear: cooperative matrices of {}{} ({}), f32 sums, every batch in the same k-steps of {} (decode rows padded to the matrix): batches of up to {} rows in tiles of {}x{}, larger ones of {}x{}, the weights dequantized by their format's groups of 8 into workgroup memory",
                    shape.name(),
                    if emulated { " emulated in plain arithmetic" } else { "" },
                    if self.forced_linear.is_some() { "forced" } else { "the adapter offers them" },
                    shape.size,
                    shape.size,
                    decode.rows,
                    decode.cols,
                    prefill.rows,
                    prefill.cols,
                )
            }
            LinearPath::Sequential { subgroup: None } => format!(
                "linear: sequential K loop, plain loads ({})",
                if self.masked.subgroup {
                    "subgroups masked"
                } else if !self.subgroup {
                    "no subgroups"
                } else {
                    "subgroup size not fixed or below 8"
                }
            ),
        }
    }

    /// [`Self::variant_summary`]'s line for the cooperative matrices: which the adapter offers
    /// and whether the linear path takes them, or why it offers none.
    fn coop_line(&self) -> String {
        let taken = matches!(self.linear_path(), LinearPath::Coop { emulated: false, .. });
        match &self.coop {
            Ok(shape) if taken => format!("cooperative matrices: {} taken by the linear path", shape.name()),
            Ok(shape) => format!(
                "cooperative matrices: {} offered, not taken (not yet run on such hardware: PAGODA_LINEAR=coop takes them)",
                shape.name()
            ),
            Err(why) => format!("cooperative matrices: none ({why})"),
        }
    }

    /// [`Self::variant_summary`]'s line for the KV cache's format.
    fn kv_line(&self) -> String {
        match self.kv_format(KvPrecision::Auto) {
            KvFormat::F16Native => "kv cache (auto): f16 rounded by shader-f16's conversion, a pair to a u32 word (shader-f16 present)".to_string(),
            _ => format!(
                "kv cache (auto): f32 ({}); f16 on request packs f16 pairs in u32 words",
                if self.masked.f16 { "shader-f16 masked" } else { "no shader-f16" }
            ),
        }
    }

    /// [`Self::variant_summary`]'s line for attention.
    fn attention_line(&self) -> String {
        match self.attention_path() {
            AttentionPath::PerQuery => format!(
                "attention: one invocation per (token, head), KV walked block by block with online softmax ({}, {})",
                self.per_query_reason(),
                if self.masked.subgroup {
                    "subgroups masked"
                } else if self.subgroup {
                    "subgroups not of 8 lanes"
                } else {
                    "no subgroups"
                }
            ),
            AttentionPath::PerQuerySubgroup => format!(
                "attention: one subgroup of {ATTENTION_DOT_LANES} lanes per token and up to {ATTENTION_MAX_GROUP} query heads of a KV head (each key and value read once for them), each lane every {ATTENTION_DOT_LANES}th pair of dimensions, KV walked block by block with online softmax ({}, subgroups of {ATTENTION_DOT_LANES})",
                self.per_query_reason()
            ),
            AttentionPath::SplitKv => format!(
                "attention: split-KV, the n keys a (token, head) sees in partitions of ceil(n / {}) keys, at most {}, an invocation walking each (several past {} keys), combined in a fixed tree with {} ({})",
                super::shader::ATTENTION_SPLIT_WG,
                super::shader::KV_PARTITION_TOKENS,
                super::shader::ATTENTION_SPLIT_WG * super::shader::KV_PARTITION_TOKENS,
                self.tree_words(),
                match self.forced_attention {
                    Some(AttentionStrategy::Flash) => "flash forced, but no subgroups of 8 lanes or more",
                    Some(_) => "forced",
                    None if self.is_cpu => "CPU adapter, contexts past the per-query walk",
                    None => "no subgroups of 8 lanes or more",
                }
            ),
            AttentionPath::Flash => format!(
                "attention: flash, one workgroup per token and up to {} query heads of a KV head (each key and value read once for them), {FLASH_KEY_LANES} key lanes each walking every {FLASH_KEY_LANES}th key of the context in {ATTENTION_DOT_LANES} dimension lanes (q·k summed by subgroup shuffles), the key lanes combined in a fixed tree ({})",
                FLASH_MAX_GROUP,
                if self.forced_attention.is_some() {
                    "forced"
                } else {
                    "not a CPU adapter, subgroups of 8 lanes or more"
                }
            ),
        }
    }

    /// [`Self::variant_summary`]'s line for where weights are read from.
    fn weights_line(&self) -> String {
        let (source, reason) = self.weight_source_and_reason();
        format!(
            "weights: {} ({reason})",
            match source {
                WeightSource::Texture => "rgba32uint textures, a texel fetched for all lanes at once",
                WeightSource::Buffer => "storage buffers",
            },
        )
    }

    /// [`Self::variant_summary`]'s line for the RMSNorm before a linear.
    fn norm_line(&self) -> String {
        format!(
            "rms_norm before a linear: {} ({})",
            match (
                self.fuses_norms(LinearKernel::Gemv { rows: 1 }),
                self.fuses_norms(LinearKernel::Gemv { rows: 2 })
            ) {
                (true, true) => "fused into the linear",
                (true, false) => "fused into one-row (decode) linears, its own dispatch before larger tiles",
                (false, _) => "its own dispatch",
            },
            if self.forced_norm.is_some() { "forced" } else { "follows the linear path" }
        )
    }

    /// [`Self::variant_summary`]'s line for RoPE and the KV write.
    fn rope_line(&self) -> String {
        format!(
            "rope + kv write: {} ({})",
            if self.fuses_rope() {
                "in the q/k/v projections' epilogue where the model has no q/k norms, else its own dispatch"
            } else {
                "its own dispatch"
            },
            if self.forced_rope.is_some() { "forced" } else { "default" }
        )
    }

    /// [`Self::variant_summary`]'s line for how a step is submitted.
    fn submit_line(&self) -> String {
        let (strategy, reason) = self.submit_strategy_and_reason();
        format!(
            "submission: {} ({reason})",
            match strategy {
                SubmitStrategy::Whole => "one command buffer a step".to_string(),
                SubmitStrategy::Chunked => format!(
                    "command buffers submitted as the step is recorded, the first of {} dispatches, each next twice as long up to {}",
                    SubmitStrategy::FIRST_CHUNK,
                    SubmitStrategy::MAX_CHUNK
                ),
            },
        )
    }

    /// Adapter, backend, features and the limits that matter, one item a line.
    pub fn device_summary(&self) -> String {
        let l = &self.limits;
        let on = |b: bool| if b { "yes" } else { "no" };
        format!(
            "adapter: {} ({}, {})\ndriver: {}\nfeatures: shader-f16 {}, subgroup {} (sizes {}..{}), timestamp-query {}{}\n\
             limits{}: binding {} MiB, buffer {} MiB, workgroup storage {} KiB, invocations {}, storage buffers/stage {}",
            self.adapter_name,
            self.backend,
            self.device_type,
            self.driver,
            on(self.shader_f16),
            on(self.subgroup),
            self.subgroup_sizes.0,
            self.subgroup_sizes.1,
            on(self.timestamp_query),
            match (self.masked.f16, self.masked.subgroup) {
                (false, false) => String::new(),
                (f, s) =>
                    format!(" [masked:{}{}]", if f { " f16" } else { "" }, if s { " subgroup" } else { "" }),
            },
            if self.webgpu_default_limits { " (WebGPU defaults)" } else { "" },
            l.max_storage_buffer_binding_size >> 20,
            l.max_buffer_size >> 20,
            l.max_compute_workgroup_storage_size >> 10,
            l.max_compute_invocations_per_workgroup,
            l.max_storage_buffers_per_shader_stage,
        )
    }
}
