//! The simulated workload driver: built-in workloads run to completion, deterministically,
//! and their outputs do not depend on the schedule.

use pagoda::executor::sim::SimConfig;
use pagoda::workload::{BuiltinWorkload, WorkloadRunner, run_workload};
use pagoda::{CacheConfig, SchedulerConfig};

fn cache(num_gpu_blocks: usize) -> CacheConfig {
    CacheConfig { num_gpu_blocks, ..CacheConfig::default() }
}

#[test]
fn names_round_trip() {
    for workload in BuiltinWorkload::ALL {
        assert_eq!(workload.name().parse::<BuiltinWorkload>(), Ok(workload));
    }
    assert!("nope".parse::<BuiltinWorkload>().is_err());
}

#[test]
fn every_builtin_workload_finishes() {
    for (workload, num_requests) in [
        (BuiltinWorkload::Random, 24),
        (BuiltinWorkload::SharedPrefix, 24),
        (BuiltinWorkload::MemoryPressure, 16),
        (BuiltinWorkload::LongPrompt, 6),
    ] {
        let arrivals = workload.generate(num_requests, 32_000, 1);
        let report =
            run_workload(&arrivals, SchedulerConfig::default(), cache(300), SimConfig::default()).unwrap();
        assert_eq!(report.workload, workload.name());
        assert_eq!((report.num_finished, report.num_rejected), (num_requests, 0), "{}", workload.name());
        let expected_output: u64 = arrivals.arrivals.iter().map(|a| a.max_tokens as u64).sum();
        assert_eq!(report.output_tokens, expected_output);
        assert!(report.ttft_p50_s > 0.0 && report.ttft_p99_s >= report.ttft_p50_s);
        assert!(report.itl_p99_s >= report.itl_p50_s && report.output_throughput > 0.0);
        assert!(report.peak_kv_cache_usage > 0.0 && report.peak_kv_cache_usage <= 1.0);
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains("\"prefix_cache_hit_rate\""));
    }
}

#[test]
fn shared_prefix_hits_the_cache_and_memory_pressure_preempts() {
    let shared = BuiltinWorkload::SharedPrefix.generate(32, 32_000, 2);
    let report = run_workload(&shared, SchedulerConfig::default(), cache(400), SimConfig::default()).unwrap();
    assert!(report.prefix_cache_hit_rate > 0.5, "hit rate {}", report.prefix_cache_hit_rate);

    let pressure = BuiltinWorkload::MemoryPressure.generate(16, 32_000, 3);
    let report =
        run_workload(&pressure, SchedulerConfig::default(), cache(200), SimConfig::default()).unwrap();
    assert!(report.num_preemptions > 0 && report.num_recomputed_tokens > 0);
    assert_eq!(report.num_finished, 16);
}

#[test]
fn reports_are_deterministic_and_outputs_ignore_the_schedule() {
    let workload = BuiltinWorkload::MemoryPressure.generate(12, 500, 4);
    let sim = SimConfig { vocab_size: 500, eos_token_id: Some(7), ..SimConfig::default() };
    let run = |config: SchedulerConfig, blocks: usize| {
        let mut runner = WorkloadRunner::new(&workload, config, cache(blocks), sim).unwrap();
        while runner.step().unwrap() {}
        (runner.report(), runner.outputs().clone())
    };
    let (first, first_outputs) = run(SchedulerConfig::default(), 150);
    let (second, second_outputs) = run(SchedulerConfig::default(), 150);
    assert_eq!(first, second);
    assert_eq!(first_outputs, second_outputs);
    assert!(first.num_preemptions > 0);
    let roomy = SchedulerConfig {
        max_num_batched_tokens: 97,
        long_prefill_token_threshold: 33,
        ..SchedulerConfig::default()
    };
    let (_, roomy_outputs) = run(roomy, 2000);
    assert_eq!(first_outputs, roomy_outputs);
}

#[test]
fn fixed_lengths_cut_or_repeat_prompts_and_cap_outputs() {
    let drawn = BuiltinWorkload::Random.generate(3, 1000, 5);
    let fixed = drawn.clone().with_lengths(Some(600), Some(7));
    for (before, after) in drawn.arrivals.iter().zip(&fixed.arrivals) {
        let n = before.prompt_token_ids.len();
        assert_eq!(after.prompt_token_ids.len(), 600);
        assert_eq!(after.prompt_token_ids[..n], before.prompt_token_ids[..]);
        assert_eq!(after.prompt_token_ids[n], before.prompt_token_ids[0]);
        assert_eq!((after.max_tokens, after.time_s), (7, before.time_s));
    }
    let cut = drawn.clone().with_lengths(Some(16), None);
    for (before, after) in drawn.arrivals.iter().zip(&cut.arrivals) {
        assert_eq!(after.prompt_token_ids, before.prompt_token_ids[..16]);
        assert_eq!(after.max_tokens, before.max_tokens);
    }
}

#[test]
fn multi_turn_chat_is_closed_loop_and_the_host_tier_speeds_up_returning_turns() {
    // One conversation: each turn arrives 2 s (think time) after the previous one finished,
    // so the run lasts three think times plus four short turns, and nobody queues.
    let single = BuiltinWorkload::MultiTurnChat.generate(4, 32_000, 2);
    let report = run_workload(&single, SchedulerConfig::default(), cache(300), SimConfig::default()).unwrap();
    assert_eq!(report.num_finished, 4);
    assert!(report.duration_s > 6.0 && report.duration_s < 7.0, "{}", report.duration_s);
    assert!(report.ttft_p99_s < 0.05, "{}", report.ttft_p99_s);
    // Six conversations on a pool of 40 blocks of 16 tokens: returning turns find their
    // history evicted from the GPU, and a host tier loads it back instead of recomputing it.
    let chat = BuiltinWorkload::MultiTurnChat.generate(24, 32_000, 0);
    let pool = CacheConfig { block_size: 16, num_gpu_blocks: 40, ..CacheConfig::default() };
    let plain = run_workload(&chat, SchedulerConfig::default(), pool.clone(), SimConfig::default()).unwrap();
    let tiered = CacheConfig { kv_offloading_size: 0.25, ..pool };
    let tier = run_workload(&chat, SchedulerConfig::default(), tiered, SimConfig::default()).unwrap();
    assert_eq!((plain.num_finished, tier.num_finished), (24, 24));
    assert!(tier.host_tier.unwrap().num_loaded_blocks > 0);
    let (plain_ttft, tier_ttft) = (plain.ttft_p50_returning_s.unwrap(), tier.ttft_p50_returning_s.unwrap());
    assert!(
        tier_ttft * 2.0 < plain_ttft,
        "returning TTFT p50 {tier_ttft} s with the tier, {plain_ttft} s without"
    );
}
