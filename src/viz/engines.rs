//! The engines `pagoda viz` drives: the simulated executor on a built-in workload (simulated
//! time), or the real model on wgpu (wall-clock time) with prompts from a file or a built-in
//! workload's shape.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{CacheConfig, SchedulerConfig};
use crate::core::scheduler::Scheduler;
use crate::engine::config::gpu_options_from_env;
use crate::executor::gpu_runner::WgpuExecutor;
use crate::executor::sim::{SimConfig, SimExecutor};
use crate::gpu::{GpuContext, GpuOptions};
use crate::model::{ModelFiles, Tokenizer, default_model_path};
use crate::sampling::SamplingParams;
use crate::viz::driver::{Driver, RequestArrival};
use crate::viz::presets::{self, VizPreset};
use crate::viz::{VizArgs, VizError};

fn engine_error(error: impl std::fmt::Display) -> VizError {
    VizError::Engine(error.to_string())
}

/// The preset of `args.workload` with `args`' size overrides.
pub fn sized_preset(args: &VizArgs) -> VizPreset {
    let preset = presets::preset(args.workload);
    VizPreset {
        num_requests: args.num_requests.unwrap_or(preset.num_requests),
        cache: CacheConfig {
            block_size: args.block_size.unwrap_or(preset.cache.block_size),
            num_gpu_blocks: args.num_gpu_blocks.unwrap_or(preset.cache.num_gpu_blocks),
            enable_prefix_caching: !args.no_enable_prefix_caching,
            ..preset.cache
        },
        scheduler: SchedulerConfig {
            max_num_seqs: args.max_num_seqs.unwrap_or(preset.scheduler.max_num_seqs),
            max_num_batched_tokens: args
                .max_num_batched_tokens
                .unwrap_or(preset.scheduler.max_num_batched_tokens),
            ..preset.scheduler
        },
    }
}

/// The scheduler, simulated executor and arrivals of the built-in workload `args` names, with
/// `args`' size overrides.
pub fn sim_driver(args: &VizArgs) -> Result<Driver<SimExecutor>, VizError> {
    let preset = sized_preset(args);
    let sim = SimConfig::default();
    let workload = args.workload.generate(preset.num_requests, sim.vocab_size, args.seed);
    let scheduler = Scheduler::new(preset.scheduler, preset.cache).map_err(engine_error)?;
    let executor = SimExecutor::new(sim).map_err(engine_error)?;
    let arrivals = presets::arrivals(&workload, sim.eos_token_id);
    Ok(Driver::new(scheduler, executor, Box::new(SimExecutor::elapsed_seconds), arrivals))
}

/// The real model (`args.model`, else the default model) on wgpu, on a wall clock. Its
/// requests are the prompts of `args.prompts_file` (one JSON string per line, all arriving at
/// once, greedy for `args.max_tokens` tokens, stopping at EOS), or else the built-in
/// workload's requests drawn over the model's vocabulary. The KV pool is the preset's (or
/// `--num-gpu-blocks`), the model length capped at the model's context.
pub fn wgpu_driver(args: &VizArgs) -> Result<Driver<WgpuExecutor>, VizError> {
    let path = match &args.model {
        Some(path) => path.clone(),
        None => default_model_path().map_err(engine_error)?,
    };
    let files = ModelFiles::open(&path).map_err(engine_error)?;
    let mut preset = sized_preset(args);
    preset.scheduler.max_model_len = files.config.cap_model_len(preset.scheduler.max_model_len);
    let eos_token_id = files.eos_token_id();
    let arrivals = match &args.prompts_file {
        Some(prompts) => file_arrivals(prompts, &files.tokenizer, args.max_tokens, eos_token_id)?,
        None => {
            let vocab_size = files.config.vocab_size.min(u32::MAX as usize) as u32;
            presets::arrivals(
                &args.workload.generate(preset.num_requests, vocab_size, args.seed),
                eos_token_id,
            )
        }
    };
    let options =
        gpu_options_from_env(&GpuOptions::default()).map_err(|e| VizError::Device(e.to_string()))?;
    let context = GpuContext::new(&options).map_err(|e| VizError::Device(e.to_string()))?;
    let executor =
        WgpuExecutor::new(context, &files, &preset.cache, &preset.scheduler, true).map_err(engine_error)?;
    preset.cache.num_gpu_blocks = executor.num_gpu_blocks();
    let scheduler = Scheduler::new(preset.scheduler, preset.cache).map_err(engine_error)?;
    let start = Instant::now();
    Ok(Driver::new(scheduler, executor, Box::new(move |_| start.elapsed().as_secs_f64()), arrivals))
}

/// The prompts of a file of JSON strings, one a line (blank lines skipped), tokenized as the
/// engine does ([`Tokenizer::encode_prompt`]), as greedy requests for `max_tokens` tokens,
/// all arriving at once.
pub fn file_arrivals(
    path: &Path,
    tokenizer: &Tokenizer,
    max_tokens: usize,
    eos_token_id: Option<u32>,
) -> Result<Vec<RequestArrival>, VizError> {
    let text = std::fs::read_to_string(path).map_err(|e| VizError::io(path, e))?;
    let mut arrivals = Vec::new();
    for (index, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let bad_line =
            |message: String| VizError::PromptLine { path: PathBuf::from(path), line: index + 1, message };
        let prompt: String =
            serde_json::from_str(line).map_err(|e| bad_line(format!("not a JSON string: {e}")))?;
        let ids = tokenizer.encode_prompt(&prompt).map_err(|e| bad_line(e.to_string()))?;
        if ids.is_empty() {
            return Err(bad_line("the prompt has no tokens".to_string()));
        }
        let request_id = arrivals.len() as u64;
        let request = crate::core::request::Request::new(
            request_id,
            ids,
            SamplingParams::greedy(max_tokens),
            eos_token_id,
            0.0,
        );
        arrivals.push(RequestArrival { at_s: 0.0, request });
    }
    if arrivals.is_empty() {
        return Err(VizError::PromptLine {
            path: PathBuf::from(path),
            line: 0,
            message: "no prompts in the file".to_string(),
        });
    }
    Ok(arrivals)
}
