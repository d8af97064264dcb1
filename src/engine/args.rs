//! The engine flags every `pagoda` command shares, with vLLM's names: model, KV cache,
//! scheduler, executor and device. A flag overrides a base configuration — the library's
//! defaults for `generate`, `chat`, `serve` and `bench`, a workload's preset for `viz` — and a
//! flag left out keeps the base's value.

use std::path::PathBuf;

use clap::Args;

use super::engine_config::{EngineConfig, ExecutorKind};
use crate::core::cache_config::{CacheConfig, KvCacheDtype};
use crate::core::scheduler_config::{SchedulerConfig, SchedulingPolicy};
use crate::core::spec_decode::SpeculativeConfig;
use crate::executor::fault::Fault;
use crate::gpu::{GpuError, GpuOptions};

/// `text` followed by the library default it falls back to.
fn with_default(text: &str, default: impl std::fmt::Display) -> String {
    format!("{text} [default: {default}; viz: the workload's]")
}

/// Model, cache, scheduler, executor and device flags.
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// A GGUF file, an HF model directory, or a Hugging Face Hub id: ORG/NAME (safetensors),
    /// ORG/NAME:QUANT or ORG/NAME/FILE.gguf (GGUF), each with an optional @REVISION; a path
    /// that exists wins [default: SmolLM2-135M-Instruct Q4_1, fetched once].
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, value_name = "N", help = with_default("Tokens per KV block", CacheConfig::DEFAULT_BLOCK_SIZE))]
    block_size: Option<usize>,
    #[arg(long, value_name = "N", help = with_default(
        "KV blocks in the pool (the null block included)",
        CacheConfig::DEFAULT_NUM_GPU_BLOCKS,
    ))]
    num_gpu_blocks: Option<usize>,
    /// Bytes for the KV pools (suffixes K, M, G: binary); overrides --num-gpu-blocks.
    #[arg(long, value_parser = parse_bytes)]
    kv_cache_memory: Option<u64>,
    /// GiB of host memory for a KV tier below the GPU pool: evicted and preempted blocks
    /// are kept there and loaded back instead of recomputed [default: 0, off].
    #[arg(long, value_name = "GIB")]
    kv_offloading_size: Option<f64>,
    /// KV cache element type [default: auto].
    #[arg(long, value_enum)]
    kv_cache_dtype: Option<KvCacheDtype>,
    #[arg(long, value_name = "N", help = with_default(
        "Requests running at once",
        SchedulerConfig::DEFAULT_MAX_NUM_SEQS,
    ))]
    max_num_seqs: Option<usize>,
    #[arg(long, value_name = "N", help = with_default(
        "Tokens computed per step, summed over requests",
        SchedulerConfig::DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ))]
    max_num_batched_tokens: Option<usize>,
    /// Longest prompt + output [default: the model's context length, at most 8192].
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Share full KV blocks between requests with the same prefix (default on).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    enable_prefix_caching: bool,
    /// Turn prefix caching off.
    #[arg(long)]
    no_enable_prefix_caching: bool,
    /// Cut long prefills into chunks (default on).
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    enable_chunked_prefill: bool,
    /// Turn chunked prefill off.
    #[arg(long)]
    no_enable_chunked_prefill: bool,
    /// Schedule one step ahead: the next step is scheduled and handed to the executor
    /// while the current one runs, and its outputs are processed meanwhile (default on where
    /// the executor supports it; off with speculative decoding).
    #[arg(long, overrides_with = "no_async_scheduling")]
    async_scheduling: bool,
    /// The serial loop: schedule, run, process, then schedule the next step.
    #[arg(long)]
    no_async_scheduling: bool,
    /// Admission and preemption order [default: fcfs].
    #[arg(long, value_enum)]
    scheduling_policy: Option<SchedulingPolicy>,
    /// Speculative decoding, as vLLM's JSON object, e.g.
    /// '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
    /// or '{"method": "draft_model", "model": "draft.gguf", "num_speculative_tokens": 4}'
    /// [default: off].
    #[arg(long, value_name = "JSON", value_parser = SpeculativeConfig::from_json)]
    speculative_config: Option<SpeculativeConfig>,
    /// The real model on the GPU, or the simulated model [default: wgpu; viz: sim].
    #[arg(long, value_enum)]
    executor: Option<ExecutorKind>,
    /// With --executor sim, take each step's simulated time in wall-clock time.
    #[arg(long)]
    sim_realtime: bool,
    /// Fault injection for the simulated model: fail step STEP with `STEP:transient` or
    /// `STEP:device-lost` (repeatable).
    #[arg(long, value_name = "STEP:KIND")]
    sim_fault: Vec<Fault>,
    #[command(flatten)]
    gpu: GpuArgs,
    /// LoRA adapters.
    #[command(flatten)]
    pub lora: crate::engine::lora::LoraArgs,
}

impl EngineArgs {
    /// `base` with every flag given applied over it.
    pub fn apply(&self, base: EngineConfig) -> Result<EngineConfig, GpuError> {
        let switch = |on: bool, off: bool, current: bool| if off { false } else { on || current };
        let cache = CacheConfig {
            block_size: self.block_size.unwrap_or(base.cache.block_size),
            num_gpu_blocks: self.num_gpu_blocks.unwrap_or(base.cache.num_gpu_blocks),
            enable_prefix_caching: switch(
                self.enable_prefix_caching,
                self.no_enable_prefix_caching,
                base.cache.enable_prefix_caching,
            ),
            kv_cache_dtype: self.kv_cache_dtype.unwrap_or(base.cache.kv_cache_dtype),
            kv_cache_memory: self.kv_cache_memory.or(base.cache.kv_cache_memory),
            kv_offloading_size: self.kv_offloading_size.unwrap_or(base.cache.kv_offloading_size),
            ..base.cache
        };
        let scheduler = SchedulerConfig {
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .unwrap_or(base.scheduler.max_num_batched_tokens),
            max_num_seqs: self.max_num_seqs.unwrap_or(base.scheduler.max_num_seqs),
            max_model_len: self.max_model_len.unwrap_or(base.scheduler.max_model_len),
            enable_chunked_prefill: switch(
                self.enable_chunked_prefill,
                self.no_enable_chunked_prefill,
                base.scheduler.enable_chunked_prefill,
            ),
            policy: self.scheduling_policy.unwrap_or(base.scheduler.policy),
            speculative_config: self.speculative_config.clone().or(base.scheduler.speculative_config),
            async_scheduling: switch(
                self.async_scheduling,
                self.no_async_scheduling,
                base.scheduler.async_scheduling,
            ),
            ..base.scheduler
        };
        let sim_faults = if self.sim_fault.is_empty() { base.sim_faults } else { self.sim_fault.clone() };
        Ok(EngineConfig {
            model: self.model.clone().or(base.model),
            cache,
            scheduler,
            executor: self.executor.unwrap_or(base.executor),
            gpu: self.gpu.options()?,
            sim_realtime: self.sim_realtime || base.sim_realtime,
            sim_faults,
            lora: self.lora.config().or(base.lora),
            ..base
        })
    }
}

/// Which GPU to use and which of its features to leave unused.
#[derive(Debug, Clone, Default, Args)]
pub struct GpuArgs {
    /// Graphics API: vulkan, metal, dx12 or gl (env PAGODA_BACKEND).
    #[arg(long)]
    backend: Option<String>,
    /// Adapter name substring or index (env PAGODA_ADAPTER).
    #[arg(long)]
    adapter: Option<String>,
    /// Adapter features not to use, e.g. `f16,subgroup`, to force the fallback kernels
    /// (env PAGODA_DISABLE_FEATURES).
    #[arg(long)]
    disable_features: Option<String>,
    /// Run within WebGPU's default limits, as the weakest adapters offer (env PAGODA_WEBGPU_LIMITS=1).
    #[arg(long)]
    webgpu_limits: bool,
}

impl GpuArgs {
    /// The GPU options these flags describe (the `PAGODA_*` variables are read later, by
    /// [`super::engine_config::gpu_options_from_env`]).
    pub fn options(&self) -> Result<GpuOptions, GpuError> {
        GpuOptions::from_names(
            self.backend.as_deref(),
            self.adapter.as_deref(),
            self.disable_features.as_deref(),
            self.webgpu_limits,
        )
    }
}

/// Parses a byte count with an optional binary suffix (K, M, G, T; `iB`/`B` allowed).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let upper = text.to_ascii_uppercase();
    let digits_end = upper.find(|c: char| !c.is_ascii_digit()).unwrap_or(upper.len());
    let (number, suffix) = upper.split_at(digits_end);
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a byte count"))?;
    let shift = match suffix.trim_end_matches('B').trim_end_matches('I') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{text:?}: unknown unit (use K, M, G or T)")),
    };
    number.checked_mul(1 << shift).ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn apply(flags: &[&str], base: EngineConfig) -> EngineConfig {
        let cli = Cli::try_parse_from(std::iter::once("pagoda").chain(flags.iter().copied())).unwrap();
        cli.engine.apply(base).unwrap()
    }

    #[test]
    fn flags_left_out_keep_the_base() {
        let base = EngineConfig {
            cache: CacheConfig { block_size: 32, num_gpu_blocks: 77, ..CacheConfig::default() },
            scheduler: SchedulerConfig {
                max_num_seqs: 3,
                enable_chunked_prefill: false,
                ..SchedulerConfig::default()
            },
            executor: ExecutorKind::Sim,
            seed: 9,
            ..EngineConfig::default()
        };
        assert_eq!(apply(&[], base.clone()), base);
        assert_eq!(apply(&[], EngineConfig::default()), EngineConfig::default());
    }

    #[test]
    fn flags_given_override_the_base() {
        let config = apply(
            &[
                "--block-size",
                "8",
                "--num-gpu-blocks",
                "64",
                "--max-num-seqs",
                "2",
                "--no-enable-prefix-caching",
                "--enable-chunked-prefill",
                "--executor",
                "sim",
                "--kv-cache-memory",
                "2M",
                "--sim-fault",
                "3:transient",
                "--speculative-config",
                r#"{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}"#,
            ],
            EngineConfig {
                scheduler: SchedulerConfig { enable_chunked_prefill: false, ..SchedulerConfig::default() },
                ..EngineConfig::default()
            },
        );
        assert_eq!(config.cache.block_size, 8);
        assert_eq!(config.cache.num_gpu_blocks, 64);
        assert_eq!(config.cache.kv_cache_memory, Some(2 << 20));
        assert!(!config.cache.enable_prefix_caching);
        assert!(config.scheduler.enable_chunked_prefill);
        assert_eq!(config.scheduler.max_num_seqs, 2);
        assert_eq!(config.scheduler.max_num_batched_tokens, SchedulerConfig::DEFAULT_MAX_NUM_BATCHED_TOKENS);
        assert_eq!(config.executor, ExecutorKind::Sim);
        assert_eq!(config.sim_faults.len(), 1);
        assert_eq!(config.scheduler.speculative_config, Some(SpeculativeConfig::ngram(3, 2, 4)));
    }

    #[test]
    fn a_speculative_config_with_an_unknown_field_is_refused_by_name() {
        let flags =
            ["pagoda", "--speculative-config", r#"{"method": "ngram", "num_speculative_tokens": 2, "n": 1}"#];
        let error = Cli::try_parse_from(flags).err().expect("refused");
        assert!(error.to_string().contains("unknown field `n`"), "{error}");
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("3K"), Ok(3 << 10));
        assert_eq!(parse_bytes("2MiB"), Ok(2 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
