//! The engine's configuration and a builder over it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Engine, EngineError};
use crate::core::cache_config::{CacheConfig, KvCacheDtype};
use crate::core::scheduler_config::{SchedulerConfig, SchedulingPolicy};
use crate::core::spec_decode::SpeculativeConfig;
use crate::executor::fault::Fault;
use crate::gpu::{
    AttentionStrategy, BackendChoice, FeatureMask, Fusion, GemmRows, GemvRows, GpuError, GpuOptions,
    LinearStrategy, SubmitStrategy, WeightSource,
};

/// Which executor runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// The real model on the GPU through wgpu.
    #[default]
    Wgpu,
    /// The deterministic simulated model (the tokenizer still comes from the model files).
    Sim,
}

/// Everything an engine is built from: the model, the KV cache, the scheduler and the executor.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineConfig {
    /// A GGUF file or an HF directory; `None` means the default model.
    pub model: Option<PathBuf>,
    /// The paged KV cache.
    pub cache: CacheConfig,
    /// The token-budget scheduler.
    pub scheduler: SchedulerConfig,
    /// Which executor runs the model.
    pub executor: ExecutorKind,
    /// Seed of the stream that gives each unseeded request its own seed.
    pub seed: u64,
    /// Refuse new requests while this many are waiting; `None` never refuses.
    pub max_waiting_requests: Option<usize>,
    /// Backend, adapter and feature choices for the wgpu executor.
    #[serde(skip)]
    pub gpu: GpuOptions,
    /// Draw progress bars while the model loads.
    pub show_progress: bool,
    /// With the simulated executor, take each step's simulated time in wall-clock time (so
    /// a simulated server's latencies look like a GPU's).
    #[serde(default)]
    pub sim_realtime: bool,
    /// Steps the simulated executor fails (fault injection; ignored by the wgpu executor).
    #[serde(default)]
    pub sim_faults: Vec<Fault>,
    /// Serve LoRA adapters within these limits (`--enable-lora`); `None` serves the base only.
    #[serde(default)]
    pub lora: Option<crate::executor::lora::LoraConfig>,
}

/// Builds an [`EngineConfig`] knob by knob; `Engine::builder()` starts one.
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    config: EngineConfig,
}

impl EngineBuilder {
    /// A builder over the default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from `config`.
    pub fn from_config(config: EngineConfig) -> Self {
        Self { config }
    }

    /// A GGUF file or an HF directory.
    pub fn model(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.model = Some(path.into());
        self
    }

    /// The whole cache configuration.
    pub fn cache(mut self, cache: CacheConfig) -> Self {
        self.config.cache = cache;
        self
    }

    /// The whole scheduler configuration.
    pub fn scheduler(mut self, scheduler: SchedulerConfig) -> Self {
        self.config.scheduler = scheduler;
        self
    }

    /// Tokens per KV block.
    pub fn block_size(mut self, block_size: usize) -> Self {
        self.config.cache.block_size = block_size;
        self
    }

    /// Blocks in the KV pool, the null block included.
    pub fn num_gpu_blocks(mut self, num_gpu_blocks: usize) -> Self {
        self.config.cache.num_gpu_blocks = num_gpu_blocks;
        self
    }

    /// Share full blocks between requests with the same prefix.
    pub fn enable_prefix_caching(mut self, enable: bool) -> Self {
        self.config.cache.enable_prefix_caching = enable;
        self
    }

    /// GiB of host memory for the host KV tier (`--kv-offloading-size`); 0 turns it off.
    pub fn kv_offloading_size(mut self, gib: f64) -> Self {
        self.config.cache.kv_offloading_size = gib;
        self
    }

    /// Element type of the K/V pools.
    pub fn kv_cache_dtype(mut self, dtype: KvCacheDtype) -> Self {
        self.config.cache.kv_cache_dtype = dtype;
        self
    }

    /// Requests running at once.
    pub fn max_num_seqs(mut self, max_num_seqs: usize) -> Self {
        self.config.scheduler.max_num_seqs = max_num_seqs;
        self
    }

    /// Schedule one step ahead of the executor (on by default; `false` runs the serial loop).
    pub fn async_scheduling(mut self, enable: bool) -> Self {
        self.config.scheduler.async_scheduling = enable;
        self
    }

    /// Tokens computed per step.
    pub fn max_num_batched_tokens(mut self, tokens: usize) -> Self {
        self.config.scheduler.max_num_batched_tokens = tokens;
        self
    }

    /// Longest prompt + output.
    pub fn max_model_len(mut self, max_model_len: usize) -> Self {
        self.config.scheduler.max_model_len = max_model_len;
        self
    }

    /// Admission and preemption order.
    pub fn scheduling_policy(mut self, policy: SchedulingPolicy) -> Self {
        self.config.scheduler.policy = policy;
        self
    }

    /// Speculative decoding (vLLM's `--speculative-config`).
    pub fn speculative_config(mut self, config: SpeculativeConfig) -> Self {
        self.config.scheduler.speculative_config = Some(config);
        self
    }

    /// Which executor runs the model.
    pub fn executor(mut self, executor: ExecutorKind) -> Self {
        self.config.executor = executor;
        self
    }

    /// Seed of the stream that seeds unseeded requests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Backend, adapter and feature choices for the wgpu executor.
    pub fn gpu(mut self, gpu: GpuOptions) -> Self {
        self.config.gpu = gpu;
        self
    }

    /// Draw progress bars while the model loads.
    pub fn show_progress(mut self, show: bool) -> Self {
        self.config.show_progress = show;
        self
    }

    /// Refuse new requests while this many are waiting.
    pub fn max_waiting_requests(mut self, limit: usize) -> Self {
        self.config.max_waiting_requests = Some(limit);
        self
    }

    /// Steps the simulated executor fails (fault injection).
    pub fn sim_faults(mut self, faults: impl IntoIterator<Item = Fault>) -> Self {
        self.config.sim_faults = faults.into_iter().collect();
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Ends the builder with its configuration.
    pub fn into_config(self) -> EngineConfig {
        self.config
    }

    /// Opens the model and builds the engine (see [`Engine::new`]).
    pub fn build(self) -> Result<Engine, EngineError> {
        Engine::new(self.config)
    }
}

/// `options` with the fields left unset filled from the `PAGODA_*` environment variables —
/// the one place pagoda reads them: `PAGODA_BACKEND`, `PAGODA_ADAPTER` (a substring of the
/// adapter name or its index), `PAGODA_DISABLE_FEATURES` (`f16,subgroup`, added to
/// `disable_features`), `PAGODA_WEBGPU_LIMITS=1`, `PAGODA_LINEAR=sequential|ksplit`,
/// `PAGODA_ATTENTION=per-query|split-kv|flash`, `PAGODA_NORM=separate|fused`, `PAGODA_ROPE=separate|fused`,
/// `PAGODA_GEMM_ROWS=8|16|32`, `PAGODA_GEMV_ROWS=1|2|4|8`, `PAGODA_WEIGHTS=buffer|texture` and
/// `PAGODA_SUBMIT=whole|chunked`.
pub fn gpu_options_from_env(options: &GpuOptions) -> Result<GpuOptions, GpuError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    // A value the options set wins; otherwise the variable's, parsed.
    fn set_or<T>(
        set: Option<T>,
        var: Option<String>,
        parse: fn(&str) -> Result<T, GpuError>,
    ) -> Result<Option<T>, GpuError> {
        match set {
            Some(value) => Ok(Some(value)),
            None => var.as_deref().map(parse).transpose(),
        }
    }
    let backend = set_or(options.backend, env("PAGODA_BACKEND"), BackendChoice::parse)?;
    let env_mask =
        env("PAGODA_DISABLE_FEATURES").map(|v| FeatureMask::parse(&v)).transpose()?.unwrap_or_default();
    let linear_strategy = set_or(options.linear_strategy, env("PAGODA_LINEAR"), LinearStrategy::parse)?;
    let attention_strategy =
        set_or(options.attention_strategy, env("PAGODA_ATTENTION"), AttentionStrategy::parse)?;
    let norm_strategy = set_or(options.norm_strategy, env("PAGODA_NORM"), Fusion::parse)?;
    let rope_strategy = set_or(options.rope_strategy, env("PAGODA_ROPE"), Fusion::parse)?;
    let gemm_rows = set_or(options.gemm_rows, env("PAGODA_GEMM_ROWS"), GemmRows::parse)?;
    let gemv_rows = set_or(options.gemv_rows, env("PAGODA_GEMV_ROWS"), GemvRows::parse)?;
    let weight_source = set_or(options.weight_source, env("PAGODA_WEIGHTS"), WeightSource::parse)?;
    let submit_strategy = set_or(options.submit_strategy, env("PAGODA_SUBMIT"), SubmitStrategy::parse)?;
    Ok(GpuOptions {
        backend,
        adapter: options.adapter.clone().or_else(|| env("PAGODA_ADAPTER")),
        disable_features: options.disable_features.union(env_mask),
        webgpu_default_limits: options.webgpu_default_limits
            || env("PAGODA_WEBGPU_LIMITS").is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false")),
        linear_strategy,
        attention_strategy,
        norm_strategy,
        rope_strategy,
        gemm_rows,
        gemv_rows,
        weight_source,
        submit_strategy,
        profile_kernels: options.profile_kernels,
    })
}
