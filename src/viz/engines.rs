//! The engines `pagoda viz` drives: the simulated executor on a built-in workload (simulated
//! time), or the real model on wgpu (wall-clock time) with prompts from a file or a built-in
//! workload's shape.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::core::scheduler::Scheduler;
use crate::engine::engine_config::{EngineConfig, ExecutorKind, gpu_options_from_env};
use crate::engine::fit_to_model;
use crate::executor::fault::FaultPlan;
use crate::executor::gpu_runner::WgpuExecutor;
use crate::executor::sim::{SimConfig, SimExecutor};
use crate::gpu::GpuContext;
use crate::ids::RequestId;
use crate::model::{ModelFiles, Tokenizer, resolve_model_path};
use crate::viz::driver::Driver;
use crate::viz::presets;
use crate::viz::{VizArgs, VizError};
use crate::workload::Arrival;

fn engine_error(error: impl std::fmt::Display) -> VizError {
    VizError::Engine(error.to_string())
}

/// The engine `args` describe: the preset of `args.workload` (its cache and scheduler, the
/// simulated executor) with the engine flags given applied over it.
pub fn engine_config(args: &VizArgs) -> Result<EngineConfig, VizError> {
    let preset = presets::preset(args.workload);
    let base = EngineConfig {
        cache: preset.cache,
        scheduler: preset.scheduler,
        executor: ExecutorKind::Sim,
        ..EngineConfig::default()
    };
    args.engine.apply(base).map_err(|e| VizError::Device(e.to_string()))
}

/// Requests drawn from `args.workload`: `--num-requests`, else the preset's.
fn num_requests(args: &VizArgs) -> usize {
    args.num_requests.unwrap_or(presets::preset(args.workload).num_requests)
}

/// The scheduler, simulated executor (with `--sim-fault` and `--sim-realtime`) and arrivals
/// of the built-in workload `args` names, on `config`'s cache and scheduler.
pub fn sim_driver(args: &VizArgs, config: &EngineConfig) -> Result<Driver, VizError> {
    let sim = SimConfig::default();
    let workload = args.workload.generate(num_requests(args), sim.vocab_size, args.seed);
    let scheduler = Scheduler::new(config.scheduler.clone(), config.cache.clone()).map_err(engine_error)?;
    let executor = SimExecutor::new(sim)
        .map_err(engine_error)?
        .with_realtime(config.sim_realtime)
        .with_faults(FaultPlan::new(config.sim_faults.iter().copied()));
    let clock = Box::new(SimExecutor::elapsed_seconds);
    Ok(Driver::new(scheduler, executor, clock, workload.numbered(), sim.eos_token_id))
}

/// The real model (`--model`, else the default model) on wgpu, on a wall clock. Its requests
/// are the prompts of `args.prompts_file` (one JSON string per line, all arriving at once,
/// greedy for `args.max_tokens` tokens, stopping at EOS), or else the built-in workload's
/// requests drawn over the model's vocabulary. The KV pool is `config`'s (the preset's unless
/// a flag set it), the model length capped at the model's context.
pub fn wgpu_driver(args: &VizArgs, config: &EngineConfig) -> Result<Driver, VizError> {
    let path = resolve_model_path(config.model.as_deref(), config.show_progress).map_err(engine_error)?;
    let files = ModelFiles::open(&path).map_err(engine_error)?;
    let mut fitted = config.clone();
    fit_to_model(&mut fitted, &files);
    let EngineConfig { mut cache, scheduler, .. } = fitted;
    let arrivals = match &args.prompts_file {
        Some(prompts) => file_arrivals(prompts, &files.tokenizer, args.max_tokens)?,
        None => {
            let vocab_size = files.config.vocab_size.min(u32::MAX as usize) as u32;
            args.workload.generate(num_requests(args), vocab_size, args.seed).numbered()
        }
    };
    let options = gpu_options_from_env(&config.gpu).map_err(|e| VizError::Device(e.to_string()))?;
    let context = GpuContext::new(&options).map_err(|e| VizError::Device(e.to_string()))?;
    let executor = WgpuExecutor::new(context, &files, &cache, &scheduler, true).map_err(engine_error)?;
    cache.num_gpu_blocks = executor.num_gpu_blocks();
    cache.kv_block_bytes = executor.kv_block_bytes();
    let scheduler = Scheduler::new(scheduler, cache).map_err(engine_error)?;
    let start = Instant::now();
    let clock = Box::new(move |_: &WgpuExecutor| start.elapsed().as_secs_f64());
    Ok(Driver::new(scheduler, executor, clock, arrivals, files.eos_token_id()))
}

/// The prompts of a file of JSON strings, one a line (blank lines skipped), tokenized as the
/// engine does ([`Tokenizer::encode_prompt`]), as greedy requests for `max_tokens` tokens,
/// all arriving at once.
pub fn file_arrivals(
    path: &Path,
    tokenizer: &Tokenizer,
    max_tokens: usize,
) -> Result<Vec<(RequestId, Arrival)>, VizError> {
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
        let arrival = Arrival {
            time_s: 0.0,
            prompt_token_ids: ids,
            max_tokens,
            priority: 0,
            ignore_eos: false,
            follows: None,
        };
        arrivals.push((arrivals.len() as RequestId, arrival));
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
