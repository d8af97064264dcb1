//! The engine options a host passes as JSON to `pagoda_engine_new`.
//!
//! One flat object with the CLI's flag names (vLLM's), every field optional:
//!
//! ```json
//! {"model": "/models/smollm2.gguf", "num_gpu_blocks": 512, "max_num_seqs": 32,
//!  "kv_cache_dtype": "f32", "executor": "wgpu", "disable_features": "subgroup",
//!  "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}
//! ```
//!
//! `model` takes what `--model` takes: a GGUF file, an HF model directory, or a Hugging Face
//! Hub id (`"Qwen/Qwen3-8B"`, `"org/name-GGUF:Q4_K_M"`), found in or downloaded into the
//! Hugging Face cache.
//!
//! LoRA is off unless `"enable_lora": true`; `max_loras`, `max_lora_rank` and `max_cpu_loras`
//! (vLLM's names) set its limits.
//!
//! An unknown field is an error, never ignored: a misspelt knob must not silently fall
//! back to its default.

use std::path::PathBuf;

use pagoda::executor::lora::LoraConfig;
use pagoda::gpu::GpuOptions;
use pagoda::{
    CacheConfig, EngineConfig, ExecutorKind, KvCacheDtype, SchedulerConfig, SchedulingPolicy,
    SpeculativeConfig,
};
use serde::Deserialize;

/// The options object; each field left out keeps the library's default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineOptions {
    model: Option<PathBuf>,
    block_size: Option<usize>,
    num_gpu_blocks: Option<usize>,
    kv_cache_memory: Option<u64>,
    kv_offloading_size: Option<f64>,
    kv_cache_dtype: Option<KvCacheDtype>,
    enable_prefix_caching: Option<bool>,
    max_num_seqs: Option<usize>,
    max_num_batched_tokens: Option<usize>,
    max_model_len: Option<usize>,
    enable_chunked_prefill: Option<bool>,
    scheduling_policy: Option<SchedulingPolicy>,
    /// Kept as its JSON text: [`SpeculativeConfig::from_json`] parses it, as it does the
    /// CLI flag's.
    speculative_config: Option<Box<serde_json::value::RawValue>>,
    executor: Option<ExecutorKind>,
    seed: Option<u64>,
    backend: Option<String>,
    adapter: Option<String>,
    disable_features: Option<String>,
    webgpu_limits: Option<bool>,
    enable_lora: Option<bool>,
    max_loras: Option<usize>,
    max_lora_rank: Option<usize>,
    max_cpu_loras: Option<usize>,
}

impl EngineOptions {
    /// Parses the JSON text; an empty text means every default.
    pub fn from_json(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut json = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut json).map_err(|e| match e.path().to_string().as_str() {
            "." => format!("engine options: {}", e.inner()),
            field => format!("engine options: `{field}`: {}", e.inner()),
        })
    }

    /// The LoRA limits when `enable_lora` is on (as the CLI's flags give them); the limits
    /// without it are refused rather than ignored.
    fn lora(&self) -> Result<Option<LoraConfig>, String> {
        if self.enable_lora != Some(true) {
            let limits = [
                ("max_loras", self.max_loras),
                ("max_lora_rank", self.max_lora_rank),
                ("max_cpu_loras", self.max_cpu_loras),
            ];
            return match limits.iter().find(|(_, value)| value.is_some()) {
                Some((field, _)) => Err(format!("engine options: `{field}` needs `\"enable_lora\": true`")),
                None => Ok(None),
            };
        }
        let defaults = LoraConfig::default();
        let max_loras = self.max_loras.unwrap_or(defaults.max_loras);
        Ok(Some(LoraConfig {
            max_loras,
            max_lora_rank: self.max_lora_rank.unwrap_or(defaults.max_lora_rank),
            max_cpu_loras: self.max_cpu_loras.unwrap_or(max_loras),
        }))
    }

    /// The engine configuration these options describe.
    pub fn into_config(self) -> Result<EngineConfig, String> {
        let lora = self.lora()?;
        let cache_defaults = CacheConfig::default();
        let scheduler_defaults = SchedulerConfig::default();
        let gpu = GpuOptions::from_names(
            self.backend.as_deref(),
            self.adapter.as_deref(),
            self.disable_features.as_deref(),
            self.webgpu_limits.unwrap_or(false),
        )
        .map_err(|e| e.to_string())?;
        Ok(EngineConfig {
            model: self.model,
            cache: CacheConfig {
                block_size: self.block_size.unwrap_or(cache_defaults.block_size),
                num_gpu_blocks: self.num_gpu_blocks.unwrap_or(cache_defaults.num_gpu_blocks),
                enable_prefix_caching: self
                    .enable_prefix_caching
                    .unwrap_or(cache_defaults.enable_prefix_caching),
                kv_cache_dtype: self.kv_cache_dtype.unwrap_or(cache_defaults.kv_cache_dtype),
                kv_cache_memory: self.kv_cache_memory,
                kv_offloading_size: self.kv_offloading_size.unwrap_or(cache_defaults.kv_offloading_size),
                ..cache_defaults
            },
            scheduler: SchedulerConfig {
                max_num_batched_tokens: self
                    .max_num_batched_tokens
                    .unwrap_or(scheduler_defaults.max_num_batched_tokens),
                max_num_seqs: self.max_num_seqs.unwrap_or(scheduler_defaults.max_num_seqs),
                max_model_len: self.max_model_len.unwrap_or(scheduler_defaults.max_model_len),
                enable_chunked_prefill: self
                    .enable_chunked_prefill
                    .unwrap_or(scheduler_defaults.enable_chunked_prefill),
                policy: self.scheduling_policy.unwrap_or(scheduler_defaults.policy),
                speculative_config: self
                    .speculative_config
                    .map(|json| SpeculativeConfig::from_json(json.get()))
                    .transpose()
                    .map_err(|e| format!("engine options: `speculative_config`: {e}"))?,
                ..scheduler_defaults
            },
            executor: self.executor.unwrap_or_default(),
            seed: self.seed.unwrap_or(0),
            max_waiting_requests: None,
            gpu,
            show_progress: false,
            sim_realtime: false,
            sim_faults: Vec::new(),
            lora,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speculative_config_is_vllms_object_and_its_unknown_fields_are_refused() {
        let options = EngineOptions::from_json(
            r#"{"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}}"#,
        )
        .unwrap();
        let config = options.into_config().unwrap();
        assert_eq!(config.scheduler.speculative_config, Some(SpeculativeConfig::ngram(3, 2, 2)));
        // The CLI flag's parser, with its errors: the options name the field before them.
        for bad in [
            r#"{"method": "ngram", "num_speculative_tokens": 3, "k": 1}"#,
            r#"{"method": "ngram", "num_speculative_tokens": 0}"#,
            r#"{"method": "eagle", "num_speculative_tokens": 2}"#,
        ] {
            let expected = SpeculativeConfig::from_json(bad).unwrap_err();
            let error = EngineOptions::from_json(&format!(r#"{{"speculative_config": {bad}}}"#))
                .unwrap()
                .into_config()
                .unwrap_err();
            assert_eq!(error, format!("engine options: `speculative_config`: {expected}"));
        }
    }

    #[test]
    fn lora_is_off_by_default_and_its_limits_need_it_on() {
        let config = |json: &str| EngineOptions::from_json(json).unwrap().into_config();
        assert_eq!(config("{}").unwrap().lora, None);
        assert_eq!(
            config(r#"{"enable_lora": true}"#).unwrap().lora,
            Some(LoraConfig { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 })
        );
        assert_eq!(
            config(r#"{"enable_lora": true, "max_loras": 3, "max_lora_rank": 8}"#).unwrap().lora,
            Some(LoraConfig { max_loras: 3, max_lora_rank: 8, max_cpu_loras: 3 })
        );
        assert_eq!(
            config(r#"{"enable_lora": true, "max_loras": 2, "max_cpu_loras": 5}"#).unwrap().lora,
            Some(LoraConfig { max_loras: 2, max_lora_rank: 16, max_cpu_loras: 5 })
        );
        assert_eq!(
            config(r#"{"max_loras": 2}"#).unwrap_err(),
            "engine options: `max_loras` needs `\"enable_lora\": true`"
        );
        assert!(
            config(r#"{"enable_lora": false, "max_lora_rank": 8}"#).unwrap_err().contains("max_lora_rank")
        );
    }
}
