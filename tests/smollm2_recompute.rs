//! SmolLM2 through the real scheduler and the wgpu executor: RECOMPUTE preemption, chunk
//! budgets and prefix caching never change greedy tokens, and a shared system prompt is
//! computed once.

mod smollm2_support;

use std::collections::HashMap;

use pagoda::core::metrics::SchedulerStats;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::sampling::SamplingParams;
use smollm2_support::{
    BLOCK, EXECUTOR_BLOCKS, add_requests, executor, greedy_cases, run_to_completion, scheduler, smollm2,
};

const MAX_TOKENS: usize = 8;

/// The fixture's `greedy_fp32` prompts and their reference continuations.
fn fixture_prompts() -> Vec<(Vec<u32>, Vec<u32>)> {
    greedy_cases().into_iter().map(|case| (case.prompt, case.generated)).collect()
}

/// Runs `prompts` to completion through a fresh scheduler over a pool of `num_blocks`
/// blocks; returns each request's tokens, the scheduler's stats and the tokens computed.
fn run(
    exec: &mut WgpuExecutor,
    prompts: &[Vec<u32>],
    first_id: u64,
    num_blocks: usize,
    budget: usize,
    prefix_caching: bool,
) -> (Vec<Vec<u32>>, SchedulerStats, usize) {
    let mut scheduler = scheduler(num_blocks, budget, prefix_caching);
    let requests: Vec<_> = prompts.iter().map(|p| (p.clone(), SamplingParams::greedy(MAX_TOKENS))).collect();
    add_requests(&mut scheduler, &requests, first_id);
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    let computed = run_to_completion(exec, &mut scheduler, |out| {
        tokens.entry(out.request_id).or_default().extend(out.new_token_ids);
    });
    let outputs =
        (0..prompts.len() as u64).map(|i| tokens.remove(&(first_id + i)).unwrap_or_default()).collect();
    (outputs, scheduler.stats(), computed)
}

#[test]
fn preemption_chunking_and_prefix_caching_do_not_change_greedy_tokens() {
    let mut exec = executor();
    let cases = fixture_prompts();
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| c.0.clone()).collect();
    // With an f32 KV cache each prompt alone reproduces the fp32 reference token for token
    // (tests/smollm2_greedy.rs), so the reference stands for "each prompt run alone".
    let alone: Vec<Vec<u32>> =
        cases.iter().map(|(_, reference)| reference[..MAX_TOKENS.min(reference.len())].to_vec()).collect();
    let configs = [(7, true, 1000), (64, true, 2000), (64, false, 3000)];
    for (budget, caching, first_id) in configs {
        let (outputs, stats, _) = run(&mut exec, &prompts, first_id, 16, budget, caching);
        eprintln!(
            "budget {budget}, caching {caching}: {} preemptions, {} recomputed tokens",
            stats.num_preemptions, stats.num_recomputed_tokens
        );
        assert!(stats.num_preemptions > 0, "budget {budget}, caching {caching}: no preemption happened");
        assert_eq!(
            outputs, alone,
            "budget {budget}, caching {caching}, {} preemptions",
            stats.num_preemptions
        );
    }
}

#[test]
fn a_shared_system_prompt_is_computed_once() {
    let mut exec = executor();
    let files = smollm2();
    let system = "You are a careful assistant. Answer briefly, in plain words, and say when you do not know.";
    let questions = [
        "What is rain?",
        "Name a color.",
        "What is 2+2?",
        "Who wrote Hamlet?",
        "What is ice?",
        "Say hello.",
        "Name a fruit.",
        "What is the sun?",
    ];
    let template = files.chat_template.as_ref().unwrap();
    let prompts: Vec<Vec<u32>> = questions
        .iter()
        .map(|q| {
            let messages = [
                pagoda::model::ChatMessage::new("system", system),
                pagoda::model::ChatMessage::new("user", *q),
            ];
            files.tokenizer.encode(&template.render(&messages, true).unwrap(), true).unwrap()
        })
        .collect();
    let common = prompts[0].iter().zip(&prompts[1]).take_while(|(a, b)| a == b).count();
    assert!(prompts.iter().all(|p| p[..common] == prompts[0][..common]));
    let shared_blocks = common / BLOCK;
    assert!(shared_blocks >= 5, "only {common} common tokens");

    let (cached, stats, computed_cached) = run(&mut exec, &prompts, 5000, EXECUTOR_BLOCKS, 1024, true);
    let (uncached, _, computed_uncached) = run(&mut exec, &prompts, 6000, EXECUTOR_BLOCKS, 1024, false);
    assert_eq!(cached, uncached);
    let expected_hits = (prompts.len() - 1) * shared_blocks * BLOCK;
    assert_eq!(stats.prefix_cache.hits as usize, expected_hits);
    assert_eq!(computed_uncached - computed_cached, expected_hits);
    assert_eq!(stats.num_preemptions, 0);
}
