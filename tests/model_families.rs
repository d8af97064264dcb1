//! The model families against Hugging Face `transformers` (tests/fixtures/families/, made by
//! scripts/make-family-reference.py): tiny random-weight models of each family, written by
//! scripts/tiny-families.py as HF directories and as the GGUF files llama.cpp's converter
//! makes of them (directory in `PAGODA_FAMILIES_DIR`). Each family pagoda runs matches the
//! reference logits at every prompt position and its greedy continuation, from both formats;
//! the converter's GGUF is byte-identical to what the script wrote; a family pagoda does not
//! run yet is refused with a typed error rather than run wrong. Chat templates render as
//! `apply_chat_template` does and text encodes to the reference's ids.

use std::path::PathBuf;

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::request::Request;
use pagoda::core::scheduler::Scheduler;
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::TensorView;
use pagoda::model::architecture::ConfigError;
use pagoda::model::llama::LlamaModel;
use pagoda::model::testing::prefill_logits;
use pagoda::model::weights::{ExpertWeights, LayerWeights, MlpWeights};
use pagoda::model::{ChatMessage, ChatTemplate, ModelError, ModelFiles, Tokenizer};
use pagoda::{Engine, Prompt, SamplingParams};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Families pagoda runs from both formats.
const RUNS: [&str; 9] = [
    "llama",
    "llama-rope-parameters",
    "qwen2",
    "qwen3",
    "gemma3",
    "phi3",
    "qwen3-moe",
    "mixtral",
    "qwen2-moe",
];
const BLOCK: usize = 16;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/families/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn families_dir() -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints")
}

/// The HF directory and the f32 and f16 GGUF files of family `name`.
fn model_paths(name: &str) -> [PathBuf; 3] {
    let dir = families_dir().join(name);
    [dir.clone(), dir.join(format!("{name}.f32.gguf")), dir.join(format!("{name}.f16.gguf"))]
}

/// The files of family `name` in the formats `PAGODA_FAMILY_FORMATS` names (comma-separated
/// `hf`, `f32`, `f16`; all three when unset), none if `PAGODA_FAMILY_SKIP` (comma-separated)
/// names the family. scripts/test.sh's pass through the kernels GPUs get takes `hf,f16`: f32
/// weights in the HF layout and f16 weights in the converter's (the f32 GGUF adds neither a
/// weight type nor a layout), and skips `llama-rope-parameters` (Llama's very weights, its
/// config written as transformers 5 writes it); the default pass reads them all.
fn formats(name: &str) -> Vec<PathBuf> {
    if skipped(name) {
        return Vec::new();
    }
    let [hf, f32_gguf, f16_gguf] = model_paths(name);
    let Ok(names) = std::env::var("PAGODA_FAMILY_FORMATS") else { return vec![hf, f32_gguf, f16_gguf] };
    names
        .split(',')
        .map(|format| match format {
            "hf" => hf.clone(),
            "f32" => f32_gguf.clone(),
            "f16" => f16_gguf.clone(),
            other => panic!("PAGODA_FAMILY_FORMATS: {other:?} is none of hf, f32, f16"),
        })
        .collect()
}

/// Whether `PAGODA_FAMILY_SKIP` (comma-separated) names family `name`.
fn skipped(name: &str) -> bool {
    std::env::var("PAGODA_FAMILY_SKIP").is_ok_and(|names| names.split(',').any(|n| n == name))
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

fn ctx() -> GpuContext {
    GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)")
}

/// Logits of every position of `tokens`, one prefill with an f32 KV cache.
fn gpu_logits(ctx: &GpuContext, model: &LlamaModel, tokens: &[u32]) -> Vec<Vec<f32>> {
    let out = prefill_logits(ctx, model, tokens, BLOCK, 1).unwrap();
    out.logits.unwrap().chunks(model.config().vocab_size).map(<[f32]>::to_vec).collect()
}

/// Largest absolute difference between pagoda's row and the reference's summary of it
/// (top-8 values and the logits at the fixed ids), and whether the argmax agrees where the
/// reference's top-1/top-2 gap exceeds `atol`.
fn compare_row(row: &[f32], reference: &Value, fixed_ids: &[u32], atol: f64, what: &str) -> f64 {
    let value = |id: u32| f64::from(row[id as usize]);
    let mut worst = 0.0f64;
    let top_ids = ids(&reference["top_ids"]);
    let top_values: Vec<f64> =
        reference["top_values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (&id, &expected) in top_ids.iter().zip(&top_values) {
        worst = worst.max((value(id) - expected).abs());
    }
    for (&id, expected) in fixed_ids.iter().zip(reference["fixed"].as_array().unwrap()) {
        worst = worst.max((value(id) - expected.as_f64().unwrap()).abs());
    }
    if top_values[0] - top_values[1] > atol {
        let argmax = row.iter().enumerate().fold(0, |b, (i, &l)| if l > row[b] { i } else { b });
        assert_eq!(argmax as u32, top_ids[0], "{what}: argmax");
    }
    worst
}

/// Checks every prompt's logits of the model at `path` against the fixture.
fn check_logits(ctx: &GpuContext, name: &str, path: &PathBuf, atol: f64) {
    check_prompt_logits(ctx, name, path, atol, |_| true);
}

/// [`check_logits`] for the fixture's prompts `wanted` picks by name.
fn check_prompt_logits(ctx: &GpuContext, name: &str, path: &PathBuf, atol: f64, wanted: fn(&str) -> bool) {
    let reference = fixture(name);
    let files = ModelFiles::open(path).unwrap();
    let model = LlamaModel::load(ctx, &files, false).unwrap();
    let fixed_ids = ids(&reference["fixed_ids"]);
    let prompts = reference["prompts"].as_array().unwrap();
    for prompt in prompts.iter().filter(|p| wanted(p["name"].as_str().unwrap())) {
        let tokens = ids(&prompt["ids"]);
        let rows = gpu_logits(ctx, &model, &tokens);
        let expected = prompt["logits"].as_array().unwrap();
        assert_eq!(rows.len(), expected.len());
        let mut worst = 0.0f64;
        for (position, (row, expected)) in rows.iter().zip(expected).enumerate() {
            let what = format!("{name} {} prompt {} position {position}", path.display(), prompt["name"]);
            worst = worst.max(compare_row(row, expected, &fixed_ids, atol, &what));
        }
        assert!(
            worst <= atol,
            "{name} {}: {} prompt differs by {worst} > {atol}",
            path.display(),
            prompt["name"]
        );
    }
}

#[test]
fn every_family_pagoda_runs_matches_transformers_logits_from_hf_and_gguf() {
    let ctx = ctx();
    for name in RUNS {
        for path in formats(name) {
            check_logits(&ctx, name, &path, 1e-3);
        }
    }
}

/// The greedy continuation of every fixture prompt by the model at `path`, at the default
/// `--max-num-seqs` (256), so the logits of a 128k- or 152k-entry vocabulary (above one
/// 128 MiB binding) are cut into head tiles.
fn check_greedy(name: &str, path: &PathBuf) {
    let reference = fixture(name);
    let mut engine = Engine::builder()
        .model(path)
        .kv_cache_dtype(KvCacheDtype::F32)
        .block_size(BLOCK)
        .num_gpu_blocks(64)
        .gpu(gpu_options_from_env(&GpuOptions::default()).unwrap())
        .build()
        .unwrap();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(32) };
    let prompts = reference["prompts"].as_array().unwrap();
    let requests = prompts.iter().map(|p| Prompt::TokenIds(ids(&p["ids"])));
    let completions = engine.generate(requests, &params).unwrap();
    for (prompt, completion) in prompts.iter().zip(completions) {
        let expected = ids(&prompt["greedy"]);
        let margins = prompt["greedy_margin"].as_array().unwrap();
        let sure = margins.iter().take_while(|m| m.as_f64().unwrap() > 1e-3).count();
        assert_eq!(
            completion.token_ids[..sure],
            expected[..sure],
            "{name} {}: greedy continuation of the {} prompt",
            path.display(),
            prompt["name"]
        );
    }
}

#[test]
fn every_family_pagoda_runs_continues_greedily_as_transformers_does() {
    for name in RUNS {
        let [hf, f32_gguf, _] = model_paths(name);
        check_greedy(name, &hf);
        check_greedy(name, &f32_gguf);
    }
}

#[test]
fn every_family_pagoda_runs_renders_its_chat_template_as_transformers_does() {
    for name in RUNS.iter().chain(&["mistral", "gemma2", "phi3-longrope"]) {
        let reference = fixture(name);
        let files = ModelFiles::open(families_dir().join(name)).unwrap();
        let template = files.chat_template.as_ref().expect("the tokenizer_config.json template");
        for case in reference["chat"].as_array().unwrap() {
            let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
            let add_generation_prompt = case["add_generation_prompt"].as_bool().unwrap();
            let text = template.render(&messages, add_generation_prompt).unwrap();
            assert_eq!(text, case["text"].as_str().unwrap(), "{name}: chat render");
            assert_eq!(files.tokenizer.encode(&text, true).unwrap(), ids(&case["ids"]), "{name}: chat ids");
        }
        for prompt in reference["prompts"].as_array().unwrap() {
            let text = prompt["text"].as_str().unwrap();
            let encoded = if prompt["add_special_tokens"].as_bool().unwrap() {
                files.tokenizer.encode_prompt(text)
            } else {
                files.tokenizer.encode(text, true)
            };
            assert_eq!(encoded.unwrap(), ids(&prompt["ids"]), "{name}: {} prompt ids", prompt["name"]);
        }
        let end_of_turn = reference["tokens"]["end_of_turn_id"].as_u64().unwrap() as u32;
        assert!(files.config.eos_token_ids.contains(&end_of_turn), "{name}: stops at its end of turn");
    }
}

/// Each GGUF is the converter's output, or where the reference added metadata the converter
/// does not write (`edit`), that file.
#[test]
fn the_gguf_files_are_the_ones_llama_cpp_converter_writes() {
    for name in RUNS.iter().chain(&["mistral", "gemma2", "phi3-longrope", "gemma3-pattern"]) {
        let reference = fixture(name);
        let [_, f32_gguf, f16_gguf] = model_paths(name);
        for (path, kind) in [(f32_gguf, "f32"), (f16_gguf, "f16")] {
            let digest: String =
                Sha256::digest(std::fs::read(&path).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
            let entry = &reference["gguf"][kind];
            let expected = entry.get("edited_sha256").unwrap_or(&entry["converter_sha256"]);
            assert_eq!(digest, expected.as_str().unwrap(), "{name} {kind}");
        }
    }
}

/// Gemma 3 with its own layer pattern (sliding, sliding, full): its GGUF carries it as
/// `gemma3.attention.sliding_window_pattern`, which llama.cpp reads in place of the 5:1 default;
/// read so, the GGUF matches transformers at every position (read as 5:1, every layer would
/// slide with the local RoPE base, wrong from the first token). The F16 file carries the same
/// pattern; its logits are left to the F32 file's (the reader is one, and lavapipe is slow).
#[test]
fn gemma3_gguf_with_its_own_layer_pattern_matches_transformers() {
    let window = fixture("gemma3-pattern")["config"]["sliding_window"].as_u64().unwrap() as usize;
    let [_, f32_gguf, f16_gguf] = model_paths("gemma3-pattern");
    check_logits(&ctx(), "gemma3-pattern", &f32_gguf, 1e-3);
    for path in [f32_gguf, f16_gguf] {
        let files = ModelFiles::open(&path).unwrap();
        assert_eq!(files.config.layer_windows, [Some(window), Some(window), None], "{}", path.display());
    }
}

/// From its F32 GGUF, each tokenizer of the families gives the ids llama.cpp's `llama-tokenize`
/// gives from that file for the chat texts and the prompts, which are transformers' ids too.
/// (The families left out share these vocabularies: `llama-rope-parameters` Llama 3's,
/// `gemma2` and `gemma3-pattern` Gemma 3's, `phi3-longrope` Phi-3's.)
#[test]
fn each_family_vocabulary_from_gguf_tokenizes_as_llama_cpp_and_transformers_do() {
    for name in ["llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3"] {
        let reference = fixture(name);
        let [_, f32_gguf, _] = model_paths(name);
        let tokenizer = ModelFiles::open(&f32_gguf).unwrap().tokenizer;
        let prompts = reference["prompts"].as_array().unwrap();
        for case in reference["chat"].as_array().unwrap().iter().chain(prompts) {
            let text = case["text"].as_str().unwrap();
            let expected = ids(&case["ids_llama_cpp"]);
            assert_eq!(expected, ids(&case["ids"]), "{name}: llama.cpp and transformers on {text:?}");
            let encoded = match case.get("add_special_tokens").and_then(Value::as_bool) {
                Some(true) => tokenizer.encode_prompt(text),
                _ => tokenizer.encode(text, true),
            };
            assert_eq!(encoded.unwrap(), expected, "{name} GGUF: {text:?}");
        }
    }
}

/// Phi-3's special tokens strip the whitespace after them, but `<unk>`, `<s>` and
/// `<|endoftext|>` do not: transformers by tokenizer.json's flags, llama.cpp because the GGUF's
/// `general.name` says Phi-3. Its chat prompts put a newline after every role marker, so
/// from the GGUF they are right only so (the test above); the probes check each rule against
/// llama.cpp from the GGUF and against transformers from the HF directory (the two differ
/// after `</s>`, which this tiny tokenizer takes from Llama 2, without Phi-3's rstrip).
#[test]
fn phi3_gguf_strips_whitespace_after_special_tokens_as_llama_cpp_does() {
    for name in ["phi3", "phi3-longrope"] {
        let reference = fixture(name);
        let [hf, f32_gguf, _] = model_paths(name);
        let chat = reference["chat"].as_array().unwrap();
        assert!(chat.iter().all(|case| case["text"].as_str().unwrap().contains("<|user|>\n")));
        let gguf = ModelFiles::open(&f32_gguf).unwrap().tokenizer;
        let hf = ModelFiles::open(&hf).unwrap().tokenizer;
        for probe in reference["tokenize"].as_array().unwrap() {
            let text = probe["text"].as_str().unwrap();
            assert_eq!(
                gguf.encode(text, true).unwrap(),
                ids(&probe["ids_llama_cpp"]),
                "{name} GGUF: {text:?}"
            );
            assert_eq!(hf.encode(text, true).unwrap(), ids(&probe["ids"]), "{name} HF: {text:?}");
        }
    }
}

/// A family pagoda does not run is refused by name, never run as a Llama.
#[test]
fn a_family_pagoda_does_not_run_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(families_dir().join("qwen2/config.json")).unwrap())
            .unwrap();
    config["model_type"] = "falcon".into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    match ModelFiles::open(dir.path()) {
        Err(ModelError::Config(ConfigError::UnsupportedArchitecture(arch))) => assert_eq!(arch, "falcon"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// Mistral slides a window over every layer: the HF directory says so and matches at every
/// position, beyond the window too, prefilled at once and decoded greedily.
#[test]
fn mistral_slides_its_window_as_transformers_does() {
    let ctx = ctx();
    let [hf, _, _] = model_paths("mistral");
    check_logits(&ctx, "mistral", &hf, 1e-3);
    check_greedy("mistral", &hf);
}

/// llama.cpp's converter writes Mistral's GGUF without the window (llama.cpp then attends to
/// everything); pagoda runs it the same way, so it matches transformers inside the window.
#[test]
fn mistral_gguf_without_its_window_matches_transformers_inside_the_window() {
    let reference = fixture("mistral");
    let window = reference["config"]["sliding_window"].as_u64().unwrap() as usize;
    let ctx = ctx();
    let [_, f32_gguf, _] = model_paths("mistral");
    let files = ModelFiles::open(&f32_gguf).unwrap();
    let model = LlamaModel::load(&ctx, &files, false).unwrap();
    let fixed_ids = ids(&reference["fixed_ids"]);
    let long = reference["prompts"].as_array().unwrap().iter().find(|p| p["name"] == "long").unwrap();
    let tokens = ids(&long["ids"]);
    assert!(tokens.len() > window);
    let rows = gpu_logits(&ctx, &model, &tokens);
    let mut beyond = 0.0f64;
    for (position, (row, expected)) in rows.iter().zip(long["logits"].as_array().unwrap()).enumerate() {
        let worst =
            compare_row(row, expected, &fixed_ids, f64::INFINITY, &format!("mistral position {position}"));
        if position < window {
            assert!(worst <= 1e-3, "mistral position {position}: {worst}");
        } else {
            beyond = beyond.max(worst);
        }
    }
    assert!(beyond > 1e-2, "past the window the reference is windowed and this GGUF is not: {beyond}");
}

/// Gemma 2 — `(1 + w)` norms, scaled embeddings, GELU-tanh, sandwich norms, soft-capped
/// scores and logits, `query_pre_attn_scalar`, windows on even layers — from its HF directory.
#[test]
fn gemma2_matches_transformers() {
    let ctx = ctx();
    let [hf, _, _] = model_paths("gemma2");
    check_logits(&ctx, "gemma2", &hf, 1e-3);
    check_greedy("gemma2", &hf);
}

/// llama.cpp's converter writes no `query_pre_attn_scalar` into Gemma 2's GGUF (llama.cpp then
/// scales by 1/√head_dim, which real Gemma 2 2B/9B share); everything else it carries. So the
/// GGUF equals the HF directory run with that scale, logit for logit.
#[test]
fn gemma2_gguf_is_the_hf_model_with_llama_cpp_attention_scale() {
    let ctx = ctx();
    let [hf, f32_gguf, _] = model_paths("gemma2");
    let gguf = ModelFiles::open(&f32_gguf).unwrap();
    let mut hf = ModelFiles::open(&hf).unwrap();
    assert_ne!(hf.config.attention_scale, gguf.config.attention_scale);
    hf.config.attention_scale = gguf.config.attention_scale;
    let tokens = ids(&fixture("gemma2")["prompts"][1]["ids"]);
    let from_hf = gpu_logits(&ctx, &LlamaModel::load(&ctx, &hf, false).unwrap(), &tokens);
    let from_gguf = gpu_logits(&ctx, &LlamaModel::load(&ctx, &gguf, false).unwrap(), &tokens);
    let worst = from_hf
        .iter()
        .flatten()
        .zip(from_gguf.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= 1e-4, "gemma2 GGUF vs HF: {worst}");
}

/// Phi-3's LongRoPE: transformers rotates a whole forward pass with the long factors once the
/// sequence passes the original context (32 here) and with the short ones before; pagoda
/// picks one set per engine by its `max_model_len` (so a token's rotation never depends on
/// what it is batched with). Past the original context both use the long factors: the long
/// prompt and its continuation match; within it, an engine for short contexts matches the
/// short prompt.
#[test]
fn phi3_longrope_matches_transformers_for_the_factors_both_use() {
    let ctx = ctx();
    let reference = fixture("phi3-longrope");
    let original = reference["config"]["original_max_position_embeddings"].as_u64().unwrap() as usize;
    let fixed_ids = ids(&reference["fixed_ids"]);
    let prompt = |name: &str| {
        reference["prompts"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone()
    };
    for path in model_paths("phi3-longrope").into_iter().take(2) {
        let files = ModelFiles::open(&path).unwrap();
        for (name, max_model_len) in [("long", files.config.max_position_embeddings), ("short", original)] {
            let model = LlamaModel::load_for_context(&ctx, &files, max_model_len, false).unwrap();
            let prompt = prompt(name);
            let rows = gpu_logits(&ctx, &model, &ids(&prompt["ids"]));
            for (position, (row, expected)) in
                rows.iter().zip(prompt["logits"].as_array().unwrap()).enumerate()
            {
                let what = format!("phi3-longrope {} {name} position {position}", path.display());
                let worst = compare_row(row, expected, &fixed_ids, 1e-3, &what);
                assert!(worst <= 1e-3, "{what}: {worst}");
            }
        }
    }
}

/// Every family's greedy tokens do not depend on batching, chunked prefill or RECOMPUTE
/// preemption: the fixture prompts run together through a pool too small for them, in
/// 7-token steps, give bit for bit the tokens each gives alone (the families
/// `PAGODA_FAMILY_SKIP` names left out).
#[test]
fn every_family_is_batch_and_preemption_invariant() {
    const BLOCK: usize = 4;
    const POOL: usize = 64;
    for name in [
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "gemma2",
        "gemma3",
        "phi3",
        "phi3-longrope",
        "qwen3-moe",
        "mixtral",
        "qwen2-moe",
        "qwen3-moe-dense-layers",
        "gpt-oss",
    ]
    .into_iter()
    .filter(|name| !skipped(name))
    {
        let files = ModelFiles::open(families_dir().join(name)).unwrap();
        let sched = |budget| SchedulerConfig {
            max_num_batched_tokens: budget,
            max_num_seqs: 8,
            max_model_len: files.config.cap_model_len(128),
            ..SchedulerConfig::default()
        };
        // Mistral's blocks behind its window are freed as it goes (vLLM's sliding-window
        // manager), which must not change a token either.
        let cache = |blocks| CacheConfig {
            block_size: BLOCK,
            num_gpu_blocks: blocks,
            kv_cache_dtype: KvCacheDtype::F32,
            sliding_window: files.config.uniform_sliding_window(),
            ..CacheConfig::default()
        };
        let mut executor = WgpuExecutor::new(ctx(), &files, &cache(POOL), &sched(512), false).unwrap();
        // Prompts of at most 52 tokens (gpt-oss's 105-token harmony chat cut there, past its
        // 16-token window still), so that the longest and its 12 tokens fit the small pool.
        let prompts: Vec<Vec<u32>> = fixture(name)["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| ids(&p["ids"]).into_iter().take(52).collect())
            .collect();
        // Too small for the three prompts at once (a windowed model holds only its window).
        let small_pool = if files.config.uniform_sliding_window().is_some() { 9 } else { 18 };
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                run_scheduled(&mut executor, sched(512), cache(POOL), std::slice::from_ref(p)).0.remove(0)
            })
            .collect();
        let (together, preemptions) = run_scheduled(&mut executor, sched(7), cache(small_pool), &prompts);
        eprintln!(
            "{name}: {preemptions} preemptions, {:?}",
            together.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(preemptions > 0, "{name}: the small pool preempted nothing");
        assert_eq!(together, alone, "{name}: batched, chunked and preempted ({preemptions} preemptions)");
    }
}

/// Greedy, past EOS, 12 tokens for each of `prompts` through a fresh scheduler on
/// `executor`; each request's tokens and the preemptions it took.
fn run_scheduled(
    executor: &mut WgpuExecutor,
    sched: SchedulerConfig,
    cache: CacheConfig,
    prompts: &[Vec<u32>],
) -> (Vec<Vec<u32>>, u64) {
    let mut scheduler = Scheduler::new(sched, cache).unwrap();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(12) };
    for (id, prompt) in prompts.iter().enumerate() {
        scheduler
            .add_request(Request::new(id as u64, prompt.clone(), params.clone(), None, id as f64))
            .unwrap();
    }
    let mut tokens = vec![Vec::new(); prompts.len()];
    while scheduler.has_unfinished_requests() {
        let plan = scheduler.schedule();
        let result = if plan.is_empty() {
            Default::default()
        } else {
            executor.execute(&plan, &mut StepMasks::none()).unwrap()
        };
        for out in scheduler.update_from_output(&plan, &result) {
            tokens[out.request_id as usize].extend(out.new_token_ids);
        }
    }
    (tokens, scheduler.stats().num_preemptions)
}

/// Qwen3 quantized to Q8_0 by llama.cpp's `llama-quantize` (scripts/test.sh writes it next to
/// the f32 GGUF): the very file the reference recorded, and close to the f32 reference —
/// Q8_0 weights change the model, here by up to 1.5% of the logits' scale (0.64 of 42), so
/// 3% of it, and the argmax wherever the top two are 0.5 apart.
#[test]
fn qwen3_q8_0_from_llama_quantize_stays_close_to_transformers() {
    let reference = fixture("qwen3");
    let path = families_dir().join("qwen3/qwen3.q8_0.gguf");
    let digest: String =
        Sha256::digest(std::fs::read(&path).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, reference["gguf"]["q8_0_from_f32"]["sha256"].as_str().unwrap());
    let ctx = ctx();
    let files = ModelFiles::open(&path).unwrap();
    let model = LlamaModel::load(&ctx, &files, false).unwrap();
    let fixed_ids = ids(&reference["fixed_ids"]);
    for prompt in reference["prompts"].as_array().unwrap() {
        let rows = gpu_logits(&ctx, &model, &ids(&prompt["ids"]));
        for (position, (row, expected)) in rows.iter().zip(prompt["logits"].as_array().unwrap()).enumerate() {
            let what = format!("qwen3 Q8_0 {} position {position}", prompt["name"]);
            let worst = compare_row(row, expected, &fixed_ids, 0.5, &what);
            let scale = expected["top_values"][0].as_f64().unwrap().abs();
            assert!(worst <= 0.03 * scale, "{what}: {worst} against logits of {scale}");
        }
    }
}

/// Qwen3-MoE with dense MLPs between its expert layers (`decoder_sparse_step` 2 and
/// `mlp_only_layers` [3]: experts on layer 1 alone, gated MLPs of `intermediate_size` on 0, 2
/// and 3), from its HF directory: every position of every prompt (unless `PAGODA_FAMILY_SKIP`
/// names it). llama.cpp's converter refuses the model (it maps no dense FFN tensor for
/// qwen3moe, as the reference recorded), so there is no GGUF of it.
#[test]
fn qwen3_moe_with_dense_layers_matches_transformers_logits() {
    let name = "qwen3-moe-dense-layers";
    if skipped(name) {
        return;
    }
    let files = ModelFiles::open(families_dir().join(name)).unwrap();
    assert_eq!(files.config.moe_layers, [false, true, false, false]);
    let weights = files.llama_weights().unwrap();
    let kinds: Vec<bool> =
        weights.layers.iter().map(|l| matches!(l.mlp, MlpWeights::Experts { .. })).collect();
    assert_eq!(kinds, [false, true, false, false]);
    let refused = fixture(name)["gguf"]["converter_refused"].as_str().unwrap().to_owned();
    assert!(refused.contains("Can not map tensor 'model.layers.0.mlp."), "{refused}");
    let [hf, _, _] = model_paths(name);
    check_logits(&ctx(), name, &hf, 1e-3);
}

/// Its greedy continuations of the fixture prompts, from its HF directory.
#[test]
fn qwen3_moe_with_dense_layers_continues_greedily_as_transformers_does() {
    let [hf, _, _] = model_paths("qwen3-moe-dense-layers");
    check_greedy("qwen3-moe-dense-layers", &hf);
}

/// gpt-oss — attention sinks, Q/K/V/O biases, sliding (16) and full layers alternating, YaRN,
/// experts with biases routed top-k then softmax through the clamped SwiGLU — from its HF
/// directory (transformers 4's layout: gate and up interleaved in one input-major tensor):
/// every position of every prompt, past the window too.
#[test]
fn gpt_oss_matches_transformers_logits() {
    let files = ModelFiles::open(families_dir().join("gpt-oss")).unwrap();
    assert_eq!(files.config.layer_windows, [Some(16), None]);
    assert!(files.config.attention_sinks && files.config.o_bias && files.config.attention_bias);
    let [hf, _, _] = model_paths("gpt-oss");
    check_logits(&ctx(), "gpt-oss", &hf, 1e-3);
}

/// gpt-oss's greedy continuations of the fixture prompts, from its HF directory.
#[test]
fn gpt_oss_continues_greedily_as_transformers_does() {
    let [hf, _, _] = model_paths("gpt-oss");
    check_greedy("gpt-oss", &hf);
}

/// The GGUF llama.cpp's converter writes of the tiny gpt-oss (and `llama-quantize`'s MXFP4 of
/// it), where `scripts/family-reference.sh --only gpt-oss --quantize` made them (not in CI:
/// skipped with a message when absent): the converter's file is the one the reference
/// recorded, both match transformers as the HF directory does, and their vocabulary encodes
/// the fixture's texts as llama.cpp does.
#[test]
fn gpt_oss_gguf_matches_transformers_where_present() {
    let reference = fixture("gpt-oss");
    let [_, f32_gguf, _] = model_paths("gpt-oss");
    let mxfp4 = families_dir().join("gpt-oss/gpt-oss.mxfp4.gguf");
    let ctx = ctx();
    for (path, sha) in [(f32_gguf, "/gguf/f32/converter_sha256"), (mxfp4, "/gguf/mxfp4_from_f32/sha256")] {
        if !path.is_file() {
            eprintln!(
                "skipped: {} is absent (scripts/family-reference.sh --only gpt-oss --quantize)",
                path.display()
            );
            continue;
        }
        let digest: String =
            Sha256::digest(std::fs::read(&path).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, reference.pointer(sha).unwrap().as_str().unwrap(), "{}", path.display());
        check_logits(&ctx, "gpt-oss", &path, 1e-3);
        check_greedy("gpt-oss", &path);
        // its o200k vocabulary (`tokenizer.ggml.pre` gpt-4o) encodes as llama.cpp's llama-tokenize
        let tokenizer = ModelFiles::open(&path).unwrap().tokenizer;
        for case in
            reference["chat"].as_array().unwrap().iter().chain(reference["prompts"].as_array().unwrap())
        {
            let text = case["text"].as_str().unwrap();
            let encoded = match case.get("add_special_tokens").and_then(Value::as_bool) {
                Some(true) => tokenizer.encode_prompt(text),
                _ => tokenizer.encode(text, true),
            };
            assert_eq!(encoded.unwrap(), ids(&case["ids_llama_cpp"]), "gpt-oss GGUF: {text:?}");
        }
    }
}

/// gpt-oss's harmony template, as its GGUF carries it, renders as transformers renders it
/// (with `strftime_now` reading the reference's fixed clock), and its tokenizer encodes the
/// renderings and prompts to transformers' ids.
#[test]
fn gpt_oss_renders_its_chat_template_as_transformers_does() {
    let reference = fixture("gpt-oss");
    assert_eq!(reference["strftime_now_fixed"], "2026-01-15T12:00:00");
    let tokens = &reference["tokens"];
    let source = reference["gguf"]["metadata"]["tokenizer.chat_template"]["value"].as_str().unwrap();
    let template = ChatTemplate::new(
        source,
        tokens["bos_token"].as_str().unwrap(),
        tokens["eos_token"].as_str().unwrap(),
    )
    .unwrap();
    template.fix_clock(1_768_478_400);
    let tokenizer = Tokenizer::from_hf_dir(families_dir().join("gpt-oss")).unwrap();
    for case in reference["chat"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let text = template.render(&messages, case["add_generation_prompt"].as_bool().unwrap()).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "gpt-oss: chat render");
        assert_eq!(tokenizer.encode(&text, true).unwrap(), ids(&case["ids"]), "gpt-oss: chat ids");
        assert_eq!(ids(&case["ids"]), ids(&case["ids_llama_cpp"]), "gpt-oss: llama.cpp agrees");
    }
    for prompt in reference["prompts"].as_array().unwrap() {
        let text = prompt["text"].as_str().unwrap();
        let encoded = if prompt["add_special_tokens"].as_bool().unwrap() {
            tokenizer.encode_prompt(text)
        } else {
            tokenizer.encode(text, true)
        };
        assert_eq!(encoded.unwrap(), ids(&prompt["ids"]), "gpt-oss: {} prompt ids", prompt["name"]);
    }
}

/// gpt-oss's MXFP4 checkpoint in the hub's form (experts as `_blocks`/`_scales`, written by
/// scripts/tiny-families.py): its experts stay MXFP4, byte for byte the tensors llama.cpp's
/// converter repacks the same checkpoint into (tests/fixtures/families/gpt-oss-mxfp4.json),
/// dequantized to the f32 checkpoint's very experts (which transformers reads it back to), and
/// its logits match transformers' at every position of the long prompt (past the 16-token
/// window; the f32 checkpoint's test covers the others, these experts being its very values).
#[test]
fn gpt_oss_mxfp4_checkpoint_stays_mxfp4_as_llama_cpp_repacks_it_and_matches_transformers() {
    let reference = fixture("gpt-oss-mxfp4");
    assert_eq!(reference["transformers"]["parameters_equal_f32"], true);
    assert_eq!(reference["transformers"]["max_logit_difference"], 0.0);
    let path = families_dir().join("gpt-oss/mxfp4");
    let files = ModelFiles::open(&path).unwrap();
    let f32_files = ModelFiles::open(families_dir().join("gpt-oss")).unwrap();
    let (weights, f32_weights) = (files.llama_weights().unwrap(), f32_files.llama_weights().unwrap());
    fn experts<'a>(w: &LayerWeights<'a>) -> Vec<ExpertWeights<'a>> {
        match &w.mlp {
            MlpWeights::Experts { experts, .. } => experts.clone(),
            MlpWeights::Dense(_) => panic!("gpt-oss has experts"),
        }
    }
    fn of<'a>(e: &ExpertWeights<'a>, pick: usize) -> TensorView<'a> {
        [&e.gate_proj, &e.up_proj, &e.down_proj][pick].clone()
    }
    let tensors = reference["converter"]["tensors"].as_array().unwrap();
    for (l, (layer, f32_layer)) in weights.layers.iter().zip(&f32_weights.layers).enumerate() {
        let (mx, f) = (experts(layer), experts(f32_layer));
        for (part, pick) in [("gate", 0), ("up", 1), ("down", 2)] {
            let bytes: Vec<u8> = mx.iter().flat_map(|e| of(e, pick).data.to_vec()).collect();
            let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
            let name = format!("blk.{l}.ffn_{part}_exps.weight");
            let expected = tensors.iter().find(|t| t["name"] == name.as_str()).unwrap();
            assert_eq!(expected["type"], "MXFP4");
            assert_eq!(digest, expected["sha256"].as_str().unwrap(), "{name}: the converter's bytes");
            for (x, (m, w)) in mx.iter().zip(&f).enumerate() {
                assert_eq!(of(m, pick).dtype, DType::MXFP4, "{name} expert {x} stays MXFP4");
                let (got, want) = (of(m, pick).to_f32(), of(w, pick).to_f32());
                assert_eq!(got, want, "{name} expert {x}: the f32 checkpoint's values");
            }
        }
    }
    check_prompt_logits(&ctx(), "gpt-oss", &path, 1e-3, |name| name == "long");
}
