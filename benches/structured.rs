//! The cost of structured outputs on SmolLM2-135M-Instruct: llguidance's mask time per token
//! over the model's 49k vocabulary on a nested JSON schema, and generated tokens/s with and
//! without a constraint at batch 1 and 32 (wgpu executor).
//!
//! `cargo bench --bench structured` measures the default model (env `PAGODA_MODEL_GGUF` or the
//! cache). Without `--bench` (as `cargo test --all-targets` runs it) it does one quick pass on
//! the tiny random model, so the code path stays tested.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pagoda::dtype::DType;
use pagoda::model::testing::TinyLlama;
use pagoda::model::{ModelFiles, default_model_path};
use pagoda::structured::{Constraint, Grammars};
use pagoda::{CacheConfig, Engine, ExecutorKind, SamplingParams};
use serde_json::{Value, json};

/// A nested schema: an order with a customer, items with quantities and a status.
fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "customer": {"type": "object", "properties": {
                "name": {"type": "string"}, "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}},
                "required": ["name", "email"]},
            "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                "price": {"type": "number", "minimum": 0}},
                "required": ["sku", "quantity", "price"]}},
            "status": {"enum": ["pending", "paid", "shipped"]}
        },
        "required": ["id", "customer", "items", "status"]
    })
}

/// A document valid under [`order_schema`], in the layout the constraint produces.
const ORDER: &str = r#"{"id": 1042, "customer": {"name": "Ada Lovelace", "email": "ada@example.com"}, "items": [{"sku": "ABC-1234", "quantity": 2, "price": 19.5}, {"sku": "XYZ-0007", "quantity": 1, "price": 5}], "status": "paid"}"#;

/// Mask time per token: walks [`ORDER`]'s tokens through the schema `passes` times,
/// computing the mask before each; returns (mean, p50, max) per token.
fn mask_times(model: &ModelFiles, passes: usize) -> (Duration, Duration, Duration) {
    let tokenizer = Arc::new(model.tokenizer.clone());
    let tokens = tokenizer.encode(ORDER, false).expect("tokenize");
    let grammars = Grammars::new(tokenizer, model.eos_token_id(), Vec::new());
    let constraint = Constraint::JsonSchema(order_schema());
    let mut times = Vec::with_capacity(passes * tokens.len());
    for _ in 0..passes {
        let mut state = grammars.compile(&constraint).expect("compile");
        for &token in &tokens {
            let started = Instant::now();
            let mask = state.mask().expect("mask");
            times.push(started.elapsed());
            assert!(mask.allows(token), "the document leaves the schema at token {token}");
            state.follow(&[token]).expect("follow");
        }
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    (mean, times[times.len() / 2], times[times.len() - 1])
}

/// Generated tokens/s for `batch` requests of `max_tokens` each, with or without a
/// constraint (a long array of integers, so constrained requests run to `max_tokens` too).
fn tokens_per_second(engine: &mut Engine, batch: usize, max_tokens: usize, constrained: bool) -> f64 {
    let schema =
        json!({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 200});
    let prompts: Vec<String> = (0..batch)
        .map(|i| format!("<|im_start|>user\nList numbers, take {i}.<|im_end|>\n<|im_start|>assistant\n"))
        .collect();
    let params = SamplingParams {
        temperature: 0.7,
        seed: Some(7),
        max_tokens,
        ignore_eos: true,
        structured_outputs: constrained.then(|| Constraint::JsonSchema(schema)),
        ..SamplingParams::default()
    };
    let started = Instant::now();
    let outputs = engine.generate(prompts, &params).expect("generate");
    let generated: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    generated as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = if bench {
        default_model_path().expect("default model")
    } else {
        let path = dir.path().join("tiny.gguf");
        TinyLlama::new(1).write_gguf(&path, DType::Q4_1).expect("tiny model");
        path
    };
    let model = ModelFiles::open(&path).expect("open model");
    if bench {
        let (mean, p50, max) = mask_times(&model, 20);
        println!(
            "mask per token ({} vocabulary, nested schema): mean {mean:?}, p50 {p50:?}, max {max:?}",
            model.tokenizer.vocab_size()
        );
    }
    let (batches, max_tokens): (&[usize], usize) = if bench { (&[1, 32], 32) } else { (&[1], 4) };
    let mut engine = Engine::builder()
        .model(&path)
        .executor(ExecutorKind::Wgpu)
        .cache(CacheConfig { num_gpu_blocks: 512, ..CacheConfig::default() })
        .max_num_seqs(32)
        .build()
        .expect("engine");
    for &batch in batches {
        let free = tokens_per_second(&mut engine, batch, max_tokens, false);
        let held = tokens_per_second(&mut engine, batch, max_tokens, true);
        println!(
            "batch {batch:>2}: {free:.1} tok/s unconstrained, {held:.1} tok/s constrained ({:.0}%)",
            100.0 * held / free
        );
    }
}
