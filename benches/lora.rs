//! Multi-LoRA decode throughput on the wgpu executor: 32 requests spread over 4 rank-16
//! adapters on all seven linears against the same 32 requests on the base model (an engine
//! without LoRA), aggregate decode tokens/s, printed as a table and one JSON line. The issue's
//! target: LoRA at ≥ 0.8× the base.
//!
//! `cargo bench --bench lora` measures the default model (env `PAGODA_MODEL_GGUF` or the
//! cache) in `PAGODA_BENCH_ROUNDS` rounds (default 3) of a base run then a LoRA run, and reports
//! each round and the median of the rounds' ratios: a loaded or shared machine's speed drifts by
//! tens of percent over a minute, more than the two runs of one round differ.
//! `PAGODA_BENCH_DECODE` (tokens per request, default 32) sizes each run. Without `--bench`
//! (as `cargo test --all-targets` runs it) it does one quick pass on the tiny Llama of
//! `PAGODA_FAMILIES_DIR` instead, so the code path stays tested.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pagoda::dtype::DType;
use pagoda::executor::lora::LoraConfig;
use pagoda::model::safetensors::serialize;
use pagoda::model::{ModelFiles, TensorView, default_model_path};
use pagoda::{Engine, EngineConfig, SamplingParams};

const ADAPTERS: usize = 4;
const TARGETS: [(&str, &str); 7] = [
    ("self_attn", "q_proj"),
    ("self_attn", "k_proj"),
    ("self_attn", "v_proj"),
    ("self_attn", "o_proj"),
    ("mlp", "gate_proj"),
    ("mlp", "up_proj"),
    ("mlp", "down_proj"),
];

/// Writes a random PEFT adapter of `rank` on all seven linears of `model` into `dir`.
fn write_adapter(dir: &Path, model: &pagoda::model::ModelConfig, rank: usize, seed: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5).mul_add(0.1, 0.0).to_le_bytes()
            })
            .collect()
    };
    let (hidden, q, kv, ff) = (model.hidden_size, model.q_size(), model.kv_size(), model.intermediate_size);
    let mut data = Vec::new();
    for layer in 0..model.num_hidden_layers {
        for (block, name) in TARGETS {
            let (out, inp) = match name {
                "q_proj" => (q, hidden),
                "k_proj" | "v_proj" => (kv, hidden),
                "o_proj" => (hidden, q),
                "down_proj" => (hidden, ff),
                _ => (ff, hidden),
            };
            let prefix = format!("base_model.model.model.layers.{layer}.{block}.{name}");
            data.push((format!("{prefix}.lora_A.weight"), vec![rank, inp], random(rank * inp)));
            data.push((format!("{prefix}.lora_B.weight"), vec![out, rank], random(out * rank)));
        }
    }
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, shape, bytes)| {
            (n.clone(), TensorView { dtype: DType::F32, shape: shape.clone().into(), data: bytes })
        })
        .collect();
    std::fs::write(dir.join("adapter_model.safetensors"), serialize(&views).unwrap()).unwrap();
    let config = serde_json::json!({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
        "target_modules": TARGETS.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
    });
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
}

/// CPU seconds the process has run so far, all its threads (lavapipe runs the device's work on
/// them): `/proc/self/stat`'s user and system times in ticks of 1/100 s (Linux's `USER_HZ`);
/// `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// Decode throughput of one run: tokens per wall-clock second and per CPU second of the
/// process (the steadier measure on a loaded machine where lavapipe runs the device).
struct Rate {
    wall: f64,
    cpu: Option<f64>,
}

/// Aggregate decode tokens/s of `requests` requests (adapter `i % ADAPTERS` when `lora`),
/// after every prompt is prefilled.
fn decode_rate(
    model: &Path,
    adapters: Option<&[PathBuf]>,
    requests: usize,
    decode: usize,
    rank: usize,
) -> Rate {
    let config = EngineConfig {
        model: Some(model.to_owned()),
        seed: 1,
        lora: adapters.map(|_| LoraConfig {
            max_loras: ADAPTERS,
            max_lora_rank: rank,
            max_cpu_loras: ADAPTERS,
        }),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).unwrap();
    let names: Vec<String> = (0..ADAPTERS).map(|i| format!("adapter-{i}")).collect();
    if let Some(paths) = adapters {
        for (name, path) in names.iter().zip(paths) {
            engine.load_lora(name, path).unwrap();
        }
    }
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(decode + 1) };
    for i in 0..requests {
        let prompt: Vec<u32> = (0..16).map(|t| 100 + (i * 16 + t) as u32).collect();
        let lora = adapters.map(|_| names[i % ADAPTERS].as_str());
        engine.add_tokens_request_with_lora(prompt, params.clone(), lora).unwrap();
    }
    // Prefill until every request has its first token, then time the decode.
    let mut first = 0;
    while first < requests {
        first += engine.step().unwrap().iter().filter(|o| o.num_output_tokens == 1).count();
    }
    let started = Instant::now();
    let cpu_started = cpu_seconds();
    let mut tokens = 0;
    while engine.has_unfinished_requests() {
        tokens += engine.step().unwrap().iter().map(|o| o.new_token_ids.len()).sum::<usize>();
    }
    let cpu = cpu_started.zip(cpu_seconds()).map(|(a, b)| tokens as f64 / (b - a).max(0.01));
    Rate { wall: tokens as f64 / started.elapsed().as_secs_f64(), cpu }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (model, requests, decode, rank) = if bench {
        let decode = std::env::var("PAGODA_BENCH_DECODE").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
        (default_model_path().expect("the default model"), 32, decode, 16)
    } else {
        let Some(dir) = std::env::var_os("PAGODA_FAMILIES_DIR") else {
            eprintln!("lora bench: PAGODA_FAMILIES_DIR unset; skipping the quick pass");
            return;
        };
        (PathBuf::from(dir).join("llama"), 4, 2, 4)
    };
    let files = ModelFiles::open(&model).unwrap();
    let tmp = std::env::temp_dir().join(format!("pagoda-lora-bench-{}", std::process::id()));
    let paths: Vec<PathBuf> = (0..ADAPTERS).map(|i| tmp.join(format!("adapter-{i}"))).collect();
    for (i, path) in paths.iter().enumerate() {
        write_adapter(path, &files.config, rank, i as u64 + 1);
    }
    let rounds = if bench {
        std::env::var("PAGODA_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1)
    } else {
        1
    };
    let runs: Vec<(Rate, Rate)> = (0..rounds)
        .map(|_| {
            let base = decode_rate(&model, None, requests, decode, rank);
            (base, decode_rate(&model, Some(&paths), requests, decode, rank))
        })
        .collect();
    std::fs::remove_dir_all(&tmp).ok();
    let cpu = |r: &Rate| r.cpu.map_or("-".to_string(), |c| format!("{c:.1}"));
    let lora_run = format!("{ADAPTERS} rank-{rank} adapters (7 linears)");
    println!(
        "{:<6} {:<36} {:>12} {:>14}",
        "round",
        format!("run ({requests} requests)"),
        "decode tok/s",
        "tok/CPU-s"
    );
    for (round, (base, lora)) in runs.iter().enumerate() {
        println!("{:<6} {:<36} {:>12.1} {:>14}", round + 1, "base", base.wall, cpu(base));
        println!("{:<6} {:<36} {:>12.1} {:>14}", round + 1, lora_run, lora.wall, cpu(lora));
    }
    let wall: Vec<f64> = runs.iter().map(|(b, l)| l.wall / b.wall).collect();
    let by_cpu: Option<Vec<f64>> = runs.iter().map(|(b, l)| b.cpu.zip(l.cpu).map(|(b, l)| l / b)).collect();
    let shown = |ratios: &[f64]| ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", ");
    let cpu_ratio = by_cpu.as_deref().map(median);
    println!(
        "ratio (median of {rounds}) {:.3} wall [{}], {} by CPU time [{}] (target >= 0.8)",
        median(&wall),
        shown(&wall),
        cpu_ratio.map_or("-".to_string(), |r| format!("{r:.3}")),
        by_cpu.as_deref().map_or("-".to_string(), shown),
    );
    println!(
        "{}",
        serde_json::json!({"bench": "lora", "requests": requests, "decode": decode, "rank": rank,
            "rounds": rounds, "ratio": median(&wall), "ratios": wall, "cpu_ratio": cpu_ratio,
            "cpu_ratios": by_cpu,
            "base_tok_s": runs.iter().map(|(b, _)| b.wall).collect::<Vec<_>>(),
            "lora_tok_s": runs.iter().map(|(_, l)| l.wall).collect::<Vec<_>>()})
    );
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 }
}
