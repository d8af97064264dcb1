//! SmolLM2 prompt logprobs through the real scheduler and the wgpu executor: a prompt
//! position's logprobs are bit for bit what decoding its token gave (the invariance rule), and
//! chunked prefill, RECOMPUTE preemption and the prefix cache change none of their bits.

mod smollm2_support;

use std::collections::HashMap;

use pagoda::core::metrics::SchedulerStats;
use pagoda::core::scheduler::Scheduler;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::sampling::{PromptLogprobs, SamplingParams, TokenLogprobs};
use smollm2_support::{
    EXECUTOR_BLOCKS, MAX_SEQS, add_requests, executor, greedy_cases, run_to_completion, scheduler,
};

/// What one request produced.
#[derive(Debug, Default)]
struct Run {
    tokens: Vec<u32>,
    logprobs: Vec<TokenLogprobs>,
    prompt_logprobs: Option<PromptLogprobs>,
    /// Outputs that carried prompt logprobs (exactly one is right).
    prompt_logprob_outputs: usize,
    num_cached_tokens: usize,
}

/// Runs `requests` (prompt and parameters; ids from `first_id`) to completion through
/// `scheduler`.
fn run(
    exec: &mut WgpuExecutor,
    scheduler: &mut Scheduler,
    requests: &[(Vec<u32>, SamplingParams)],
    first_id: u64,
) -> Vec<Run> {
    add_requests(scheduler, requests, first_id);
    let mut runs: HashMap<u64, Run> = HashMap::new();
    run_to_completion(exec, scheduler, |out| {
        let run = runs.entry(out.request_id).or_default();
        run.tokens.extend(out.new_token_ids);
        run.logprobs.extend(out.new_logprobs);
        run.num_cached_tokens = out.num_cached_tokens;
        if let Some(prompt_logprobs) = out.prompt_logprobs {
            run.prompt_logprob_outputs += 1;
            run.prompt_logprobs = Some(prompt_logprobs);
        }
    });
    (0..requests.len() as u64).map(|i| runs.remove(&(first_id + i)).unwrap_or_default()).collect()
}

/// A position's logprobs as bits: (token, logprob, rank, top as (id, logprob)).
type Bits = Option<(u32, u32, usize, Vec<(u32, u32)>)>;

fn bits(prompt_logprobs: &PromptLogprobs) -> Vec<Bits> {
    prompt_logprobs
        .iter()
        .map(|entry| {
            entry.as_ref().map(|e| {
                let top = e.top.iter().map(|&(id, logprob)| (id, logprob.to_bits())).collect();
                (e.token_id, e.logprob.to_bits(), e.rank, top)
            })
        })
        .collect()
}

fn with_prompt_logprobs(top_n: usize, max_tokens: usize) -> SamplingParams {
    SamplingParams { prompt_logprobs: Some(top_n), ..SamplingParams::greedy(max_tokens) }
}

#[test]
fn a_prompt_positions_logprobs_are_the_bits_decoding_gave() {
    let mut exec = executor();
    let prompt = greedy_cases().into_iter().find(|case| case.id == "A5").unwrap().prompt;
    const DECODED: usize = 4;
    let decode = SamplingParams { logprobs: Some(5), ignore_eos: true, ..SamplingParams::greedy(DECODED) };
    let decoded =
        run(&mut exec, &mut scheduler(EXECUTOR_BLOCKS, 1024, false), &[(prompt.clone(), decode)], 1)
            .remove(0);
    assert_eq!(decoded.tokens.len(), DECODED);

    // The prompt followed by the decoded tokens, scored in one prefill (more rows than MAX_SEQS).
    let scored: Vec<u32> = prompt.iter().chain(&decoded.tokens).copied().collect();
    assert!(scored.len() > MAX_SEQS);
    let out = run(
        &mut exec,
        &mut scheduler(EXECUTOR_BLOCKS, 1024, false),
        &[(scored.clone(), with_prompt_logprobs(5, 1))],
        2,
    )
    .remove(0);
    assert_eq!(out.prompt_logprob_outputs, 1);
    let entries = out.prompt_logprobs.unwrap();
    assert_eq!(entries.len(), scored.len());
    assert!(entries[0].is_none());
    for (position, entry) in entries.iter().enumerate().skip(1) {
        let entry = entry.as_ref().unwrap_or_else(|| panic!("position {position} has no logprobs"));
        assert_eq!(entry.token_id, scored[position]);
        assert_eq!(entry.top.len(), 5);
        assert!(entry.rank >= 1 && entry.logprob <= entry.top[0].1);
    }
    for (i, logprobs) in decoded.logprobs.iter().enumerate() {
        let entry = entries[prompt.len() + i].as_ref().unwrap();
        assert_eq!(
            (entry.logprob.to_bits(), entry.rank),
            (logprobs.logprob.to_bits(), 1),
            "decoded token {i}: prefill {} vs decode {}",
            entry.logprob,
            logprobs.logprob
        );
        let top = |top: &[(u32, f32)]| top.iter().map(|&(id, l)| (id, l.to_bits())).collect::<Vec<_>>();
        assert_eq!(top(&entry.top), top(&logprobs.top), "decoded token {i}'s top 5");
    }
}

#[test]
fn chunks_preemption_and_the_prefix_cache_change_no_prompt_logprob_bits() {
    let mut exec = executor();
    let prompts: Vec<Vec<u32>> = greedy_cases().into_iter().map(|case| case.prompt).collect();
    let requests: Vec<(Vec<u32>, SamplingParams)> =
        prompts.iter().map(|prompt| (prompt.clone(), with_prompt_logprobs(3, 8))).collect();
    let reference = run(&mut exec, &mut scheduler(EXECUTOR_BLOCKS, 1024, false), &requests, 100);
    let expected: Vec<Vec<Bits>> =
        reference.iter().map(|r| bits(r.prompt_logprobs.as_ref().unwrap())).collect();
    for (run, prompt) in reference.iter().zip(&prompts) {
        assert_eq!(run.prompt_logprob_outputs, 1);
        assert_eq!(run.prompt_logprobs.as_ref().unwrap().len(), prompt.len());
    }

    // Small chunks in a pool that forces preemptions.
    let mut small = scheduler(16, 7, true);
    let chunked = run(&mut exec, &mut small, &requests, 200);
    let stats: SchedulerStats = small.stats();
    assert!(stats.num_preemptions > 0, "no preemption happened");
    for (i, (run, reference)) in chunked.iter().zip(&reference).enumerate() {
        assert_eq!(run.prompt_logprob_outputs, 1, "request {i} must emit its prompt logprobs once");
        assert_eq!(bits(run.prompt_logprobs.as_ref().unwrap()), expected[i], "request {i}");
        assert_eq!(run.tokens, reference.tokens, "request {i}");
    }

    // The same prompts again with their blocks cached: requests that score their prompt take
    // no hits, and the same bits come back; a plain request takes the hits.
    let mut cached = scheduler(EXECUTOR_BLOCKS, 5, true);
    run(&mut exec, &mut cached, &requests[..1], 300);
    let again = run(&mut exec, &mut cached, &requests[..1], 301).remove(0);
    assert_eq!(again.num_cached_tokens, 0);
    assert_eq!(bits(again.prompt_logprobs.as_ref().unwrap()), expected[0]);
    let plain =
        run(&mut exec, &mut cached, &[(prompts[0].clone(), SamplingParams::greedy(1))], 302).remove(0);
    assert!(plain.num_cached_tokens > 0, "the prompt's blocks were cached");
}

#[test]
fn prompt_logprobs_match_the_fp32_reference() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/smollm2-prompt-logprobs.json");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let ids =
        |v: &serde_json::Value| v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
    let requests: Vec<(Vec<u32>, SamplingParams)> =
        cases.iter().map(|case| (ids(&case["prompt_ids"]), with_prompt_logprobs(3, 1))).collect();
    let mut exec = executor();
    let runs = run(&mut exec, &mut scheduler(EXECUTOR_BLOCKS, 1024, false), &requests, 400);
    let mut worst = 0.0f64;
    for (case, run) in cases.iter().zip(&runs) {
        let entries = run.prompt_logprobs.as_ref().unwrap();
        for (position, expected) in case["positions"].as_array().unwrap().iter().enumerate() {
            let entry = entries[position + 1].as_ref().unwrap();
            assert_eq!(u64::from(entry.token_id), expected["token_id"].as_u64().unwrap());
            let pairs = [(entry.logprob, &expected["logprob"]), (entry.top[0].1, &expected["top"][0][1])];
            for (got, want) in pairs {
                let error = (f64::from(got) - want.as_f64().unwrap()).abs();
                worst = worst.max(error);
                assert!(error < 1e-3, "{} position {}: {got} vs {want}", case["id"], position + 1);
            }
        }
    }
    eprintln!("largest prompt-logprob error against the fp32 reference: {worst:.2e}");
}
