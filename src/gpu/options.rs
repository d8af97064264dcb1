//! How to pick and configure the device: backend, adapter, masked features, limits.

use super::GpuError;
use super::shader::{LINEAR_GEMM_BAND_ROWS, LINEAR_GEMM_BANDS, LINEAR_GEMV_ROWS, WeightSource};

/// A graphics API wgpu can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// Vulkan (Linux, Windows, Android; lavapipe in CI).
    Vulkan,
    /// Metal (macOS, iOS).
    Metal,
    /// Direct3D 12 (Windows).
    Dx12,
    /// OpenGL / GLES.
    Gl,
}

impl BackendChoice {
    /// Parses `vulkan`, `metal`, `dx12` or `gl` (case-insensitive).
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => Ok(Self::Vulkan),
            "metal" | "mtl" => Ok(Self::Metal),
            "dx12" | "d3d12" => Ok(Self::Dx12),
            "gl" | "gles" | "opengl" => Ok(Self::Gl),
            other => Err(GpuError::BadOption(format!("unknown backend `{other}` (vulkan, metal, dx12, gl)"))),
        }
    }

    pub(crate) fn backends(self) -> wgpu::Backends {
        match self {
            Self::Vulkan => wgpu::Backends::VULKAN,
            Self::Metal => wgpu::Backends::METAL,
            Self::Dx12 => wgpu::Backends::DX12,
            Self::Gl => wgpu::Backends::GL,
        }
    }
}

/// Optional device features pagoda can use, each of which can be masked off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureMask {
    /// Do not use SHADER_F16 even if the adapter has it.
    pub f16: bool,
    /// Do not use SUBGROUP even if the adapter has it.
    pub subgroup: bool,
}

impl FeatureMask {
    /// Parses a comma-separated list such as `f16,subgroup` (empty means none).
    pub fn parse(list: &str) -> Result<Self, GpuError> {
        let mut mask = Self::default();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name.to_ascii_lowercase().as_str() {
                "f16" | "shader-f16" | "shader_f16" => mask.f16 = true,
                "subgroup" | "subgroups" => mask.subgroup = true,
                other => {
                    return Err(GpuError::BadOption(format!("unknown feature `{other}` (f16, subgroup)")));
                }
            }
        }
        Ok(mask)
    }

    /// Features masked in either.
    pub fn union(self, other: Self) -> Self {
        Self { f16: self.f16 || other.f16, subgroup: self.subgroup || other.subgroup }
    }

    /// The wgpu features it masks.
    pub fn features(self) -> wgpu::Features {
        let mut features = wgpu::Features::empty();
        features.set(wgpu::Features::SHADER_F16, self.f16);
        features.set(wgpu::Features::SUBGROUP, self.subgroup);
        features
    }
}

/// Forces the linear kernels' reduction strategy instead of choosing it from the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearStrategy {
    /// One invocation per output, sequential K loop (CPU drivers).
    Sequential,
    /// K split across a workgroup (discrete GPUs).
    KSplit,
}

impl LinearStrategy {
    /// `sequential` (`seq`) or `ksplit` (`k-split`), any case.
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "sequential" | "seq" => Ok(Self::Sequential),
            "ksplit" | "k-split" => Ok(Self::KSplit),
            other => {
                Err(GpuError::BadOption(format!("unknown linear strategy `{other}` (sequential, ksplit)")))
            }
        }
    }
}

/// Forces the attention kernel instead of choosing it from the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionStrategy {
    /// Each query walks its whole context: one subgroup per token and group of a KV head's
    /// query heads where subgroups have 8 lanes, else one invocation per (token, head) (CPU
    /// drivers).
    PerQuery,
    /// The context cut into partitions fixed by its length, one invocation each, combined in
    /// a fixed tree (GPUs without subgroups of at least 8 lanes).
    SplitKv,
    /// Flash-decoding: one workgroup per token and group of a KV head's query heads, its lanes
    /// over the keys and the head's dimensions (GPUs with subgroups of at least 8 lanes:
    /// `src/gpu/attention_flash.rs`).
    Flash,
}

impl AttentionStrategy {
    /// `per-query`, `split-kv` or `flash`, any case.
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "per-query" | "perquery" => Ok(Self::PerQuery),
            "split-kv" | "splitkv" | "split" => Ok(Self::SplitKv),
            "flash" => Ok(Self::Flash),
            other => Err(GpuError::BadOption(format!(
                "unknown attention strategy `{other}` (per-query, split-kv, flash)"
            ))),
        }
    }
}

/// Forces whether a step runs inside the kernel it feeds or as its own dispatch instead of
/// letting pagoda choose: the RMSNorm before a linear layer ([`GpuOptions::norm_strategy`]),
/// RoPE and the paged K/V write after the Q/K/V projection ([`GpuOptions::rope_strategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// Its own dispatch, writing what the next kernel reads.
    Separate,
    /// Inside the neighbouring kernel (one dispatch fewer each time).
    Fused,
}

impl Fusion {
    /// `separate` or `fused`, any case.
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "separate" => Ok(Self::Separate),
            "fused" => Ok(Self::Fused),
            other => Err(GpuError::BadOption(format!("unknown fusion `{other}` (separate, fused)"))),
        }
    }
}

/// Forces how a step's dispatches reach the queue instead of choosing it from the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitStrategy {
    /// One command buffer a step, submitted once it is recorded (CPU adapters: lavapipe blocks
    /// a submit until the command buffer before it has run, so chunks would serialise
    /// recording and running there).
    Whole,
    /// Command buffers submitted as the step is recorded, the first of
    /// [`FIRST_CHUNK`](Self::FIRST_CHUNK) dispatches and each later one twice as long up to
    /// [`MAX_CHUNK`](Self::MAX_CHUNK), so the device runs the first layers while the host
    /// records the rest (GPUs).
    Chunked,
}

impl SubmitStrategy {
    /// Dispatches in the first command buffer of a step submitted in chunks (the embedding
    /// and a Llama layer's 7 in a prefill's tiles; a decode layer fused to 5 and the next
    /// one's first 2).
    pub const FIRST_CHUNK: usize = 8;
    /// Most dispatches in one command buffer of a step submitted in chunks.
    pub const MAX_CHUNK: usize = 64;

    /// `whole` or `chunked`, any case.
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "whole" => Ok(Self::Whole),
            "chunked" => Ok(Self::Chunked),
            other => Err(GpuError::BadOption(format!("unknown submit strategy `{other}` (whole, chunked)"))),
        }
    }
}

impl WeightSource {
    /// `buffer` or `texture`, any case.
    pub fn parse(name: &str) -> Result<Self, GpuError> {
        let name = name.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| GpuError::BadOption(format!("unknown weight source `{name}` (buffer, texture)")))
    }
}

/// Forces the rows of the K-split prefill GEMM's tile (its largest; smaller batches still take
/// a smaller one) instead of choosing them from the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmRows(u32);

impl GemmRows {
    /// The tile sizes there are kernels for: the GEMM's band rows times its bands.
    pub const ALL: [u32; 3] = [
        LINEAR_GEMM_BAND_ROWS[0] * LINEAR_GEMM_BANDS,
        LINEAR_GEMM_BAND_ROWS[1] * LINEAR_GEMM_BANDS,
        LINEAR_GEMM_BAND_ROWS[2] * LINEAR_GEMM_BANDS,
    ];

    /// A tile of `rows` rows: 8, 16 or 32.
    pub fn new(rows: u32) -> Result<Self, GpuError> {
        if Self::ALL.contains(&rows) {
            Ok(Self(rows))
        } else {
            Err(GpuError::BadOption(format!("no GEMM tile of {rows} rows ({:?})", Self::ALL)))
        }
    }

    /// `8`, `16` or `32`.
    pub fn parse(rows: &str) -> Result<Self, GpuError> {
        let rows = rows.trim();
        rows.parse()
            .map_err(|_| GpuError::BadOption(format!("GEMM rows `{rows}` is not a number")))
            .and_then(Self::new)
    }

    /// The tile's rows.
    pub fn rows(self) -> u32 {
        self.0
    }
}

/// Forces the most rows of x one workgroup of the K-split decode GEMV takes (llama.cpp's
/// `NUM_COLS`) instead of the default [`GemvRows::MOST`]: batches of up to
/// [`GemvRows::MAX_READS`] times as many rows take the GEMV, larger ones the GEMM. `1` is the
/// GEMV of one row a workgroup, each weight read once a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemvRows(u32);

impl GemvRows {
    /// The default: 8 rows, so that a batch of up to 32 reads each weight at most 4 times.
    pub const MOST: Self = Self(LINEAR_GEMV_ROWS[LINEAR_GEMV_ROWS.len() - 1]);
    /// The most workgroups of rows (each reading every weight once) a batch takes the GEMV with
    /// before it takes the GEMM.
    pub const MAX_READS: u32 = 4;

    /// At most `rows` rows a workgroup: 1, 2, 4 or 8.
    pub fn new(rows: u32) -> Result<Self, GpuError> {
        if LINEAR_GEMV_ROWS.contains(&rows) {
            Ok(Self(rows))
        } else {
            Err(GpuError::BadOption(format!("no GEMV of {rows} rows ({LINEAR_GEMV_ROWS:?})")))
        }
    }

    /// `1`, `2`, `4` or `8`.
    pub fn parse(rows: &str) -> Result<Self, GpuError> {
        let rows = rows.trim();
        rows.parse()
            .map_err(|_| GpuError::BadOption(format!("GEMV rows `{rows}` is not a number")))
            .and_then(Self::new)
    }

    /// The most rows a workgroup takes.
    pub fn rows(self) -> u32 {
        self.0
    }
}

/// Everything that decides which device pagoda opens and how.
///
/// The GPU layer reads no environment: the engine fills unset fields from the `PAGODA_*`
/// variables (`crate::engine::engine_config::gpu_options_from_env`) and passes them down.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// Graphics API; `None` lets wgpu choose among all of them.
    pub backend: Option<BackendChoice>,
    /// Adapter name substring or index; `None` takes the high-performance default.
    pub adapter: Option<String>,
    /// Features not to use even where present.
    pub disable_features: FeatureMask,
    /// Run with WebGPU's default limits (128 MiB binding, 256 MiB buffer, ...).
    pub webgpu_default_limits: bool,
    /// Linear reduction strategy; `None` chooses from the adapter type.
    pub linear_strategy: Option<LinearStrategy>,
    /// Attention kernel; `None` chooses from the adapter type.
    pub attention_strategy: Option<AttentionStrategy>,
    /// Whether the RMSNorm before a linear layer runs inside it; `None` chooses from the
    /// linear path.
    pub norm_strategy: Option<Fusion>,
    /// Whether RoPE and the paged K/V write run in the Q/K/V projections' epilogue (where the
    /// model allows: no Q/K norms); `None` fuses.
    pub rope_strategy: Option<Fusion>,
    /// Largest K-split GEMM tile; `None` chooses from the adapter.
    pub gemm_rows: Option<GemmRows>,
    /// Most rows of x a K-split GEMV workgroup takes; `None` is [`GemvRows::MOST`].
    pub gemv_rows: Option<GemvRows>,
    /// Where the linear and embedding kernels read weights from; `None` chooses from the
    /// adapter. Textures need the sequential linear path (with K-split they are a `BadOption`).
    pub weight_source: Option<WeightSource>,
    /// How a step's dispatches reach the queue; `None` chooses from the adapter type.
    pub submit_strategy: Option<SubmitStrategy>,
    /// Time every dispatch on the device with timestamp queries (each in a compute pass of its
    /// own; [`GpuContext::kernel_times`](super::GpuContext::kernel_times)). A `BadOption` on
    /// an adapter without timestamp queries.
    pub profile_kernels: bool,
}

impl GpuOptions {
    /// Options from their user-facing names (the CLI's flags, the C ABI's JSON): a backend
    /// name, an adapter name substring or index, a comma list of features to leave unused,
    /// and whether to stay within WebGPU's default limits.
    pub fn from_names(
        backend: Option<&str>,
        adapter: Option<&str>,
        disable_features: Option<&str>,
        webgpu_limits: bool,
    ) -> Result<Self, GpuError> {
        Ok(Self {
            backend: backend.map(BackendChoice::parse).transpose()?,
            adapter: adapter.map(str::to_owned),
            disable_features: disable_features.map(FeatureMask::parse).transpose()?.unwrap_or_default(),
            webgpu_default_limits: webgpu_limits,
            linear_strategy: None,
            attention_strategy: None,
            norm_strategy: None,
            rope_strategy: None,
            gemm_rows: None,
            gemv_rows: None,
            weight_source: None,
            submit_strategy: None,
            profile_kernels: false,
        })
    }
}
