//! SmolLM2 with n-gram speculative decoding through the real scheduler and the wgpu
//! executor: by the invariance rule the verify pass computes each proposed position's logits
//! as plain decode would, so speculation returns plain decode's tokens bit for bit — greedy
//! and seeded sampling alike — batched, chunked and under RECOMPUTE preemption.

mod smollm2_support;

use std::collections::HashMap;

use pagoda::core::metrics::SchedulerStats;
use pagoda::core::request::Request;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::sampling::SamplingParams;
use pagoda::{SpeculativeConfig, TokenId};
use smollm2_support::{executor, greedy_cases, scheduler_config, scheduler_with, smollm2};

const MAX_TOKENS: usize = 16;
const EOS: u32 = 2;

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
    for (i, prompt) in prompts.iter().enumerate() {
        let request = Request::new(first_id + i as u64, prompt.clone(), params.clone(), Some(EOS), i as f64);
        scheduler.add_request(request).unwrap();
    }
    let mut tokens: HashMap<u64, Vec<TokenId>> = HashMap::new();
    while scheduler.has_unfinished_requests() {
        let plan = scheduler.schedule();
        let result = if plan.is_empty() {
            Default::default()
        } else {
            exec.execute(&plan, &mut StepMasks::none()).unwrap()
        };
        for out in scheduler.update_from_output(&plan, &result) {
            tokens.entry(out.request_id).or_default().extend(out.new_token_ids);
        }
    }
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
    let mut exec = executor();
    let prompts = prompts();
    let spec = Some(SpeculativeConfig::ngram(4, 1, 3));
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
    let mut exec = executor();
    let prompts = prompts();
    let params =
        SamplingParams { temperature: 0.7, top_p: 0.95, seed: Some(7), ..SamplingParams::greedy(MAX_TOKENS) };
    let (plain, _) = run(&mut exec, &prompts[..1], &params, 400, (64, 64), None);
    let (spec, stats) =
        run(&mut exec, &prompts[..1], &params, 500, (64, 64), Some(SpeculativeConfig::ngram(4, 1, 3)));
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
