//! The scheduler one step ahead (async scheduling, vLLM's `AsyncScheduler`): output
//! placeholders, stops one step late, aborts and preemption while a step is in flight, and
//! vLLM's own scheduler tests ported (`tests/v1/core/test_scheduler.py`'s
//! `test_preempt_during_execution`, `tests/v1/core/test_async_scheduler.py`).

mod core_support;

use std::collections::{HashMap, VecDeque};

use core_support::*;
use pagoda::core::output::{ModelRunnerOutput, SchedulerOutput};
use pagoda::core::scheduler::Scheduler;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::structured::Constraint;
use pagoda::{CacheConfig, RequestId, RequestStatus, SamplingParams, SchedulerConfig, TokenId};

/// A scheduler over `num_gpu_blocks` blocks of 16 tokens, one step ahead or not.
fn scheduler_with(async_scheduling: bool, budget: usize, num_gpu_blocks: usize, caching: bool) -> Scheduler {
    let config =
        SchedulerConfig { max_num_batched_tokens: budget, async_scheduling, ..SchedulerConfig::default() };
    let cache = CacheConfig { enable_prefix_caching: caching, ..cache(num_gpu_blocks) };
    Scheduler::new(config, cache).unwrap()
}

/// The model runner's output for a step scheduled one ahead: `1000 + id` for every request
/// the step samples for (those that got a placeholder).
fn placeholder_output(output: &SchedulerOutput) -> ModelRunnerOutput {
    let mut result = ModelRunnerOutput::default();
    for &id in &output.placeholder_req_ids {
        result.sampled_token_ids.insert(id, vec![1000 + id as TokenId]);
    }
    result
}

/// vLLM's `test_preempt_during_execution`: a request preempted while its step runs still
/// gets that step's token.
#[test]
fn a_request_preempted_while_its_step_runs_keeps_that_steps_token() {
    // 11 blocks, block 0 the null block: 10 usable, 5 for each 80-token prompt.
    let mut s = scheduler_with(false, 100, 11, false);
    s.add_request(request(0, tokens(0, 80), 8)).unwrap();
    let out0 = s.schedule();
    assert_eq!(chunks(&out0), vec![(0, 80)]);
    assert_eq!(out0.scheduled_new_reqs[0].block_ids.len(), 5);

    // The second request is scheduled while the first one's step is still running.
    s.add_request(request(1, tokens(100, 80), 8)).unwrap();
    let out1 = s.schedule();
    assert_eq!(chunks(&out1), vec![(1, 80)]);
    assert_eq!(out1.scheduled_new_reqs[0].block_ids.len(), 5);

    let mut model0 = ModelRunnerOutput::default();
    model0.sampled_token_ids.insert(0, vec![0]);
    s.update_from_output(&out0, &model0);

    // Request 0's 81st token needs a sixth block: request 1 is preempted for it.
    let out2 = s.schedule();
    assert_eq!(chunks(&out2), vec![(0, 1)]);
    assert_eq!(s.running_ids(), &[0]);
    assert_eq!(s.get_request(1).unwrap().status, RequestStatus::Preempted);

    let mut model1 = ModelRunnerOutput::default();
    model1.sampled_token_ids.insert(1, vec![42]);
    let outputs = s.update_from_output(&out1, &model1);
    assert_eq!(s.get_request(1).unwrap().output_token_ids, vec![42]);
    assert_eq!(outputs.len(), 1);
    assert_eq!((outputs[0].request_id, outputs[0].new_token_ids.clone()), (1, vec![42]));
}

/// vLLM's `test_stop_by_max_tokens`: one step ahead, a request reaching `max_tokens` is not
/// scheduled for a token it would never emit.
#[test]
fn max_tokens_stops_without_scheduling_an_extra_step() {
    for max_tokens in [1, 2, 3, 5] {
        let mut s = scheduler_with(true, 8192, 64, true);
        let (prompt0, prompt1) = (tokens(0, 10), tokens(100, 10));
        s.add_request(request(0, prompt0, max_tokens)).unwrap();
        let mut in_flight = VecDeque::from([s.schedule()]);
        s.add_request(request(1, prompt1, max_tokens)).unwrap();
        in_flight.push_back(s.schedule());
        let mut total = 0;
        let mut emitted: HashMap<RequestId, usize> = HashMap::new();
        while let Some(output) = in_flight.pop_front() {
            total += output.total_num_scheduled_tokens;
            for out in s.update_from_output(&output, &placeholder_output(&output)) {
                *emitted.entry(out.request_id).or_default() += out.new_token_ids.len();
            }
            let next = s.schedule();
            if !next.num_scheduled_tokens.is_empty() {
                in_flight.push_back(next);
            }
        }
        assert!(!s.has_unfinished_requests(), "max_tokens {max_tokens}");
        assert_eq!(emitted, HashMap::from([(0, max_tokens), (1, max_tokens)]), "max_tokens {max_tokens}");
        assert_eq!(total, 2 * (10 + max_tokens - 1), "max_tokens {max_tokens}");
    }
}

/// vLLM's `test_abort`: requests aborted while steps are in flight end with the tokens
/// they had; the in-flight outputs are dropped.
#[test]
fn aborts_while_steps_are_in_flight_drop_their_outputs() {
    let mut s = scheduler_with(true, 8192, 256, true);
    for id in 0..10 {
        s.add_request(request(id, tokens(100 * id as u32, 20), 20)).unwrap();
    }
    let mut order = VecDeque::from([0, 8, 3, 1, 6, 4, 2, 5, 7, 9]);
    let mut emitted: HashMap<RequestId, Vec<TokenId>> = HashMap::new();
    let mut in_flight = VecDeque::from([s.schedule(), s.schedule()]);
    while let Some(output) = in_flight.pop_front() {
        if let Some(id) = order.pop_front() {
            assert_eq!(s.finish_requests([id], RequestStatus::FinishedAborted), Ok(1));
        }
        for out in s.update_from_output(&output, &placeholder_output(&output)) {
            emitted.entry(out.request_id).or_default().extend(out.new_token_ids);
        }
        let next = s.schedule();
        if !next.num_scheduled_tokens.is_empty() {
            in_flight.push_back(next);
        }
    }
    assert!(!s.has_unfinished_requests());
    for (index, id) in [0, 8, 3, 1, 6, 4, 2, 5, 7, 9].into_iter().enumerate() {
        let got = emitted.get(&id).map_or(0, Vec::len);
        assert_eq!(got, index, "request {id} aborted {index}th");
    }
    assert_eq!(s.kv_cache_manager().num_free_blocks(), 255);
}

/// vLLM's `test_prefix_caching_for_prefill_dedup`: the same prompt admitted in one step
/// shares every full block, and later copies hit them while steps are in flight.
#[test]
fn same_prompts_share_blocks_one_step_ahead() {
    let prompt = tokens(0, 100);
    let mut s = scheduler_with(true, 1000, 128, true);
    s.add_request(request(0, prompt.clone(), 3)).unwrap();
    s.add_request(request(1, prompt.clone(), 3)).unwrap();
    let first = s.schedule();
    assert_eq!(chunks(&first), vec![(0, 100), (1, 100 % 16)]);
    let mut in_flight = VecDeque::from([first, s.schedule()]);
    let mut next_id = 2;
    while let Some(output) = in_flight.pop_front() {
        let added = (next_id < 5).then(|| {
            s.add_request(request(next_id, prompt.clone(), 3)).unwrap();
            next_id += 1;
            next_id - 1
        });
        s.update_from_output(&output, &placeholder_output(&output));
        let next = s.schedule();
        if !next.num_scheduled_tokens.is_empty() {
            if let Some(id) = added {
                assert_eq!(next.num_scheduled_tokens[&id], 100 % 16, "request {id}");
            }
            in_flight.push_back(next);
        }
    }
    assert!(!s.has_unfinished_requests());
}

/// vLLM's `test_prefix_caching_for_multi_turn`: a next turn whose prompt is a finished
/// request's prompt and output hits every full block of it — the blocks cached one step
/// ahead hold only real tokens.
#[test]
fn next_turns_hit_the_blocks_of_outputs_made_one_step_ahead() {
    let mut s = scheduler_with(true, 1000, 1024, true);
    for id in 0..5 {
        s.add_request(request(id, tokens(1000 * id as u32, 100), 200)).unwrap();
    }
    let mut outputs: HashMap<RequestId, Vec<TokenId>> = HashMap::new();
    let mut in_flight = VecDeque::from([s.schedule(), s.schedule()]);
    while let Some(output) = in_flight.pop_front() {
        for out in s.update_from_output(&output, &placeholder_output(&output)) {
            outputs.entry(out.request_id).or_default().extend(out.new_token_ids);
        }
        let next = s.schedule();
        if !next.num_scheduled_tokens.is_empty() {
            in_flight.push_back(next);
        }
    }
    assert!(!s.has_unfinished_requests());
    for id in 0..5 {
        let prompt = [tokens(1000 * id as u32, 100), outputs[&id].clone()].concat();
        assert_eq!(prompt.len(), 300);
        s.add_request(request(10 + id, prompt, 200)).unwrap();
    }
    let next = s.schedule();
    for id in 10..15 {
        assert_eq!(next.num_scheduled_tokens[&id], 300 % 16, "request {id}");
    }
}

/// Stops one step late: the extra step's token is never emitted or counted, and the
/// request's blocks go back to the pool.
#[test]
fn a_token_computed_after_a_stop_is_dropped_and_its_blocks_freed() {
    let mut s = scheduler_with(true, 8192, 16, false);
    let params = SamplingParams { stop_token_ids: vec![1000], ..SamplingParams::greedy(50) };
    s.add_request(pagoda::Request::new(0, tokens(0, 20), params, None, 0.0)).unwrap();
    let out0 = s.schedule();
    let out1 = s.schedule();
    // Step 1 computes the placeholder after the prompt before the first token is known.
    assert_eq!(chunks(&out1), vec![(0, 1)]);
    assert!(out1.scheduled_cached_reqs[0].new_token_ids.is_empty());
    let first = s.update_from_output(&out0, &placeholder_output(&out0));
    assert_eq!(first[0].new_token_ids, vec![1000]);
    assert!(first[0].finish_reason.is_some());
    assert_eq!(s.kv_cache_manager().num_free_blocks(), 15);
    assert!(s.update_from_output(&out1, &placeholder_output(&out1)).is_empty());
    assert_eq!(s.stats().num_generated_tokens, 1);
    assert!(!s.has_unfinished_requests());
}

/// A constrained request waits for its token in flight (its next mask needs it) while an
/// unconstrained one in the same batch is scheduled ahead.
#[test]
fn a_constrained_request_waits_for_its_token_and_others_do_not() {
    let mut s = scheduler_with(true, 8192, 64, true);
    let choice = Constraint::Choice(vec!["yes".into()]);
    let constrained = SamplingParams { structured_outputs: Some(choice), ..SamplingParams::greedy(8) };
    s.add_request(pagoda::Request::new(0, tokens(0, 10), constrained, None, 0.0)).unwrap();
    s.add_request(request(1, tokens(100, 10), 8)).unwrap();
    let out0 = s.schedule();
    assert_eq!(chunks(&out0), vec![(0, 10), (1, 10)]);
    let out1 = s.schedule();
    assert_eq!(chunks(&out1), vec![(1, 1)]);
    s.update_from_output(&out0, &placeholder_output(&out0));
    let out2 = s.schedule();
    assert_eq!(chunks(&out2), vec![(0, 1), (1, 1)]);
    assert_eq!(out2.scheduled_cached_reqs[0].new_token_ids, vec![1000]);
}

/// The async loop's outputs are the serial loop's, token for token, on the simulated
/// model: requests preempted on a tiny pool (some while their step runs), prefix hits, and
/// aborts mid-batch.
#[test]
fn one_step_ahead_generates_what_the_serial_loop_does_under_preemption() {
    let prompts: Vec<Vec<TokenId>> =
        (0..6).map(|i| if i % 2 == 0 { tokens(7, 40) } else { tokens(300 * i as u32, 25 + 3 * i) }).collect();
    let run = |async_scheduling: bool| {
        let mut s = scheduler_with(async_scheduling, 64, 14, true);
        for (id, prompt) in prompts.iter().enumerate() {
            s.add_request(request(id as RequestId, prompt.clone(), 24 + id)).unwrap();
        }
        let (_, mut executor) = sim();
        let mut generated: HashMap<RequestId, Vec<TokenId>> = HashMap::new();
        let mut in_flight: VecDeque<(SchedulerOutput, ModelRunnerOutput)> = VecDeque::new();
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 2000, "no progress");
            if steps == 9 {
                s.finish_requests([3], RequestStatus::FinishedAborted).unwrap();
            }
            let depth = if async_scheduling { 2 } else { 1 };
            while in_flight.len() < depth && s.has_unfinished_requests() {
                let output = s.schedule();
                let model = executor.execute(&output, &mut StepMasks::none()).unwrap();
                in_flight.push_back((output, model));
            }
            let Some((output, model)) = in_flight.pop_front() else { break };
            for out in s.update_from_output(&output, &model) {
                generated.entry(out.request_id).or_default().extend(out.new_token_ids);
            }
        }
        (generated, s.stats())
    };
    // The abort lands at another point of request 3's output in each loop: it is left out.
    let (mut serial, serial_stats) = run(false);
    let (mut ahead, ahead_stats) = run(true);
    serial.remove(&3);
    ahead.remove(&3);
    assert!(serial_stats.num_preemptions > 0 && ahead_stats.num_preemptions > 0);
    assert_eq!(serial, ahead);
    let (config, _) = sim();
    for (id, prompt) in prompts.iter().enumerate() {
        let id = id as RequestId;
        if id != 3 {
            assert_eq!(ahead[&id], alone_output(&config, prompt, 24 + id as usize), "request {id}");
        }
    }
}
