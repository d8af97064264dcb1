//! SmolLM2 with n-gram and draft-model speculative decoding through the real scheduler and the wgpu
//! executor: by the invariance rule the verify pass computes each proposed position's logits
//! as plain decode would, so speculation returns plain decode's tokens bit for bit — greedy
//! and seeded sampling alike — batched, chunked and under RECOMPUTE preemption.

mod smollm2_support;

use std::collections::HashMap;

use pagoda::core::metrics::SchedulerStats;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::sampling::SamplingParams;
use pagoda::{SpeculativeConfig, TokenId};
use smollm2_support::{
    add_requests, executor_for, greedy_cases, run_to_completion, scheduler_config, scheduler_with, smollm2,
};

const MAX_TOKENS: usize = 16;

/// Runs `prompts` with `params` through a fresh scheduler (`budget` tokens a step, a pool
/// of `num_blocks` blocks, prefix caching on); returns each request's tokens and the stats.
fn run(
    exec: &mut WgpuExecutor,
    prompts: &[Vec<TokenId>],
    params: &SamplingParams,
    first_id: u64,
    (budget, num_blocks): (usize, usize),
    spec: Option<SpeculativeConfig>,
) -> (Vec<Vec<TokenId>>, SchedulerStats) {
    let config = pagoda::SchedulerConfig { speculative_config: spec, ..scheduler_config(budget) };
    let mut scheduler = scheduler_with(config, num_blocks, true);
    let requests: Vec<_> = prompts.iter().map(|prompt| (prompt.clone(), params.clone())).collect();
    add_requests(&mut scheduler, &requests, first_id);
    let mut tokens: HashMap<u64, Vec<TokenId>> = HashMap::new();
    run_to_completion(exec, &mut scheduler, |out| {
        tokens.entry(out.request_id).or_default().extend(out.new_token_ids);
    });
    let outputs =
        (0..prompts.len() as u64).map(|i| tokens.remove(&(first_id + i)).unwrap_or_default()).collect();
    (outputs, scheduler.stats())
}

/// A prompt the model continues by copying it, and two of the fixture's.
fn prompts() -> Vec<Vec<TokenId>> {
    let text = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log. The cat";
    let repetitive = smollm2().tokenizer.encode(text, false).unwrap();
    let fixture = greedy_cases();
    vec![repetitive, fixture[0].prompt.clone(), fixture[1].prompt.clone()]
}

#[test]
fn ngram_speculation_returns_plain_decodes_tokens_batched_chunked_and_preempted() {
    let spec = Some(SpeculativeConfig::ngram(4, 1, 3));
    let mut exec =
        executor_for(&pagoda::SchedulerConfig { speculative_config: spec.clone(), ..scheduler_config(1024) });
    let prompts = prompts();
    let greedy = SamplingParams::greedy(MAX_TOKENS);
    // Roomy, then a budget of 7 that chunks prompts and cuts proposals, on a pool of 12
    // blocks of 4 tokens that makes the three requests preempt each other (and caps the
    // longest at the pool's size, speculating or not).
    let mut plain_roomy = Vec::new();
    for (i, limits) in [(64, 64), (7, 12)].into_iter().enumerate() {
        let first_id = 200 + 10 * i as u64;
        let (plain, _) = run(&mut exec, &prompts, &greedy, first_id, limits, None);
        let (outputs, stats) = run(&mut exec, &prompts, &greedy, first_id + 5, limits, spec.clone());
        eprintln!("{limits:?}: {:?}, {} preemptions", stats.spec_decoding, stats.num_preemptions);
        assert_eq!(outputs, plain, "{limits:?}");
        assert!(stats.spec_decoding.num_accepted_tokens > 0, "{limits:?}: {:?}", stats.spec_decoding);
        if limits.1 == 12 {
            assert!(stats.num_preemptions > 0, "the small pool preempts");
        } else {
            plain_roomy = plain;
        }
    }
    // Alone, the copying prompt accepts most proposals and takes fewer steps.
    let (alone, stats) = run(&mut exec, &prompts[..1], &greedy, 300, (64, 64), spec);
    let (_, plain_stats) = run(&mut exec, &prompts[..1], &greedy, 310, (64, 64), None);
    assert_eq!(alone[0], plain_roomy[0]);
    eprintln!(
        "alone: {:?}, {} steps, plain {} steps",
        stats.spec_decoding, stats.num_steps, plain_stats.num_steps
    );
    assert!(stats.spec_decoding.acceptance_rate() > 0.5, "{:?}", stats.spec_decoding);
    assert!(stats.num_steps < plain_stats.num_steps, "accepted proposals save steps");
}

#[test]
fn seeded_sampling_with_speculation_draws_plain_decodes_tokens() {
    let spec = Some(SpeculativeConfig::ngram(4, 1, 3));
    let mut exec =
        executor_for(&pagoda::SchedulerConfig { speculative_config: spec.clone(), ..scheduler_config(1024) });
    let prompts = prompts();
    let params =
        SamplingParams { temperature: 0.7, top_p: 0.95, seed: Some(7), ..SamplingParams::greedy(MAX_TOKENS) };
    let (plain, _) = run(&mut exec, &prompts[..1], &params, 400, (64, 64), None);
    let (spec, stats) = run(&mut exec, &prompts[..1], &params, 500, (64, 64), spec);
    assert_eq!(spec, plain);
    assert!(stats.spec_decoding.num_accepted_tokens > 0, "{:?}", stats.spec_decoding);
}

/// The engine end to end: a stop string met inside a step's accepted tokens ends the request
/// at the token plain decode ends it at, with the same text.
#[test]
fn a_stop_string_inside_accepted_tokens_ends_where_plain_decode_ends() {
    let text = "The cat sat on the mat. The dog sat on the log. The bird sat on the branch. The cat sat on the mat. The dog sat on the log. The bird sat on the branch. The cat sat on the mat. The dog";
    let params = SamplingParams { stop: vec![" on".into()], ..SamplingParams::greedy(24) };
    let complete = |spec: Option<SpeculativeConfig>| {
        let mut builder = pagoda::Engine::builder()
            .kv_cache_dtype(pagoda::KvCacheDtype::F32)
            .block_size(4)
            .num_gpu_blocks(64)
            .max_model_len(256);
        if let Some(spec) = spec {
            builder = builder.speculative_config(spec);
        }
        let mut engine = builder.build().unwrap();
        let completion = engine.generate([text], &params).unwrap().remove(0);
        (completion, engine.metrics().scheduler.spec_decoding)
    };
    let (plain, _) = complete(None);
    let (spec, stats) = complete(Some(SpeculativeConfig::ngram(4, 1, 4)));
    eprintln!("{:?} {:?}: {stats:?}", plain.token_ids, plain.text);
    assert_eq!(plain.finish_reason, Some(pagoda::FinishReason::Stop));
    assert_eq!(
        (&spec.token_ids, &spec.text, spec.finish_reason),
        (&plain.token_ids, &plain.text, plain.finish_reason)
    );
    // The one verify pass accepted all four proposals, " on" among the first.
    assert_eq!(plain.token_ids.len(), 2);
    assert_eq!((stats.num_drafts, stats.num_accepted_tokens), (1, 4), "{stats:?}");
}

/// The default model drafting for itself: by the invariance rule its single-token passes
/// compute the bits the verify pass does, so every proposal is accepted — alone, batched,
/// with chunked prefill cutting proposals, and under preemption on a tiny pool with prefix
/// caching — and the tokens are plain decode's.
#[test]
fn the_default_model_drafting_for_itself_accepts_every_proposal() {
    let path = pagoda::model::default_model_path().unwrap();
    let spec = Some(SpeculativeConfig::draft_model(path, 3));
    let mut exec =
        executor_for(&pagoda::SchedulerConfig { speculative_config: spec.clone(), ..scheduler_config(1024) });
    let prompts = prompts();
    let greedy = SamplingParams::greedy(MAX_TOKENS);
    for (i, (limits, count)) in [((64, 64), 1), ((64, 64), 3), ((7, 12), 3)].into_iter().enumerate() {
        let first_id = 600 + 10 * i as u64;
        let (plain, _) = run(&mut exec, &prompts[..count], &greedy, first_id, limits, None);
        let (outputs, stats) = run(&mut exec, &prompts[..count], &greedy, first_id + 5, limits, spec.clone());
        let spec_stats = &stats.spec_decoding;
        eprintln!("{limits:?} x{count}: {spec_stats:?}, {} preemptions", stats.num_preemptions);
        assert_eq!(outputs, plain, "{limits:?} x{count}");
        assert!(spec_stats.num_draft_tokens > 0, "{limits:?} x{count}");
        assert_eq!(spec_stats.num_accepted_tokens, spec_stats.num_draft_tokens, "{limits:?} x{count}");
        if limits.1 == 12 {
            assert!(stats.num_preemptions > 0, "the small pool preempts");
        }
    }
}

/// A draft model whose vocabulary differs from the model's is refused with a typed error.
#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let dir = std::env::var_os("PAGODA_FAMILIES_DIR").expect("PAGODA_FAMILIES_DIR (source /tmp/env.sh)");
    let other = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| pagoda::model::ModelFiles::open(path).is_ok_and(|m| m.config.vocab_size != 49152))
        .expect("a family model with another vocabulary");
    let spec = SpeculativeConfig::draft_model(&other, 2);
    let ctx = pagoda::gpu::GpuContext::new(
        &pagoda::engine::engine_config::gpu_options_from_env(&Default::default()).unwrap(),
    )
    .unwrap();
    let config = pagoda::SchedulerConfig { speculative_config: Some(spec), ..scheduler_config(64) };
    let cache = pagoda::CacheConfig { num_gpu_blocks: 16, block_size: 4, ..Default::default() };
    let error = WgpuExecutor::new(ctx, &smollm2(), &cache, &config, false).unwrap_err();
    assert!(
        matches!(&error, pagoda::executor::ExecutorError::DraftModel(m) if m.contains("vocabulary")),
        "{error}"
    );
}

/// Structured outputs under speculation: the verify pass samples each position under the
/// mask token-by-token decoding would have there (a copy of the matcher advanced along the
/// proposals), so a constrained request returns plain decode's tokens — greedy and seeded —
/// while proposals are accepted, and the grammar still shapes the output.
#[test]
fn a_constrained_request_under_speculation_returns_plain_decodes_tokens() {
    let text = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log. The cat";
    let lowercase = pagoda::structured::Constraint::Regex("[a-z ]+".into());
    let greedy = SamplingParams::greedy(24);
    let constrained = SamplingParams { structured_outputs: Some(lowercase), ..greedy.clone() };
    let seeded = SamplingParams { temperature: 0.8, seed: Some(11), ..constrained.clone() };
    let complete = |spec: Option<SpeculativeConfig>| {
        let mut builder = pagoda::Engine::builder()
            .kv_cache_dtype(pagoda::KvCacheDtype::F32)
            .block_size(4)
            .num_gpu_blocks(128)
            .max_model_len(256);
        if let Some(spec) = spec {
            builder = builder.speculative_config(spec);
        }
        let mut engine = builder.build().unwrap();
        let mut accepted_before = 0;
        let run = |params: &SamplingParams| {
            let tokens = engine.generate([text], params).unwrap().remove(0).token_ids;
            let accepted = engine.metrics().scheduler.spec_decoding.num_accepted_tokens;
            let run = (tokens, accepted - accepted_before);
            accepted_before = accepted;
            run
        };
        [&greedy, &constrained, &seeded].map(run)
    };
    let plain = complete(None);
    let spec = complete(Some(SpeculativeConfig::ngram(4, 1, 3)));
    eprintln!("plain {plain:?}\nspeculative {spec:?}");
    for ((plain, _), (spec, accepted)) in plain.iter().zip(&spec).skip(1) {
        assert_eq!(spec, plain);
        assert!(*accepted > 0, "the constrained request accepted proposals");
    }
    assert_eq!(spec[0].0, plain[0].0);
    assert_ne!(plain[1].0, plain[0].0, "the grammar changes the output");
}
