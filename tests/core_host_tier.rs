//! The host KV tier in the scheduler: stores on eviction, loads at admission instead of
//! recomputing, falls back to recompute when a copy fails, and leaves outputs unchanged.

mod core_support;

use core_support::{cache, fake_model_output, fake_step, request, tokens};
use pagoda::core::host_tier::{BlockCopy, HostTierError};
use pagoda::core::scheduler::{Scheduler, SchedulerConfigError};
use pagoda::executor::sim::SimConfig;
use pagoda::workload::BuiltinWorkload;
use pagoda::workload::sim::WorkloadRunner;
use pagoda::{CacheConfig, Engine, ExecutorKind, SamplingParams, SchedulerConfig};

const BLOCK_BYTES: u64 = 1 << 20;

/// A cache of `num_gpu_blocks` blocks with a host tier of `host_blocks` 1 MiB blocks.
fn tiered(num_gpu_blocks: usize, host_blocks: usize) -> CacheConfig {
    CacheConfig {
        kv_offloading_size: host_blocks as f64 / 1024.0,
        kv_block_bytes: BLOCK_BYTES,
        ..cache(num_gpu_blocks)
    }
}

fn scheduler(cache: CacheConfig) -> Scheduler {
    let config = SchedulerConfig { max_num_batched_tokens: 256, ..SchedulerConfig::default() };
    Scheduler::new(config, cache).unwrap()
}

#[test]
fn evicted_blocks_are_stored_once_and_loaded_back_instead_of_recomputed() {
    let mut scheduler = scheduler(tiered(6, 4));
    // A fills blocks 1, 2 (full, hashed) and 3 (partial) and finishes.
    scheduler.add_request(request(0, tokens(0, 33), 1)).unwrap();
    let (first, _) = fake_step(&mut scheduler);
    assert!(first.kv_transfers.is_empty());
    // B needs all five blocks: A's hashed blocks 2 and 1 are reused, so they are stored.
    scheduler.add_request(request(1, tokens(1000, 65), 1)).unwrap();
    let (second, _) = fake_step(&mut scheduler);
    assert_eq!(
        second.kv_transfers.stores,
        vec![BlockCopy { block_id: 2, slot: 0 }, BlockCopy { block_id: 1, slot: 1 }]
    );
    assert!(second.kv_transfers.loads.is_empty());
    // C shares A's two full blocks: the GPU cache lost them, the host store has them.
    let mut prompt = tokens(0, 32);
    prompt.push(7777);
    scheduler.add_request(request(2, prompt, 2)).unwrap();
    let third = scheduler.schedule();
    let new = &third.scheduled_new_reqs[0];
    assert_eq!(new.block_ids, vec![1, 2, 5]);
    assert_eq!(new.num_computed_tokens, 32, "two blocks loaded, not recomputed");
    assert_eq!(third.num_scheduled_tokens[&2], 1, "only the last token takes budget");
    assert_eq!(
        third.kv_transfers.loads,
        vec![BlockCopy { block_id: 1, slot: 1 }, BlockCopy { block_id: 2, slot: 0 }]
    );
    // B's hashed blocks 2 and 5 are reused in the same step: stored first, into free slots.
    assert_eq!(
        third.kv_transfers.stores,
        vec![BlockCopy { block_id: 2, slot: 2 }, BlockCopy { block_id: 5, slot: 3 }]
    );
    let outputs = scheduler.update_from_output(&third, &fake_model_output(&scheduler, &third));
    assert_eq!(outputs[0].num_cached_tokens, 32);
    let stats = scheduler.host_tier_stats().unwrap();
    assert_eq!((stats.num_stored_blocks, stats.num_loaded_blocks, stats.num_hit_blocks), (4, 2, 2));
    assert_eq!((stats.load_bytes, stats.store_bytes), (2 * BLOCK_BYTES, 4 * BLOCK_BYTES));
    assert_eq!(scheduler.stats().prefix_cache.hits, 0, "host hits are not GPU prefix hits");
}

#[test]
fn a_failed_load_falls_back_to_recompute_and_forgets_the_slots() {
    let mut scheduler = scheduler(tiered(6, 4));
    scheduler.add_request(request(0, tokens(0, 33), 1)).unwrap();
    fake_step(&mut scheduler);
    scheduler.add_request(request(1, tokens(1000, 65), 1)).unwrap();
    fake_step(&mut scheduler);
    scheduler.add_request(request(2, tokens(0, 33), 3)).unwrap();
    let (loaded, _) = fake_step(&mut scheduler);
    assert_eq!(loaded.kv_transfers.loads.len(), 2);
    let failed = scheduler.handle_failed_transfers(&[], &loaded.kv_transfers.loads);
    assert!(failed.is_empty(), "policy recompute keeps the request");
    assert_eq!(scheduler.get_request(2).unwrap().num_computed_tokens, 0);
    let (again, _) = fake_step(&mut scheduler);
    assert_eq!(again.num_scheduled_tokens[&2], 34, "prompt and the sampled token recomputed");
    assert!(again.kv_transfers.loads.is_empty());
}

#[test]
fn refuses_a_tier_without_prefix_caching_or_beyond_free_memory() {
    let config = SchedulerConfig::default();
    let no_caching = CacheConfig { enable_prefix_caching: false, ..tiered(8, 4) };
    assert!(matches!(
        Scheduler::new(config.clone(), no_caching),
        Err(SchedulerConfigError::HostTier(HostTierError::NeedsPrefixCaching))
    ));
    let huge = CacheConfig { kv_offloading_size: 1e7, ..tiered(8, 4) };
    let error = Scheduler::new(config.clone(), huge).unwrap_err();
    assert!(matches!(error, SchedulerConfigError::HostTier(HostTierError::ExceedsFreeMemory { .. })));
    assert!(error.to_string().contains("lower it"), "{error}");
    let unknown = CacheConfig { kv_block_bytes: 0, ..tiered(8, 4) };
    assert!(matches!(
        Scheduler::new(config, unknown),
        Err(SchedulerConfigError::HostTier(HostTierError::UnknownBlockBytes))
    ));
}

#[test]
fn memory_pressure_outputs_are_unchanged_and_recompute_falls_with_the_tier() {
    let sim = SimConfig { eos_token_id: None, ..SimConfig::default() };
    let workload =
        BuiltinWorkload::MemoryPressure.generate(24, sim.vocab_size, 7).with_lengths(Some(96), Some(64));
    let run = |cache: CacheConfig| {
        let mut runner = WorkloadRunner::new(&workload, SchedulerConfig::default(), cache, sim).unwrap();
        while runner.step().unwrap() {}
        (runner.outputs().clone(), runner.report())
    };
    let pool = CacheConfig { block_size: 16, num_gpu_blocks: 40, ..CacheConfig::default() };
    let (plain_outputs, plain) = run(pool.clone());
    let host = CacheConfig { kv_offloading_size: 160.0 * 1024.0 * 1024.0 / (1u64 << 30) as f64, ..pool };
    let (tier_outputs, tiered) = run(host);
    assert_eq!(tier_outputs, plain_outputs);
    assert!(plain.num_recomputed_tokens > 0 && plain.num_preemptions > 0);
    let stats = tiered.host_tier.unwrap();
    assert!(stats.num_loaded_blocks > 0 && stats.num_stored_blocks > 0, "{stats:?}");
    assert!(
        tiered.num_recomputed_tokens * 2 < plain.num_recomputed_tokens,
        "{} vs {}",
        tiered.num_recomputed_tokens,
        plain.num_recomputed_tokens
    );
}

#[test]
fn both_executors_run_a_host_tier_and_a_uniform_sliding_window_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    pagoda::model::testing::TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
    let builder = || Engine::builder().model(dir.path()).num_gpu_blocks(8).kv_offloading_size(0.001);
    let mut wgpu =
        builder().executor(ExecutorKind::Wgpu).build().expect("the wgpu executor runs a host tier");
    let stats = wgpu.scheduler().host_tier_stats().expect("the tier is on");
    // Its blocks are the executor's: every layer's K and V in the cache's dtype.
    assert!(stats.num_blocks > 0);
    let completions = wgpu
        .generate(
            ["a b c d e f g h i j k l m n o p q r"],
            &SamplingParams { ignore_eos: true, ..SamplingParams::greedy(4) },
        )
        .unwrap();
    assert_eq!(completions[0].token_ids.len(), 4);
    builder().executor(ExecutorKind::Sim).build().expect("the simulated model runs a host tier");
    // A pool that frees blocks as a uniform window slides past them (Mistral's) is refused.
    let sliding = CacheConfig { sliding_window: Some(16), ..tiered(8, 4) };
    let error = Scheduler::new(SchedulerConfig::default(), sliding).unwrap_err();
    assert!(matches!(error, SchedulerConfigError::HostTier(HostTierError::SlidingWindow)), "{error}");
    assert!(error.to_string().contains("sliding-window"), "{error}");
}
