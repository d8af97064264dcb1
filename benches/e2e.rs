//! End-to-end throughput of the wgpu executor on SmolLM2-135M-Instruct: prefill tokens/s and
//! decode tokens/s at batch 1, 8 and 32, printed as a table and one JSON line.
//!
//! `cargo bench --bench e2e` measures the default model (env `PAGODA_MODEL_GGUF` or the cache);
//! `PAGODA_BENCH_PROMPT` (tokens per prompt, default 32) and `PAGODA_BENCH_DECODE` (decode steps,
//! default 8) size it. Without `--bench` (as `cargo test --all-targets` runs it) it does one quick
//! pass on the tiny random model instead, so the code path stays tested.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::output::{CachedRequestData, NewRequestData, SchedulerOutput};
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::testing::TinyLlama;
use pagoda::model::{ModelFiles, default_model_path};
use pagoda::sampling::SamplingParams;

const BLOCK: usize = 16;

struct Sizes {
    prompt: usize,
    decode_steps: usize,
    batches: Vec<usize>,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Prefill `batch` prompts of `sizes.prompt` tokens in one step, then decode `decode_steps`
/// tokens each; returns the prefill and decode wall times.
fn run(
    exec: &mut WgpuExecutor,
    vocab: usize,
    batch: usize,
    sizes: &Sizes,
    first_id: u64,
) -> (Duration, Duration) {
    let blocks_per_req = (sizes.prompt + sizes.decode_steps).div_ceil(BLOCK);
    let ids: Vec<u64> = (0..batch as u64).map(|i| first_id + i).collect();
    let mut out = SchedulerOutput::default();
    let mut lens = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let prompt: Vec<u32> =
            (0..sizes.prompt).map(|p| ((id as usize * 7919 + p * 104729) % vocab) as u32).collect();
        let blocks: Vec<u32> = (0..blocks_per_req).map(|b| (1 + i * blocks_per_req + b) as u32).collect();
        out.num_scheduled_tokens.insert(id, prompt.len());
        out.total_num_scheduled_tokens += prompt.len();
        out.scheduled_new_reqs.push(NewRequestData {
            req_id: id,
            prompt_token_ids: prompt,
            sampling_params: SamplingParams::greedy(sizes.decode_steps + 1),
            block_ids: blocks,
            num_computed_tokens: 0,
            lora_id: None,
        });
        lens.push(sizes.prompt);
    }
    let start = Instant::now();
    let mut sampled = exec.execute(&out, &mut StepMasks::none()).expect("prefill step").sampled_token_ids;
    let prefill = start.elapsed();
    let start = Instant::now();
    for _ in 0..sizes.decode_steps {
        let mut out = SchedulerOutput::default();
        for (i, &id) in ids.iter().enumerate() {
            out.num_scheduled_tokens.insert(id, 1);
            out.total_num_scheduled_tokens += 1;
            out.scheduled_cached_reqs.push(CachedRequestData {
                req_id: id,
                num_freed_blocks: 0,
                resumed_from_preemption: false,
                new_token_ids: sampled[&id].clone(),
                new_block_ids: Vec::new(),
                num_computed_tokens: lens[i],
            });
            lens[i] += 1;
        }
        sampled = exec.execute(&out, &mut StepMasks::none()).expect("decode step").sampled_token_ids;
    }
    let decode = start.elapsed();
    let finished: HashSet<u64> = ids.into_iter().collect();
    exec.execute(
        &SchedulerOutput { finished_req_ids: finished, ..Default::default() },
        &mut StepMasks::none(),
    )
    .expect("finish step");
    (prefill, decode)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let tmp = tempfile::tempdir().expect("temp dir");
    let (path, sizes) = if bench {
        let sizes = Sizes {
            prompt: env_usize("PAGODA_BENCH_PROMPT", 32),
            decode_steps: env_usize("PAGODA_BENCH_DECODE", 8),
            batches: vec![1, 8, 32],
        };
        (default_model_path().expect("default model"), sizes)
    } else {
        let path = tmp.path().join("tiny.gguf");
        TinyLlama::new(1).write_gguf(&path, DType::Q4_1).expect("tiny model");
        (path, Sizes { prompt: 8, decode_steps: 2, batches: vec![1, 2] })
    };
    let files = ModelFiles::open(&path).expect("model");
    let max_batch = *sizes.batches.iter().max().unwrap_or(&1);
    let blocks_per_req = (sizes.prompt + sizes.decode_steps).div_ceil(BLOCK);
    let cache = CacheConfig {
        block_size: BLOCK,
        num_gpu_blocks: max_batch * blocks_per_req + 1,
        kv_cache_dtype: KvCacheDtype::Auto,
        ..Default::default()
    };
    let sched = SchedulerConfig {
        max_num_batched_tokens: max_batch * sizes.prompt,
        max_num_seqs: max_batch,
        max_model_len: blocks_per_req * BLOCK,
        ..Default::default()
    };
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap()).expect("GPU adapter");
    let adapter = ctx.capabilities().device_summary();
    let mut exec = WgpuExecutor::new(ctx, &files, &cache, &sched, bench).expect("executor");
    // The executor built every pipeline when it was created, so the first run is timed as is.
    let vocab = files.config.vocab_size;
    println!("model {}  prompt {} tokens  decode {} steps", path.display(), sizes.prompt, sizes.decode_steps);
    println!("{adapter}");
    println!("{:>6} {:>16} {:>16}", "batch", "prefill tok/s", "decode tok/s");
    let mut rows = Vec::new();
    for (i, &batch) in sizes.batches.iter().enumerate() {
        let (prefill, decode) = run(&mut exec, vocab, batch, &sizes, i as u64 * 1000);
        let prefill_tps = (batch * sizes.prompt) as f64 / prefill.as_secs_f64();
        let decode_tps = (batch * sizes.decode_steps) as f64 / decode.as_secs_f64().max(1e-9);
        println!("{batch:>6} {prefill_tps:>16.1} {decode_tps:>16.1}");
        rows.push(serde_json::json!({"batch": batch, "prefill_tokens_per_s": prefill_tps, "decode_tokens_per_s": decode_tps}));
    }
    let summary = serde_json::json!({
        "bench": "e2e", "model": path.display().to_string(), "prompt_tokens": sizes.prompt,
        "decode_steps": sizes.decode_steps, "results": rows,
    });
    println!("{summary}");
}
