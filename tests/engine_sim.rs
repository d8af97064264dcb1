//! `Engine::new` with the simulated executor on the tiny model's files: every output token
//! is the simulated model's next token after the request's history, whatever the batch.

use pagoda::executor::sim::{CostModel, SimConfig, next_token};
use pagoda::model::testing::TinyLlama;
use pagoda::{CacheConfig, Engine, ExecutorKind, FinishReason, SamplingParams, TokenId};

/// The simulated model's continuation of `prompt`: up to `max_tokens`, ending at EOS.
fn expected(config: &SimConfig, prompt: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
    let mut history = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < max_tokens {
        let token = next_token(config, &history);
        history.push(token);
        out.push(token);
        if Some(token) == config.eos_token_id {
            break;
        }
    }
    out
}

#[test]
fn the_simulated_engine_continues_each_history_exactly() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
    let mut engine = Engine::builder()
        .model(dir.path())
        .executor(ExecutorKind::Sim)
        .seed(3)
        .cache(CacheConfig { num_gpu_blocks: 12, block_size: 4, ..CacheConfig::default() })
        .max_num_batched_tokens(7)
        .build()
        .unwrap();
    let sim = SimConfig { vocab_size: 275, eos_token_id: Some(2), seed: 3, cost: CostModel::default() };
    let prompts = ["the tower", "a much longer prompt about a wise cat", "x", "in the end"];
    let params = SamplingParams { max_tokens: 12, ..SamplingParams::default() };
    let outputs = engine.generate(prompts, &params).unwrap();
    for output in &outputs {
        let tokens = expected(&sim, &output.prompt_token_ids, 12);
        assert_eq!(output.token_ids, tokens);
        let reason = if tokens.last() == Some(&2) { FinishReason::Stop } else { FinishReason::Length };
        assert_eq!(output.finish_reason, Some(reason));
    }
    assert!(engine.metrics().scheduler.num_preemptions > 0);
    assert_eq!(engine.metrics().scheduler.kv_cache_usage, 0.0);
}
