//! Per-request limits end that request alone, on the real model (the tiny family models of
//! `PAGODA_FAMILIES_DIR`, made by scripts/tiny-families.py, on the GPU executor): a
//! sliding-window model's sequences outgrow a small KV pool and still match a large pool's
//! tokens bit for bit, preempted or not; a full-attention request that outgrows the pool, a
//! prompt longer than `max_model_len` and a request that reaches `max_model_len` each end (or
//! are refused) alone, while the two healthy requests beside them produce exactly what they
//! produce alone.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pagoda::core::cache_config::KvCacheDtype;
use pagoda::core::request::FinishReason;
use pagoda::{Engine, EngineError, SamplingParams};

fn family(name: &str) -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints")
        .join(name)
}

/// An engine on family `name` with blocks of 4 tokens, `blocks` of them, an f32 KV cache and
/// a token budget of `budget` a step.
fn engine(name: &str, blocks: usize, budget: usize, max_model_len: Option<usize>) -> Engine {
    let mut builder = Engine::builder()
        .model(family(name))
        .block_size(4)
        .num_gpu_blocks(blocks)
        .kv_cache_dtype(KvCacheDtype::F32)
        .max_num_batched_tokens(budget)
        .show_progress(false);
    if let Some(len) = max_model_len {
        builder = builder.max_model_len(len);
    }
    builder.build().expect("engine on the tiny family model")
}

/// What one request produced: its tokens and how it ended.
#[derive(Debug, Clone, PartialEq)]
struct Finished {
    tokens: Vec<u32>,
    reason: FinishReason,
}

/// Runs every request added (greedy past EOS, `max_tokens` each) to the end; by request id.
fn run(engine: &mut Engine) -> BTreeMap<u64, Finished> {
    let mut tokens: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let mut done = BTreeMap::new();
    while engine.has_unfinished_requests() {
        for out in engine.step().expect("no step fails for everyone") {
            tokens.entry(out.request_id).or_default().extend(&out.new_token_ids);
            if let Some(reason) = out.finish_reason {
                done.insert(
                    out.request_id,
                    Finished { tokens: tokens.remove(&out.request_id).unwrap_or_default(), reason },
                );
            }
        }
    }
    done
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams { ignore_eos: true, ..SamplingParams::greedy(max_tokens) }
}

/// Three prompts, the first of about 50 tokens (the case).
fn prompts() -> [String; 3] {
    [
        "The old lighthouse keeper climbed the spiral stairs every evening at dusk, counting each of the \
         one hundred and twelve steps, listening to the sea below and thinking about the ships"
            .to_string(),
        "Once upon a time".to_string(),
        "The capital of France is".to_string(),
    ]
}

/// Each of `prompts` for `max_tokens` tokens on a fresh engine made by `make`.
fn generate(make: impl Fn() -> Engine, prompts: &[String], max_tokens: usize) -> (Vec<Finished>, u64) {
    let mut engine = make();
    for prompt in prompts {
        engine.add_request(prompt.as_str(), greedy(max_tokens)).unwrap();
    }
    let preemptions = engine.metrics().scheduler.num_preemptions;
    let done = run(&mut engine);
    let preemptions = engine.metrics().scheduler.num_preemptions - preemptions;
    (done.into_values().collect(), preemptions)
}

/// Mistral's window is 16 tokens: a pool of 10, 12 or 14 blocks of 4 holds every request's
/// window but not its whole sequence (about 90 tokens, 23 blocks). The sequences outgrow the
/// pool (null blocks stand in for the ones behind the window) and every token equals a large
/// pool's.
#[test]
fn a_sliding_window_model_outgrows_a_small_pool_with_the_large_pools_tokens() {
    let prompts = prompts();
    let (large, _) = generate(|| engine("mistral", 400, 16, None), &prompts, 40);
    assert!(large.iter().all(|f| f.tokens.len() == 40 && f.reason == FinishReason::Length), "{large:?}");
    for blocks in [10, 12, 14] {
        let (small, preemptions) = generate(|| engine("mistral", blocks, 16, None), &prompts, 40);
        eprintln!("{blocks} blocks: {preemptions} preemptions");
        assert_eq!(small, large, "{blocks} blocks");
    }
}

/// RECOMPUTE under a sliding window with a pool smaller than the longest sequence: 7-token
/// steps through 9 blocks preempt, and the tokens are the large pool's bit for bit.
#[test]
fn a_sliding_window_model_preempted_in_a_pool_smaller_than_its_sequences_keeps_its_tokens() {
    let prompts = prompts();
    let (large, _) = generate(|| engine("mistral", 400, 512, None), &prompts, 32);
    let (small, preemptions) = generate(|| engine("mistral", 9, 7, None), &prompts, 32);
    assert!(preemptions > 0, "9 blocks preempted nothing");
    assert_eq!(small, large, "{preemptions} preemptions");
}

/// A full-attention model (every block stays): beside two healthy requests, one that
/// outgrows the 44-token pool stops alone (`length`, a prefix of its large-pool tokens), a
/// prompt longer than `max_model_len` is refused alone, and one that reaches
/// `max_model_len` ends there; the healthy two produce exactly their tokens alone.
#[test]
fn a_request_past_each_limit_ends_alone_and_the_others_are_unchanged() {
    const MAX_MODEL_LEN: usize = 40;
    let make = |blocks| engine("llama", blocks, 16, Some(MAX_MODEL_LEN));
    let healthy = ["Once upon a time", "The capital of France is"];
    let alone: Vec<Finished> =
        healthy.iter().map(|p| generate(|| make(400), &[p.to_string()], 8).0.remove(0)).collect();

    // The pool: 11 usable blocks of 4 tokens, 44 tokens, less than the growing request's
    // 30-odd prompt and 30 more tokens could take (max_model_len 40 would stop it at 40, so
    // its own cap is lifted for this case).
    let mut engine = engine("llama", 12, 16, Some(60));
    let grower = engine.add_request(prompts()[0].as_str(), greedy(30)).unwrap();
    let ids: Vec<u64> = healthy.iter().map(|p| engine.add_request(*p, greedy(8)).unwrap()).collect();
    let done = run(&mut engine);
    let grown = &done[&grower];
    assert_eq!(grown.reason, FinishReason::Length, "{grown:?}");
    assert!(grown.tokens.len() < 30, "the pool should stop it before max_tokens: {grown:?}");
    let mut roomy = self::engine("llama", 400, 16, Some(60));
    let roomy_id = roomy.add_request(prompts()[0].as_str(), greedy(30)).unwrap();
    let full = &run(&mut roomy)[&roomy_id];
    assert_eq!(grown.tokens[..], full.tokens[..grown.tokens.len()], "the capped request's tokens");
    for (id, expected) in ids.iter().zip(&alone) {
        assert_eq!(&done[id], expected, "healthy request {id} beside one outgrowing the pool");
    }

    // max_model_len: a prompt past it is refused alone, a request reaching it ends there.
    let mut engine = make(400);
    let long = prompts()[0].repeat(2);
    let refused = engine.add_request(long.as_str(), greedy(8));
    assert!(matches!(refused, Err(EngineError::Rejected(_))), "{refused:?}");
    let reacher = engine.add_request(prompts()[0].as_str(), greedy(30)).unwrap();
    let ids: Vec<u64> = healthy.iter().map(|p| engine.add_request(*p, greedy(8)).unwrap()).collect();
    let done = run(&mut engine);
    let reached = &done[&reacher];
    let prompt_len = engine.encode_prompt(&prompts()[0].as_str().into()).unwrap().len();
    assert_eq!(reached.reason, FinishReason::Length);
    assert_eq!(prompt_len + reached.tokens.len(), MAX_MODEL_LEN, "{reached:?}");
    for (id, expected) in ids.iter().zip(&alone) {
        assert_eq!(&done[id], expected, "healthy request {id} beside one reaching max_model_len");
    }
}
