//! Speculative decoding in the engine core: n-gram proposals ride the token budget as a
//! request's new tokens, only accepted ones stay computed, rejected ones leave no block, hash
//! or cache event behind, and the simulated model's greedy output is the same token for token
//! with and without speculation — alone, batched, chunked and under preemption.

mod core_support;

use std::collections::{HashMap, HashSet};

use core_support::*;
use pagoda::core::events::CacheEvent;
use pagoda::core::output::ModelRunnerOutput;
use pagoda::core::scheduler::Scheduler;
use pagoda::executor::sim::{SimConfig, SimExecutor};
use pagoda::ids::BlockHash;
use pagoda::{CacheConfig, RequestId, SchedulerConfig, SpeculativeConfig, TokenId};

fn spec_scheduler(budget: usize, cache: CacheConfig, spec: Option<SpeculativeConfig>) -> Scheduler {
    let config = SchedulerConfig {
        max_num_batched_tokens: budget,
        speculative_config: spec,
        ..SchedulerConfig::default()
    };
    Scheduler::new(config, cache).unwrap()
}

#[test]
fn proposals_are_scheduled_verified_and_rejected_slots_freed() {
    let cache = CacheConfig { block_size: 4, num_gpu_blocks: 20, ..CacheConfig::default() };
    let mut s = spec_scheduler(64, cache, Some(SpeculativeConfig::ngram(3, 1, 2)));
    s.add_request(request(1, vec![1, 2, 3, 4, 5, 6, 7, 1, 2], 10)).unwrap();
    let out = s.schedule();
    assert!(out.scheduled_spec_decode_tokens.is_empty());
    let sampled =
        ModelRunnerOutput { sampled_token_ids: HashMap::from([(1, vec![3])]), ..Default::default() };
    s.update_from_output(&out, &sampled);
    // [.., 1, 2, 3]: the 2-gram [2, 3] occurred at the start, followed by 4, 5, 6.
    assert_eq!(s.get_request(1).unwrap().spec_token_ids, vec![4, 5, 6]);

    let out = s.schedule();
    assert_eq!(out.num_scheduled_tokens[&1], 4);
    assert_eq!(out.scheduled_spec_decode_tokens[&1], vec![4, 5, 6]);
    assert_eq!(out.scheduled_cached_reqs[0].new_token_ids, vec![3, 4, 5, 6]);
    assert_eq!(out.scheduled_cached_reqs[0].new_block_ids, vec![4]);
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3, 4]);
    // The model accepts 4, rejects 5 and samples 9 there.
    let verified =
        ModelRunnerOutput { sampled_token_ids: HashMap::from([(1, vec![4, 9])]), ..Default::default() };
    let outputs = s.update_from_output(&out, &verified);
    assert_eq!(outputs[0].new_token_ids, vec![4, 9]);
    let request = s.get_request(1).unwrap();
    assert_eq!(request.output_token_ids, vec![3, 4, 9]);
    assert_eq!(request.num_computed_tokens, 11);
    // Block 4 held only the rejected 6: it is back at the head of the free queue.
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3]);
    assert_eq!(s.kv_cache_manager().pool().free_queue().iter().next(), Some(4));
    assert!(request.spec_token_ids.is_empty(), "[.., 4, 9] occurred nowhere before");
    let stats = s.stats().spec_decoding;
    assert_eq!((stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens), (1, 3, 1));
    assert_eq!(stats.num_accepted_tokens_per_pos[..3], [1, 0, 0]);

    // The next step computes the sampled 9 at position 11, in block 3.
    let out = s.schedule();
    assert_eq!(out.num_scheduled_tokens[&1], 1);
    assert_eq!(out.scheduled_cached_reqs[0].new_token_ids, vec![9]);
    assert!(out.scheduled_cached_reqs[0].new_block_ids.is_empty());
    // The executor hears that block 4 left the end of the table.
    assert_eq!(out.scheduled_cached_reqs[0].num_freed_blocks, 1);
}

/// Steps `s` until request 1 samples its first token, `first`.
fn prefill(s: &mut Scheduler, first: TokenId) {
    loop {
        let out = s.schedule();
        let request = s.get_request(1).unwrap();
        if request.num_computed_tokens == request.num_tokens() {
            let sampled = ModelRunnerOutput {
                sampled_token_ids: HashMap::from([(1, vec![first])]),
                ..Default::default()
            };
            s.update_from_output(&out, &sampled);
            return;
        }
        s.update_from_output(&out, &ModelRunnerOutput::default());
    }
}

#[test]
fn a_budget_too_small_for_every_proposal_trims_them() {
    let mut s = spec_scheduler(2, cache_blocks(20), Some(SpeculativeConfig::ngram(4, 1, 1)));
    s.add_request(request(1, vec![5, 6, 7, 8, 9], 10)).unwrap();
    prefill(&mut s, 5);
    // [5, 6, 7, 8, 9, 5]: the 5 at the start was followed by 6, 7, 8, 9.
    assert_eq!(s.get_request(1).unwrap().spec_token_ids, vec![6, 7, 8, 9]);
    let out = s.schedule();
    assert_eq!(out.num_scheduled_tokens[&1], 2);
    assert_eq!(out.scheduled_spec_decode_tokens[&1], vec![6]);
    assert_eq!(out.scheduled_cached_reqs[0].new_token_ids, vec![5, 6]);
    assert_eq!(s.get_request(1).unwrap().spec_token_ids, vec![6]);
}

#[test]
fn proposals_leave_room_for_the_verified_token_within_max_tokens() {
    let mut s = spec_scheduler(64, cache_blocks(20), Some(SpeculativeConfig::ngram(4, 1, 1)));
    s.add_request(request(1, vec![5, 6, 7, 8, 9], 3)).unwrap();
    prefill(&mut s, 5);
    // One token out of 3: one proposal, and the token sampled after it, reach max_tokens.
    assert_eq!(s.get_request(1).unwrap().spec_token_ids, vec![6]);
    let out = s.schedule();
    let verified =
        ModelRunnerOutput { sampled_token_ids: HashMap::from([(1, vec![6, 1])]), ..Default::default() };
    let outputs = s.update_from_output(&out, &verified);
    assert_eq!(outputs[0].new_token_ids, vec![6, 1]);
    assert_eq!(outputs[0].finish_reason, Some(pagoda::FinishReason::Length));
    assert_eq!(s.kv_cache_manager().pool().num_free_blocks(), 19);
}

fn cache_blocks(num_gpu_blocks: usize) -> CacheConfig {
    CacheConfig { block_size: 4, num_gpu_blocks, ..CacheConfig::default() }
}

/// A small-vocabulary simulated model: its output repeats, so n-gram proposals are often
/// right (and often wrong).
fn small_vocab() -> SimConfig {
    SimConfig { vocab_size: 3, eos_token_id: None, seed: 11, ..SimConfig::default() }
}

fn prompts() -> Vec<Vec<TokenId>> {
    (0..6u32).map(|i| (0..9 + 5 * i as usize).map(|j| (j as u32 * 7 + i) % 3).collect()).collect()
}

/// Runs `prompts` (each `max_tokens` long) to the end; returns each request's tokens and the
/// scheduler.
fn run(
    prompts: &[Vec<TokenId>],
    max_tokens: usize,
    budget: usize,
    cache: CacheConfig,
    spec: Option<SpeculativeConfig>,
) -> (HashMap<RequestId, Vec<TokenId>>, Scheduler) {
    let mut s = spec_scheduler(budget, cache, spec);
    s.cache_event_log().start();
    let mut executor = SimExecutor::new(small_vocab()).unwrap();
    for (id, prompt) in prompts.iter().enumerate() {
        s.add_request(request(id as RequestId, prompt.clone(), max_tokens)).unwrap();
    }
    let mut generated = HashMap::new();
    let mut steps = 0;
    while s.has_unfinished_requests() {
        sim_step(&mut s, &mut executor, &mut generated);
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    (generated, s)
}

#[test]
fn greedy_speculation_returns_plain_decodes_tokens_alone_batched_chunked_and_preempted() {
    let prompts = prompts();
    let spec = Some(SpeculativeConfig::ngram(4, 1, 3));
    let expected: HashMap<RequestId, Vec<TokenId>> = prompts
        .iter()
        .enumerate()
        .map(|(id, prompt)| (id as RequestId, alone_output(&small_vocab(), prompt, 40)))
        .collect();
    // (budget, blocks): roomy, chunked, and a pool so small requests preempt each other.
    for (budget, num_gpu_blocks) in [(512, 200), (7, 200), (16, 24)] {
        let (generated, s) = run(&prompts, 40, budget, cache_blocks(num_gpu_blocks), spec.clone());
        assert_eq!(generated, expected, "budget {budget}, {num_gpu_blocks} blocks");
        let stats = s.stats();
        assert!(stats.spec_decoding.num_accepted_tokens > 0, "{stats:?}");
        assert!(stats.spec_decoding.num_accepted_tokens < stats.spec_decoding.num_draft_tokens);
        if num_gpu_blocks == 24 {
            assert!(stats.num_preemptions > 0, "the small pool preempts");
        }
        let pool = s.kv_cache_manager().pool();
        assert_eq!(pool.num_free_blocks(), pool.num_usable_blocks(), "every block comes back");
    }
    for (id, prompt) in prompts.iter().enumerate() {
        let (alone, _) = run(std::slice::from_ref(prompt), 40, 512, cache_blocks(200), spec.clone());
        assert_eq!(alone[&0], expected[&(id as RequestId)]);
    }
}

/// The hashes of every block stored in the prefix cache, and the cached ones at the end.
fn cache_trace(s: &Scheduler) -> (HashSet<BlockHash>, HashSet<BlockHash>) {
    let stored = s
        .cache_event_log()
        .take()
        .into_iter()
        .flat_map(|event| match event {
            CacheEvent::Stored { block_hashes, .. } => block_hashes,
            _ => Vec::new(),
        })
        .collect();
    (stored, s.kv_cache_manager().pool().cached_blocks().keys().copied().collect())
}

#[test]
fn rejected_tokens_leave_no_hash_in_the_prefix_cache_and_no_mark_on_the_metrics() {
    let prompts = prompts();
    let (plain, plain_s) = run(&prompts, 40, 64, cache_blocks(400), None);
    let (spec, spec_s) = run(&prompts, 40, 64, cache_blocks(400), Some(SpeculativeConfig::ngram(4, 1, 3)));
    assert_eq!(spec, plain);
    assert!(spec_s.stats().spec_decoding.num_draft_tokens > spec_s.stats().spec_decoding.num_accepted_tokens);
    assert_eq!(cache_trace(&spec_s), cache_trace(&plain_s));
    assert!(spec_s.stats().num_steps < plain_s.stats().num_steps, "accepted proposals save steps");
    // The metrics are plain decode's plus the speculation counters (fewer steps, and the peak
    // usage of the slots proposals took).
    let plain_stats = plain_s.stats();
    let mut spec_stats = spec_s.stats();
    spec_stats.spec_decoding = Default::default();
    spec_stats.num_steps = plain_stats.num_steps;
    spec_stats.peak_kv_cache_usage = plain_stats.peak_kv_cache_usage;
    assert_eq!(spec_stats, plain_stats);
}

#[test]
fn the_scheduler_refuses_an_invalid_speculative_config() {
    let bad = SpeculativeConfig { num_speculative_tokens: 0, ..SpeculativeConfig::ngram(1, 1, 1) };
    let config = SchedulerConfig { speculative_config: Some(bad), ..SchedulerConfig::default() };
    let error = Scheduler::new(config, cache(10)).unwrap_err();
    assert!(error.to_string().contains("num_speculative_tokens=0"), "{error}");
}

/// vLLM's `num_speculative_tokens_per_batch_size`: with `[[1, 1, 2], [2, 256, 0]]` a request
/// alone gets two proposals, and none while two requests run (speculation off under load).
#[test]
fn the_batch_size_schedule_turns_proposals_off_for_larger_batches() {
    let spec = SpeculativeConfig {
        num_speculative_tokens_per_batch_size: Some(vec![[1, 1, 2], [2, 256, 0]]),
        ..SpeculativeConfig::ngram(3, 1, 2)
    };
    let run = |ids: &[RequestId]| {
        let cache = CacheConfig { block_size: 4, num_gpu_blocks: 40, ..CacheConfig::default() };
        let mut s = spec_scheduler(64, cache, Some(spec.clone()));
        for &id in ids {
            s.add_request(request(id, vec![1, 2, 3, 4, 5, 6, 7, 1, 2], 10)).unwrap();
        }
        let out = s.schedule();
        let sampled = ModelRunnerOutput {
            sampled_token_ids: ids.iter().map(|&id| (id, vec![3])).collect(),
            ..Default::default()
        };
        s.update_from_output(&out, &sampled);
        ids.iter().map(|&id| s.get_request(id).unwrap().spec_token_ids.clone()).collect::<Vec<_>>()
    };
    // [.., 1, 2, 3] proposes 4, 5 (of 4, 5, 6) alone, nothing beside another request.
    assert_eq!(run(&[1]), vec![vec![4, 5]]);
    assert_eq!(run(&[1, 2]), vec![Vec::<TokenId>::new(), Vec::new()]);
}
