//! Property tests: random small workloads on small pools with the simulated executor.
//! After every step the block accounting is consistent; every request finishes; and every
//! request's output equals its output when run alone on an unlimited pool.

use std::collections::{HashMap, HashSet};

use pagoda::core::scheduler::Scheduler;
use pagoda::core::snapshot::{BlockState, KvSnapshot};
use pagoda::executor::sim::{SimConfig, SimExecutor};
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::ids::BlockId;
use pagoda::{
    CacheConfig, InvalidBlockPolicy, Request, RequestId, RequestStatus, SamplingParams, SchedulerConfig,
    SchedulingPolicy, TokenId,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Spec {
    prefix: usize,
    suffix_len: usize,
    max_tokens: usize,
    min_tokens: usize,
    arrival_step: usize,
    priority: i32,
    ignore_eos: bool,
    salted: bool,
}

#[derive(Debug, Clone)]
struct Case {
    block_size: usize,
    num_gpu_blocks: usize,
    budget: usize,
    max_num_seqs: usize,
    threshold: usize,
    chunked: bool,
    caching: bool,
    priority: bool,
    invalidate_every: usize,
    specs: Vec<Spec>,
}

const PREFIXES: [&[TokenId]; 3] =
    [&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], &[1, 2, 3, 4, 9, 9, 9, 9], &[7; 6]];
const EOS: TokenId = 0;
/// Invalid-block reports per run (more, and faster than progress, could starve a request).
const MAX_INJECTIONS: usize = 3;

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..4usize,
        0..20usize,
        1..24usize,
        0..4usize,
        0..12usize,
        0..4i32,
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(prefix, suffix_len, max_tokens, min_tokens, arrival_step, priority, ignore_eos, salted)| Spec {
                prefix,
                suffix_len,
                max_tokens,
                min_tokens,
                arrival_step,
                priority,
                ignore_eos,
                salted,
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec![1usize, 2, 4, 8]),
        4..40usize,
        4..64usize,
        1..6usize,
        prop::sample::select(vec![0usize, 0, 3, 9]),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.8),
        any::<bool>(),
        prop::sample::select(vec![0usize, 0, 0, 5, 11]),
        prop::collection::vec(spec(), 1..10),
    )
        .prop_map(
            |(
                block_size,
                num_gpu_blocks,
                budget,
                max_num_seqs,
                threshold,
                chunked,
                caching,
                priority,
                invalidate_every,
                specs,
            )| {
                Case {
                    block_size,
                    num_gpu_blocks,
                    budget,
                    max_num_seqs,
                    threshold,
                    chunked,
                    caching,
                    priority,
                    invalidate_every,
                    specs,
                }
            },
        )
}

fn sim_config() -> SimConfig {
    SimConfig { vocab_size: 24, eos_token_id: Some(EOS), seed: 7, ..SimConfig::default() }
}

fn capacity_tokens(case: &Case) -> usize {
    (case.num_gpu_blocks - 1) * case.block_size
}

fn max_model_len(case: &Case) -> usize {
    if case.chunked { 4096 } else { case.budget }
}

/// The request for `spec`, its prompt and max_tokens clamped so it fits the pool and the
/// model length alone (so "alone on an unlimited pool" is comparable).
fn make_request(case: &Case, id: RequestId, spec: &Spec) -> Request {
    let mut prompt: Vec<TokenId> = PREFIXES.get(spec.prefix).map_or(Vec::new(), |p| p.to_vec());
    prompt.extend((0..spec.suffix_len).map(|i| 1 + ((id as usize * 7 + i * 3) % 20) as TokenId));
    if prompt.is_empty() {
        prompt.push(5);
    }
    let limit = capacity_tokens(case).min(max_model_len(case));
    prompt.truncate(limit.saturating_sub(1).max(1));
    let max_tokens = spec.max_tokens.min(limit - prompt.len()).max(1);
    let params = SamplingParams {
        ignore_eos: spec.ignore_eos,
        min_tokens: spec.min_tokens,
        stop_token_ids: vec![13],
        ..SamplingParams::greedy(max_tokens)
    };
    let mut request = Request::new(id, prompt, params, Some(EOS), id as f64);
    request.priority = spec.priority;
    request.cache_salt = spec.salted.then(|| "tenant".to_owned());
    request
}

fn scheduler_for(case: &Case, num_gpu_blocks: usize) -> Scheduler {
    let config = SchedulerConfig {
        max_num_batched_tokens: case.budget,
        max_num_seqs: case.max_num_seqs,
        max_model_len: max_model_len(case),
        enable_chunked_prefill: case.chunked,
        long_prefill_token_threshold: case.threshold,
        policy: if case.priority { SchedulingPolicy::Priority } else { SchedulingPolicy::Fcfs },
        invalid_block_policy: InvalidBlockPolicy::Recompute,
        // Cases with prefix caching speculate too: the invariants hold with proposals in flight.
        speculative_config: case.caching.then(|| pagoda::SpeculativeConfig::ngram(3, 1, 2)),
        // One step ahead where it does not speculate (the placeholders resolve each step).
        async_scheduling: true,
    };
    let cache = CacheConfig {
        block_size: case.block_size,
        num_gpu_blocks,
        enable_prefix_caching: case.caching,
        ..CacheConfig::default()
    };
    Scheduler::new(config, cache).unwrap()
}

fn check_invariants(snapshot: &KvSnapshot, scheduler: &Scheduler) -> Result<(), TestCaseError> {
    let usable = snapshot.blocks.len() - 1;
    let null = &snapshot.blocks[0];
    prop_assert!(null.state == BlockState::Null && null.ref_cnt == 0 && null.owners.is_empty());
    prop_assert!(null.block_hash.is_none());
    let queued: HashSet<BlockId> = snapshot.free_queue.iter().copied().collect();
    prop_assert_eq!(queued.len(), snapshot.free_queue.len(), "free queue holds a block twice");
    let mut used = 0;
    for block in &snapshot.blocks[1..] {
        prop_assert_eq!(
            block.ref_cnt as usize,
            block.owners.len(),
            "block {} ref_cnt != owners",
            block.block_id
        );
        let unique: HashSet<_> = block.owners.iter().collect();
        prop_assert_eq!(
            unique.len(),
            block.owners.len(),
            "block {} owned twice by a request",
            block.block_id
        );
        prop_assert_eq!(
            queued.contains(&block.block_id),
            block.ref_cnt == 0,
            "block {} queue state",
            block.block_id
        );
        if block.ref_cnt > 0 {
            used += 1;
        }
    }
    prop_assert_eq!(used + snapshot.free_queue.len(), usable, "free + used != usable");
    let mut from_map = HashMap::new();
    for entry in &snapshot.cached {
        prop_assert!(!entry.block_ids.is_empty());
        for &id in &entry.block_ids {
            prop_assert_eq!(snapshot.blocks[id as usize].block_hash, Some(entry.block_hash));
            from_map.insert(id, entry.block_hash);
        }
    }
    let hashed = snapshot.blocks.iter().filter(|b| b.block_hash.is_some()).count();
    prop_assert_eq!(hashed, from_map.len(), "a hashed block is missing from the cached map");
    let block_size = snapshot.block_size;
    for request in &snapshot.requests {
        let num_tokens = request.num_prompt_tokens + request.num_output_tokens;
        match request.status {
            RequestStatus::Running => {
                prop_assert!(request.block_ids.len() * block_size >= request.num_computed_tokens);
                prop_assert!(request.block_ids.len() <= num_tokens.div_ceil(block_size));
                prop_assert!(request.num_computed_tokens <= num_tokens);
            }
            RequestStatus::Waiting | RequestStatus::Preempted => {
                prop_assert!(request.block_ids.is_empty() && request.num_computed_tokens == 0);
            }
            other => prop_assert!(false, "finished request {} still live: {:?}", request.request_id, other),
        }
    }
    let live = snapshot.running.len() + snapshot.waiting.len();
    prop_assert_eq!(live, snapshot.requests.len());
    prop_assert_eq!(scheduler.num_running() + scheduler.num_waiting(), live);
    Ok(())
}

/// Runs `requests` (added at their arrival steps) to completion; returns each output.
fn run(
    case: &Case,
    num_gpu_blocks: usize,
    requests: Vec<(usize, Request)>,
    check: bool,
) -> Result<HashMap<RequestId, Vec<TokenId>>, TestCaseError> {
    let mut scheduler = scheduler_for(case, num_gpu_blocks);
    let mut executor = SimExecutor::new(sim_config()).unwrap();
    let mut outputs: HashMap<RequestId, Vec<TokenId>> = HashMap::new();
    let mut finished = HashSet::new();
    let total = requests.len();
    let mut pending = requests;
    pending.sort_by_key(|(step, request)| (*step, request.request_id));
    pending.reverse();
    let mut step = 0;
    while !pending.is_empty() || scheduler.has_unfinished_requests() {
        while pending.last().is_some_and(|(arrival, _)| *arrival <= step) {
            let (_, request) = pending.pop().unwrap();
            scheduler.add_request(request).unwrap();
        }
        let output = scheduler.schedule();
        let model_output = executor
            .execute(&output, &mut StepMasks::none())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for core_output in scheduler.update_from_output(&output, &model_output) {
            outputs.entry(core_output.request_id).or_default().extend(core_output.new_token_ids);
            if core_output.finish_reason.is_some() {
                prop_assert!(finished.insert(core_output.request_id), "finished twice");
            }
        }
        let inject = case.invalidate_every > 0 && step % case.invalidate_every == case.invalidate_every - 1;
        if check && inject && step < MAX_INJECTIONS * case.invalidate_every {
            let victim = 1 + (step % (num_gpu_blocks - 1)) as BlockId;
            let failed = scheduler.handle_invalid_blocks(&HashSet::from([victim]));
            prop_assert!(failed.is_empty());
        }
        if check {
            check_invariants(&scheduler.snapshot(), &scheduler)?;
        }
        step += 1;
        prop_assert!(step < 20_000, "no progress after {} steps", step);
    }
    prop_assert_eq!(finished.len(), total, "not every request finished");
    Ok(outputs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_keep_invariants_and_match_solo_runs(case in case()) {
        let requests: Vec<(usize, Request)> = case
            .specs
            .iter()
            .enumerate()
            .map(|(i, spec)| (spec.arrival_step, make_request(&case, i as RequestId + 1, spec)))
            .collect();
        let together = run(&case, case.num_gpu_blocks, requests.clone(), true)?;
        for (_, request) in requests {
            let id = request.request_id;
            let prompt_blocks = (request.num_tokens() + request.sampling_params.max_tokens).div_ceil(case.block_size);
            let alone = run(&case, prompt_blocks + 2, vec![(0, request)], false)?;
            prop_assert_eq!(&together[&id], &alone[&id], "request {} differs from its solo run", id);
        }
    }
}
