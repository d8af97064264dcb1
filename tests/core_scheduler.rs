//! Exact scenarios for the block pool, prefix cache and scheduler.

mod core_support;

use std::collections::{HashMap, HashSet};

use core_support::*;
use pagoda::core::block_hash::extend_block_hashes;
use pagoda::core::events::{EventLog, KvEvent};
use pagoda::core::kv_cache_manager::{ComputedBlocks, KvCacheManager};
use pagoda::core::output::ModelRunnerOutput;
use pagoda::core::scheduler::{AddRequestError, Scheduler};
use pagoda::core::snapshot::BlockState;
use pagoda::ids::BlockId;
use pagoda::{
    CacheConfig, FinishReason, InvalidBlockPolicy, RequestStatus, SamplingParams, SchedulerConfig,
    SchedulingPolicy, TokenId,
};

fn ref_cnt(scheduler: &Scheduler, id: BlockId) -> u32 {
    scheduler.kv_cache_manager().pool().block(id).unwrap().ref_cnt
}

fn free_queue(scheduler: &Scheduler) -> Vec<BlockId> {
    scheduler.kv_cache_manager().pool().free_queue().iter().collect()
}

#[test]
fn two_requests_share_three_full_blocks_then_free_in_order_and_a_third_evicts() {
    let mut s = scheduler(1024, 11);
    let shared = tokens(100, 48);
    let a_prompt = [shared.clone(), tokens(500, 5)].concat();
    s.add_request(request(1, a_prompt.clone(), 2)).unwrap();
    let (out, _) = fake_step(&mut s);
    assert_eq!(out.scheduled_new_reqs[0].block_ids, vec![1, 2, 3, 4]);

    s.add_request(request(2, [shared, tokens(600, 10)].concat(), 1)).unwrap();
    let out = s.schedule();
    assert_eq!(chunks(&out), vec![(1, 1), (2, 10)]);
    let b = &out.scheduled_new_reqs[0];
    assert_eq!(b.num_computed_tokens, 48);
    assert_eq!(b.block_ids, vec![1, 2, 3, 5]);
    assert_eq!([1, 2, 3, 4, 5].map(|id| ref_cnt(&s, id)), [2, 2, 2, 1, 1]);
    assert_eq!(s.get_request(2).unwrap().num_cached_tokens, 48);
    let stats = s.stats().prefix_cache;
    assert_eq!((stats.requests, stats.queries, stats.hits), (2, 53 + 58, 48));

    let model_output = fake_model_output(&s, &out);
    let finished: Vec<_> = s
        .update_from_output(&out, &model_output)
        .into_iter()
        .map(|o| (o.request_id, o.finish_reason))
        .collect();
    assert_eq!(finished, vec![(1, Some(FinishReason::Length)), (2, Some(FinishReason::Length))]);
    assert_eq!(free_queue(&s), vec![5, 4, 6, 7, 8, 9, 10, 3, 2, 1]);
    assert_eq!(s.kv_cache_manager().num_free_blocks(), 10);

    let events = s.event_log();
    events.start();
    s.add_request(request(3, tokens(2000, 128), 1)).unwrap();
    let out = s.schedule();
    assert_eq!(out.finished_req_ids, HashSet::from([1, 2]));
    assert_eq!(out.scheduled_new_reqs[0].block_ids, vec![5, 4, 6, 7, 8, 9, 10, 3]);
    let evicted: Vec<BlockId> = events
        .take()
        .into_iter()
        .filter_map(|e| match e {
            KvEvent::Evict { block_id, .. } => Some(block_id),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, vec![3]);
    let mut probe = request(4, a_prompt, 1);
    extend_block_hashes(&mut probe, 16);
    let hits = s.kv_cache_manager().get_computed_blocks(&probe);
    assert_eq!(hits, ComputedBlocks { block_ids: vec![1, 2], num_computed_tokens: 32 });
}

#[test]
fn fully_cached_prompt_recomputes_its_last_block() {
    let mut s = scheduler(1024, 11);
    s.add_request(request(1, tokens(100, 48), 1)).unwrap();
    fake_step(&mut s);
    assert_eq!(free_queue(&s), vec![4, 5, 6, 7, 8, 9, 10, 3, 2, 1]);
    s.add_request(request(2, tokens(100, 48), 1)).unwrap();
    let out = s.schedule();
    assert_eq!(chunks(&out), vec![(2, 16)]);
    let new = &out.scheduled_new_reqs[0];
    assert_eq!(new.num_computed_tokens, 32);
    assert_eq!(new.block_ids, vec![1, 2, 4]);
    let snapshot = s.snapshot();
    let last_hash = snapshot.blocks[3].block_hash.unwrap();
    assert_eq!(snapshot.blocks[3].state, BlockState::CachedFree);
    assert_eq!(snapshot.blocks[4].block_hash, Some(last_hash));
    let entry = snapshot.cached.iter().find(|e| e.block_hash == last_hash).unwrap();
    assert_eq!(entry.block_ids, vec![3, 4]);
}

#[test]
fn failed_allocate_slots_changes_nothing() {
    let mut kv = KvCacheManager::new(&cache(5), EventLog::default()).unwrap();
    let mut x = request(1, tokens(0, 32), 1);
    extend_block_hashes(&mut x, 16);
    assert_eq!(kv.allocate_slots(&x, 32, &ComputedBlocks::default()), Some(vec![1, 2]));
    kv.free(1);
    let queue = |kv: &KvCacheManager| kv.pool().free_queue().iter().collect::<Vec<_>>();
    assert_eq!(queue(&kv), vec![3, 4, 2, 1]);

    let mut y = request(2, [tokens(0, 32), tokens(50, 48)].concat(), 1);
    extend_block_hashes(&mut y, 16);
    let hits = kv.get_computed_blocks(&y);
    assert_eq!(hits, ComputedBlocks { block_ids: vec![1, 2], num_computed_tokens: 32 });
    assert!(!kv.can_fit(&y, y.num_tokens(), &hits));
    assert_eq!(kv.allocate_slots(&y, 48, &hits), None);
    assert_eq!(queue(&kv), vec![3, 4, 2, 1]);
    assert!(kv.pool().blocks().iter().all(|b| b.ref_cnt == 0));
    assert!(kv.get_block_ids(2).is_empty());
    assert_eq!(kv.pool().get_cached_block(y.block_hashes[0]), Some(1));

    let mut z = request(3, [tokens(0, 32), tokens(50, 32)].concat(), 1);
    extend_block_hashes(&mut z, 16);
    let hits = kv.get_computed_blocks(&z);
    assert_eq!(kv.allocate_slots(&z, 32, &hits), Some(vec![3, 4]));
    assert_eq!(kv.get_block_ids(3), &[1, 2, 3, 4]);
    assert_eq!(kv.num_free_blocks(), 0);
    assert_eq!(kv.usage(), 1.0);
}

#[test]
fn three_long_prompts_chunk_under_budget_and_threshold() {
    let config = SchedulerConfig {
        max_num_batched_tokens: 1024,
        long_prefill_token_threshold: 400,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, cache(200)).unwrap();
    for (id, start) in [(1, 0), (2, 10_000), (3, 20_000)] {
        s.add_request(request(id, tokens(start, 800), 4)).unwrap();
    }
    let plan: Vec<Vec<(u64, usize)>> = (0..3).map(|_| chunks(&fake_step(&mut s).0)).collect();
    assert_eq!(
        plan,
        vec![
            vec![(1, 400), (2, 400), (3, 224)],
            vec![(1, 400), (2, 400), (3, 224)],
            vec![(1, 1), (2, 1), (3, 352)],
        ]
    );
}

#[test]
fn fcfs_preempts_the_newest_and_it_resumes_on_its_own_cached_blocks() {
    let mut s = scheduler(1024, 7);
    let (config, mut executor) = sim();
    let (a_prompt, b_prompt) = (tokens(0, 40), tokens(1000, 40));
    s.add_request(request(1, a_prompt.clone(), 20)).unwrap();
    s.add_request(request(2, b_prompt.clone(), 20)).unwrap();
    let mut generated = HashMap::new();
    let out = sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(out.scheduled_new_reqs[0].block_ids, vec![1, 2, 3]);
    assert_eq!(out.scheduled_new_reqs[1].block_ids, vec![4, 5, 6]);
    for _ in 2..10 {
        let out = sim_step(&mut s, &mut executor, &mut generated);
        assert!(out.preempted_req_ids.is_empty());
    }
    let events = s.event_log();
    events.start();
    let out = sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(out.preempted_req_ids, HashSet::from([2]));
    assert_eq!(chunks(&out), vec![(1, 1)]);
    assert_eq!(out.scheduled_cached_reqs[0].new_block_ids, vec![6]);
    let b = s.get_request(2).unwrap();
    assert_eq!((b.status, b.num_computed_tokens, b.num_preemptions), (RequestStatus::Preempted, 0, 1));
    assert_eq!(s.waiting_ids(), vec![2]);
    assert_eq!(s.stats().num_preemptions, 1);
    let kinds: Vec<KvEvent> = events.take();
    assert!(kinds.contains(&KvEvent::Preempt { request_id: 2, needed_by: 1 }));

    let mut step = 10;
    let resumed = loop {
        let out = sim_step(&mut s, &mut executor, &mut generated);
        step += 1;
        if let Some(data) = out.scheduled_cached_reqs.iter().find(|d| d.req_id == 2) {
            break (step, data.clone(), chunks(&out));
        }
    };
    let (resume_step, data, plan) = resumed;
    assert_eq!(resume_step, 21);
    assert!(data.resumed_from_preemption);
    assert_eq!(data.num_computed_tokens, 32);
    assert_eq!(data.new_block_ids, vec![4, 5, 6, 3]);
    assert_eq!(plan, vec![(2, 17)]);
    let b_history = [b_prompt.clone(), generated[&2].clone()].concat();
    assert_eq!(data.new_token_ids, b_history[32..49].to_vec());
    assert_eq!(s.stats().num_recomputed_tokens, 16);
    let preempted = s.stats().preempted_prefix_cache;
    assert_eq!((preempted.requests, preempted.queries, preempted.hits), (1, 49, 32));
    while s.has_unfinished_requests() {
        sim_step(&mut s, &mut executor, &mut generated);
    }
    assert_eq!(generated[&1], alone_output(&config, &a_prompt, 20));
    assert_eq!(generated[&2], alone_output(&config, &b_prompt, 20));
}

#[test]
fn priority_preempts_the_lowest_priority_request() {
    let config = SchedulerConfig { policy: SchedulingPolicy::Priority, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config, cache(10)).unwrap();
    let (sim_config, mut executor) = sim();
    let mut prompts = HashMap::new();
    let mut generated = HashMap::new();
    for (id, priority) in [(1, 0), (2, 5), (3, 1)] {
        let prompt = tokens(id as u32 * 1000, 40);
        prompts.insert(id, prompt.clone());
        let mut req = request(id, prompt, 12);
        req.priority = priority;
        s.add_request(req).unwrap();
        if id == 2 {
            sim_step(&mut s, &mut executor, &mut generated);
        }
    }
    assert_eq!(s.running_ids(), &[1, 2]);
    for _ in 2..10 {
        let out = sim_step(&mut s, &mut executor, &mut generated);
        assert!(out.preempted_req_ids.is_empty());
    }
    assert_eq!(s.running_ids(), &[1, 2, 3]);
    let out = sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(out.preempted_req_ids, HashSet::from([2]));
    assert_eq!(chunks(&out), vec![(1, 1), (3, 1)]);
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3, 6]);
    assert_eq!(s.kv_cache_manager().get_block_ids(3), &[7, 8, 9]);
    let out = sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(out.scheduled_cached_reqs[1].new_block_ids, vec![5]);
    assert_eq!(s.get_request(2).unwrap().status, RequestStatus::Preempted);
    while s.has_unfinished_requests() {
        sim_step(&mut s, &mut executor, &mut generated);
    }
    for id in 1..=3 {
        assert_eq!(generated[&id], alone_output(&sim_config, &prompts[&id], 12));
    }
}

fn invalid_block_setup(policy: InvalidBlockPolicy) -> (Scheduler, pagoda::executor::sim::SimExecutor) {
    let config = SchedulerConfig { invalid_block_policy: policy, ..SchedulerConfig::default() };
    let s = Scheduler::new(config, cache(11)).unwrap();
    (s, sim().1)
}

#[test]
fn invalid_blocks_truncate_to_the_first_bad_block_and_recompute() {
    let (mut s, mut executor) = invalid_block_setup(InvalidBlockPolicy::Recompute);
    let (config, _) = sim();
    let prompt = tokens(0, 64);
    s.add_request(request(1, prompt.clone(), 6)).unwrap();
    let mut generated = HashMap::new();
    sim_step(&mut s, &mut executor, &mut generated);
    sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3, 4, 5]);
    let failed = s.handle_invalid_blocks(&HashSet::from([3, 5]));
    assert!(failed.is_empty());
    let a = s.get_request(1).unwrap();
    assert_eq!((a.status, a.num_computed_tokens, a.num_tokens()), (RequestStatus::Running, 32, 66));
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3, 4, 5]);
    let snapshot = s.snapshot();
    assert_eq!(snapshot.blocks[3].block_hash, None);
    assert!(snapshot.blocks[2].block_hash.is_some() && snapshot.blocks[4].block_hash.is_some());
    assert_eq!(s.stats().num_recomputed_tokens, 33);

    let out = sim_step(&mut s, &mut executor, &mut generated);
    assert_eq!(chunks(&out), vec![(1, 34)]);
    let data = &out.scheduled_cached_reqs[0];
    assert!(!data.resumed_from_preemption && data.new_block_ids.is_empty());
    assert_eq!(data.num_computed_tokens, 32);
    assert!(s.snapshot().blocks[3].block_hash.is_some());
    while s.has_unfinished_requests() {
        sim_step(&mut s, &mut executor, &mut generated);
    }
    assert_eq!(generated[&1], alone_output(&config, &prompt, 6));
}

#[test]
fn invalid_blocks_under_fail_finish_with_an_error() {
    let (mut s, mut executor) = invalid_block_setup(InvalidBlockPolicy::Fail);
    s.add_request(request(1, tokens(0, 64), 6)).unwrap();
    s.add_request(request(2, tokens(500, 20), 6)).unwrap();
    let mut generated = HashMap::new();
    sim_step(&mut s, &mut executor, &mut generated);
    let failed = s.handle_invalid_blocks(&HashSet::from([2]));
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].request_id, failed[0].finish_reason), (1, Some(FinishReason::Error)));
    assert!(s.get_request(1).is_none());
    assert_eq!(s.running_ids(), &[2]);
    assert_eq!(s.kv_cache_manager().num_free_blocks(), 10 - 2);
    let out = s.schedule();
    assert_eq!(out.finished_req_ids, HashSet::from([1]));
}

#[test]
fn invalid_blocks_under_fail_evict_every_later_block_of_the_request() {
    let config = SchedulerConfig {
        invalid_block_policy: InvalidBlockPolicy::Fail,
        long_prefill_token_threshold: 16,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, cache(12)).unwrap();
    let prompt = tokens(0, 64);
    s.add_request(request(1, prompt.clone(), 6)).unwrap();
    s.add_request(request(2, prompt.clone(), 6)).unwrap();
    for _ in 0..4 {
        fake_step(&mut s);
    }
    let a_table = s.kv_cache_manager().get_block_ids(1).to_vec();
    let b_table = s.kv_cache_manager().get_block_ids(2).to_vec();
    assert_eq!(a_table, vec![1, 3, 5, 7]);
    assert_eq!(b_table, vec![1, 2, 4, 6, 8]);
    let cached = |s: &Scheduler, block: BlockId| s.snapshot().blocks[block as usize].block_hash;
    let hashes: Vec<_> = a_table.iter().map(|&id| cached(&s, id).unwrap()).collect();
    assert_eq!(s.kv_cache_manager().pool().cached_blocks()[&hashes[2]], vec![4, 5]);

    let failed = s.handle_invalid_blocks(&HashSet::from([3]));
    assert_eq!(
        failed.iter().map(|o| (o.request_id, o.finish_reason)).collect::<Vec<_>>(),
        vec![(1, Some(FinishReason::Error))]
    );
    assert!(cached(&s, 1).is_some());
    for id in [3, 5, 7] {
        assert_eq!(cached(&s, id), None, "block {id}");
    }
    let pool = s.kv_cache_manager().pool();
    for (index, hash) in hashes.iter().enumerate().skip(1) {
        assert_eq!(pool.cached_blocks()[hash], vec![b_table[index]]);
    }
    assert_eq!(free_queue(&s)[..3], [3, 5, 7]);

    s.add_request(request(3, prompt, 1)).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled_new_reqs[0].block_ids[..3], [1, 2, 4]);
}

#[test]
fn without_prefix_caching_the_prefix_cache_counters_stay_at_zero() {
    let mut cache_config = cache(7);
    cache_config.enable_prefix_caching = false;
    let config = SchedulerConfig { max_num_batched_tokens: 1024, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config, cache_config).unwrap();
    let (sim_config, mut executor) = sim();
    let prompt = tokens(0, 40);
    s.add_request(request(1, prompt.clone(), 20)).unwrap();
    s.add_request(request(2, prompt.clone(), 20)).unwrap();
    let mut generated = HashMap::new();
    while s.has_unfinished_requests() {
        sim_step(&mut s, &mut executor, &mut generated);
    }
    let stats = s.stats();
    assert_eq!(stats.num_preemptions, 1);
    assert_eq!(stats.prefix_cache, Default::default());
    assert_eq!(stats.preempted_prefix_cache, Default::default());
    assert_eq!(generated[&1], alone_output(&sim_config, &prompt, 20));
    assert_eq!(generated[&2], generated[&1]);
}

fn run_with_tokens(
    params: SamplingParams,
    sampled: &[TokenId],
    max_model_len: usize,
) -> (Vec<TokenId>, Option<FinishReason>, Option<TokenId>) {
    let config = SchedulerConfig { max_model_len, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config, cache(11)).unwrap();
    s.add_request(pagoda::Request::new(1, tokens(10, 4), params, Some(2), 0.0)).unwrap();
    let mut generated = Vec::new();
    for &token in sampled {
        let out = s.schedule();
        let mut model_output = ModelRunnerOutput::default();
        model_output.sampled_token_ids.insert(1, vec![token]);
        let outputs = s.update_from_output(&out, &model_output);
        generated.extend(outputs[0].new_token_ids.iter().copied());
        if let Some(reason) = outputs[0].finish_reason {
            assert!(!s.has_unfinished_requests());
            return (generated, Some(reason), outputs[0].stop_token);
        }
    }
    (generated, None, None)
}

#[test]
fn every_stop_condition() {
    let greedy = SamplingParams::greedy;
    let seq = [5, 2, 6, 2, 7, 8, 9];
    assert_eq!(
        run_with_tokens(greedy(3), &[5, 6, 8, 9], 100),
        (vec![5, 6, 8], Some(FinishReason::Length), None)
    );
    assert_eq!(run_with_tokens(greedy(10), &seq, 100), (vec![5, 2], Some(FinishReason::Stop), None));
    let ignore = SamplingParams { ignore_eos: true, ..greedy(5) };
    assert_eq!(run_with_tokens(ignore, &seq, 100), (vec![5, 2, 6, 2, 7], Some(FinishReason::Length), None));
    let min = SamplingParams { min_tokens: 3, ..greedy(10) };
    assert_eq!(run_with_tokens(min, &seq, 100), (vec![5, 2, 6, 2], Some(FinishReason::Stop), None));
    let stop_ids = SamplingParams { stop_token_ids: vec![7], ignore_eos: true, ..greedy(10) };
    assert_eq!(
        run_with_tokens(stop_ids, &seq, 100),
        (vec![5, 2, 6, 2, 7], Some(FinishReason::Stop), Some(7))
    );
    let min_stop = SamplingParams { stop_token_ids: vec![5], min_tokens: 2, ..greedy(10) };
    assert_eq!(run_with_tokens(min_stop, &[5, 5], 100), (vec![5, 5], Some(FinishReason::Stop), Some(5)));
    assert_eq!(run_with_tokens(greedy(10), &seq, 6), (vec![5, 2], Some(FinishReason::Length), None));
    assert_eq!(run_with_tokens(greedy(10), &seq, 7), (vec![5, 2], Some(FinishReason::Stop), None));
    assert_eq!(run_with_tokens(greedy(10), &[5, 6, 7], 6), (vec![5, 6], Some(FinishReason::Length), None));
}

#[test]
fn add_request_rejects_bad_requests_alone() {
    let config = SchedulerConfig { max_model_len: 100, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config, cache(5)).unwrap();
    assert_eq!(s.add_request(request(1, vec![], 4)), Err(AddRequestError::EmptyPrompt(1)));
    assert_eq!(
        s.add_request(request(2, tokens(0, 101), 4)),
        Err(AddRequestError::PromptTooLong { request_id: 2, prompt_len: 101, max_model_len: 100 })
    );
    assert_eq!(
        s.add_request(request(3, tokens(0, 65), 4)),
        Err(AddRequestError::PromptExceedsKvCache {
            request_id: 3,
            blocks_needed: 5,
            usable_blocks: 4,
            why: ""
        })
    );
    assert_eq!(s.add_request(request(4, tokens(0, 4), 0)), Err(AddRequestError::ZeroMaxTokens(4)));
    s.add_request(request(5, tokens(0, 64), 1)).unwrap();
    assert_eq!(s.add_request(request(5, tokens(0, 4), 1)), Err(AddRequestError::DuplicateId(5)));
    assert_eq!(s.num_waiting(), 1);
    let (out, outputs) = fake_step(&mut s);
    assert_eq!(chunks(&out), vec![(5, 64)]);
    assert_eq!(outputs[0].finish_reason, Some(FinishReason::Length));
}

#[test]
fn abort_frees_blocks_and_reports_in_the_next_step() {
    let mut s = scheduler(1024, 11);
    s.add_request(request(1, tokens(0, 20), 10)).unwrap();
    s.add_request(request(2, tokens(100, 20), 10)).unwrap();
    fake_step(&mut s);
    s.add_request(request(3, tokens(200, 20), 10)).unwrap();
    assert!(s.finish_requests([1], RequestStatus::Running).is_err());
    assert_eq!(s.finish_requests([1, 3, 99], RequestStatus::FinishedAborted), Ok(2));
    assert_eq!(s.running_ids(), &[2]);
    assert_eq!(s.num_waiting(), 0);
    assert_eq!(s.kv_cache_manager().num_free_blocks(), 8);
    let out = s.schedule();
    assert_eq!(out.finished_req_ids, HashSet::from([1, 3]));
    assert_eq!(chunks(&out), vec![(2, 1)]);
    assert_eq!(s.stats().num_finished, 2);
}

#[test]
fn without_chunked_prefill_a_prompt_that_does_not_fit_stops_admission() {
    let config = SchedulerConfig {
        max_num_batched_tokens: 100,
        max_model_len: 100,
        enable_chunked_prefill: false,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, cache(40)).unwrap();
    s.add_request(request(1, tokens(0, 60), 3)).unwrap();
    s.add_request(request(2, tokens(100, 50), 3)).unwrap();
    s.add_request(request(3, tokens(200, 10), 3)).unwrap();
    assert_eq!(chunks(&fake_step(&mut s).0), vec![(1, 60)]);
    assert_eq!(chunks(&fake_step(&mut s).0), vec![(1, 1), (2, 50), (3, 10)]);
    let bad = SchedulerConfig { max_model_len: 200, ..s.config().clone() };
    assert!(Scheduler::new(bad, cache(40)).is_err());
}

#[test]
fn max_num_seqs_caps_the_running_queue() {
    let config = SchedulerConfig { max_num_seqs: 2, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config, cache(40)).unwrap();
    for id in 1..=3 {
        s.add_request(request(id, tokens(id as u32 * 100, 8), 2)).unwrap();
    }
    assert_eq!(chunks(&fake_step(&mut s).0), vec![(1, 8), (2, 8)]);
    assert_eq!(chunks(&fake_step(&mut s).0), vec![(1, 1), (2, 1)]);
    assert_eq!(chunks(&fake_step(&mut s).0), vec![(3, 8)]);
}

#[test]
fn cache_salt_separates_tenants() {
    let mut s = scheduler(1024, 20);
    let salted = |id, salt: &str| {
        let mut req = request(id, tokens(0, 40), 1);
        req.cache_salt = Some(salt.to_owned());
        req
    };
    s.add_request(salted(1, "a")).unwrap();
    fake_step(&mut s);
    s.add_request(salted(2, "b")).unwrap();
    s.add_request(salted(3, "a")).unwrap();
    let out = s.schedule();
    let hits: Vec<(u64, usize)> =
        out.scheduled_new_reqs.iter().map(|n| (n.req_id, n.num_computed_tokens)).collect();
    assert_eq!(hits, vec![(2, 0), (3, 32)]);
}

#[test]
fn reset_prefix_cache_only_when_idle() {
    let mut s = scheduler(1024, 11);
    s.add_request(request(1, tokens(0, 40), 2)).unwrap();
    fake_step(&mut s);
    assert!(!s.reset_prefix_cache());
    fake_step(&mut s);
    assert!(!s.has_unfinished_requests());
    assert!(s.kv_cache_manager().pool().cached_blocks().len() == 2);
    assert!(s.reset_prefix_cache());
    assert!(s.kv_cache_manager().pool().cached_blocks().is_empty());
    assert!(s.snapshot().blocks.iter().all(|b| b.block_hash.is_none()));
}

#[test]
fn events_and_snapshot_describe_the_cache() {
    let mut s = scheduler(1024, 6);
    let events = s.event_log();
    events.start();
    s.add_request(request(1, tokens(0, 20), 1)).unwrap();
    s.add_request(request(2, tokens(0, 36), 3)).unwrap();
    let out = s.schedule();
    let snapshot = s.snapshot();
    assert_eq!(snapshot.running, vec![1, 2]);
    assert_eq!(snapshot.blocks[0].state, BlockState::Null);
    assert_eq!(snapshot.blocks[1].owners, vec![1, 2]);
    assert_eq!(snapshot.blocks[1].ref_cnt, 2);
    assert_eq!(snapshot.blocks[2].owners, vec![1]);
    assert_eq!(snapshot.blocks[3].owners, vec![2]);
    assert_eq!(snapshot.free_queue, vec![5]);
    assert_eq!(snapshot.requests[1].block_ids, vec![1, 3, 4]);
    let model_output = fake_model_output(&s, &out);
    s.update_from_output(&out, &model_output);
    let got: Vec<KvEvent> = events.take();
    let expected_prefix = vec![
        KvEvent::Allocate { request_id: 1, block_ids: vec![1, 2] },
        KvEvent::Cache { request_id: 1, block_ids: vec![1] },
        KvEvent::CacheHit { request_id: 2, block_ids: vec![1], num_tokens: 16 },
        KvEvent::Allocate { request_id: 2, block_ids: vec![3, 4] },
        KvEvent::Cache { request_id: 2, block_ids: vec![3] },
        KvEvent::Step { step: 1, num_scheduled_tokens: 40, num_running: 2, num_waiting: 0 },
        KvEvent::Free { request_id: 1, block_ids: vec![1, 2] },
        KvEvent::Finish { request_id: 1, reason: FinishReason::Length },
    ];
    assert_eq!(got, expected_prefix);
    let line = serde_json::to_string(&s.snapshot()).unwrap();
    assert_eq!(serde_json::from_str::<pagoda::core::snapshot::KvSnapshot>(&line).unwrap(), s.snapshot());
}

/// Under a sliding window (every layer of the model slides 20 tokens, blocks of 16): a long
/// prompt prefilled in chunks frees the blocks behind its window as it goes, the null block
/// taking their place; a second request with the same prefix hits only the blocks its first
/// new token's window reaches, the rest of its hit standing in as the null block.
#[test]
fn a_sliding_window_frees_the_blocks_behind_it_and_hits_only_the_window() {
    let sched = SchedulerConfig { max_num_batched_tokens: 32, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(sched, CacheConfig { sliding_window: Some(20), ..cache(16) }).unwrap();
    let prompt = tokens(100, 100);
    s.add_request(request(1, prompt.clone(), 4)).unwrap();
    let (out, _) = fake_step(&mut s);
    assert_eq!(out.scheduled_new_reqs[0].block_ids, vec![1, 2]);
    // Tokens 32..64: the first of them sees 13..=32, so block 0 (tokens 0..16) stays.
    fake_step(&mut s);
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[1, 2, 3, 4]);
    // Tokens 64..96: the first sees 45..=64, so blocks 0 and 1 are behind it.
    fake_step(&mut s);
    assert_eq!(s.kv_cache_manager().get_block_ids(1), &[0, 0, 3, 4, 5, 6]);
    assert_eq!([1, 2].map(|id| ref_cnt(&s, id)), [0, 0]);

    // Same 96-token prefix: the first new token (at 96) sees 77..=96, so a hit needs blocks
    // 4 and 5 (tokens 64..96) only; blocks 0..4 of the hit are the null block.
    let mut probe = request(2, [prompt[..96].to_vec(), tokens(900, 20)].concat(), 1);
    extend_block_hashes(&mut probe, 16);
    let hit = s.kv_cache_manager().get_computed_blocks(&probe);
    assert_eq!(hit, ComputedBlocks { block_ids: vec![0, 0, 0, 0, 5, 6], num_computed_tokens: 96 });
    s.add_request(request(2, probe.prompt_token_ids.clone(), 1)).unwrap();
    let out = s.schedule();
    let new = out.scheduled_new_reqs.iter().find(|r| r.req_id == 2).unwrap();
    assert_eq!(new.num_computed_tokens, 96);
    assert_eq!(&new.block_ids[..6], &[0, 0, 0, 0, 5, 6]);
    assert_eq!([5, 6].map(|id| ref_cnt(&s, id)), [2, 2]);
}
