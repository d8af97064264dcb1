//! Offline batch generation: many prompts in one call, scheduled together.
//!
//! `cargo run --release --example batch -- [MODEL.gguf | HF_DIR]` (the default model when
//! none is given). `generate` adds every prompt, steps until all are finished, and returns
//! the completions in prompt order.

use std::time::Instant;

use pagoda::{ChatMessage, Engine, Prompt, SamplingParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Engine::builder().show_progress(true);
    if let Some(model) = std::env::args().nth(1) {
        builder = builder.model(model);
    }
    let mut engine = builder.build()?;

    let questions = [
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "What is 12 times 12?",
        "Give one tip for learning Rust.",
    ];
    let prompts: Vec<Prompt> =
        questions.iter().map(|q| Prompt::Chat(vec![ChatMessage::new("user", *q)])).collect();
    let params =
        SamplingParams { temperature: 0.7, seed: Some(1), max_tokens: 40, ..SamplingParams::default() };

    let start = Instant::now();
    let completions = engine.generate(prompts, &params)?;
    let seconds = start.elapsed().as_secs_f64();

    let mut generated = 0;
    for (question, completion) in questions.iter().zip(&completions) {
        generated += completion.token_ids.len();
        println!("Q: {question}\nA: {}\n", completion.text.trim());
    }
    let metrics = engine.metrics();
    println!(
        "{} prompts, {generated} tokens in {seconds:.1} s ({:.1} tokens/s); prefix cache hits {} of {} tokens",
        completions.len(),
        generated as f64 / seconds,
        metrics.scheduler.prefix_cache.hits,
        metrics.scheduler.prefix_cache.queries,
    );
    Ok(())
}
