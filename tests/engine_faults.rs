//! Fault injection in the library: a step the executor fails ends every live request with
//! an error and frees its blocks; after a transient failure the engine serves new requests
//! exactly as before, after a lost device it refuses all further work.

mod engine_support;

use engine_support::tiny_model;
use pagoda::executor::ExecutorError;
use pagoda::executor::fault::{Fault, FaultKind, FaultPlan};
use pagoda::executor::sim::{CostModel, SimConfig, SimExecutor, next_token};
use pagoda::{
    CacheConfig, Engine, EngineConfig, EngineError, FinishReason, SamplingParams, SchedulerConfig, TokenId,
};

const SEED: u64 = 5;

fn sim_config() -> SimConfig {
    SimConfig { vocab_size: 275, eos_token_id: Some(2), seed: SEED, cost: CostModel::default() }
}

/// An engine on the simulated model whose `step`-th step fails with `kind`; a budget of
/// 32 tokens a step and 64 blocks of 16 tokens.
fn faulty_engine(step: u64, kind: FaultKind) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        cache: CacheConfig { block_size: 16, num_gpu_blocks: 64, ..CacheConfig::default() },
        scheduler: SchedulerConfig { max_num_batched_tokens: 32, ..SchedulerConfig::default() },
        seed: SEED,
        ..EngineConfig::default()
    };
    let executor =
        SimExecutor::new(sim_config()).unwrap().with_faults(FaultPlan::new([Fault { step, kind }]));
    Engine::with_executor(config, tiny_model(dir.path()), Box::new(executor)).unwrap()
}

fn params(max_tokens: usize) -> SamplingParams {
    SamplingParams { ignore_eos: true, ..SamplingParams::greedy(max_tokens) }
}

fn prompt(start: u32, len: usize) -> Vec<TokenId> {
    (start..start + len as u32).map(|t| 3 + t % 270).collect()
}

/// What the simulated model generates for `prompt` alone.
fn alone(prompt: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
    let mut history = prompt.to_vec();
    for _ in 0..max_tokens {
        history.push(next_token(&sim_config(), &history));
    }
    history.split_off(prompt.len())
}

/// Runs a decoding request A (40-token prompt) and a prefilling request B (100 tokens)
/// into the failing third step; returns the failure.
fn fail_third_step(engine: &mut Engine) -> (ExecutorError, Vec<pagoda::RequestOutput>) {
    engine.add_request(prompt(0, 40), params(10)).unwrap();
    engine.add_request(prompt(100, 100), params(10)).unwrap();
    assert_eq!(engine.step().unwrap().len(), 0);
    assert_eq!(engine.step().unwrap().len(), 1);
    match engine.step() {
        Err(EngineError::StepFailed { source, outputs }) => (source, outputs),
        other => panic!("expected a failed step, got {other:?}"),
    }
}

fn assert_all_blocks_free(engine: &Engine) {
    let kv = engine.scheduler().kv_cache_manager();
    assert_eq!(kv.num_free_blocks(), 63);
    assert_eq!(kv.usage(), 0.0);
    assert!(!engine.has_unfinished_requests());
}

#[test]
fn a_transient_failure_fails_every_live_request_and_the_engine_goes_on() {
    let mut engine = faulty_engine(3, FaultKind::Transient);
    let (source, outputs) = fail_third_step(&mut engine);
    assert!(matches!(source, ExecutorError::Device(_)), "{source:?}");
    let ends: Vec<_> = outputs.iter().map(|o| (o.request_id, o.finish_reason, o.num_output_tokens)).collect();
    assert_eq!(ends, vec![(0, Some(FinishReason::Error), 1), (1, Some(FinishReason::Error), 0)]);
    assert_all_blocks_free(&engine);
    assert_eq!(engine.metrics().finished.error, 2);
    assert_eq!(engine.device_lost(), None);

    // B had computed 24 tokens (one full block) before the failed step, which would have
    // filled two more: only the first may be hit.
    let again = engine.generate([prompt(100, 100)], &params(10)).unwrap().remove(0);
    assert_eq!(again.num_cached_tokens, 16);
    assert_eq!(again.token_ids, alone(&prompt(100, 100), 10));
    let fresh = engine.generate([prompt(7, 33)], &params(12)).unwrap().remove(0);
    assert_eq!(fresh.token_ids, alone(&prompt(7, 33), 12));
    assert_all_blocks_free(&engine);
}

#[test]
fn a_lost_device_fails_every_live_request_and_stops_the_engine() {
    let mut engine = faulty_engine(3, FaultKind::DeviceLost);
    let (source, outputs) = fail_third_step(&mut engine);
    assert!(source.is_device_lost(), "{source:?}");
    assert_eq!(outputs.len(), 2);
    assert!(outputs.iter().all(|o| o.finish_reason == Some(FinishReason::Error)));
    assert_all_blocks_free(&engine);
    let reason = engine.device_lost().expect("the engine knows its device is gone").to_owned();
    assert_eq!(reason, "the device was lost: injected at step 3");
    assert!(
        matches!(engine.add_request(prompt(0, 8), params(4)), Err(EngineError::DeviceLost(r)) if r == reason)
    );
    assert!(matches!(engine.step(), Err(EngineError::DeviceLost(_))));
    assert!(matches!(engine.generate([prompt(0, 8)], &params(4)), Err(EngineError::DeviceLost(_))));
}

#[test]
fn generate_returns_the_failure_and_leaves_nothing_behind() {
    let mut engine = faulty_engine(2, FaultKind::Transient);
    let err = engine.generate([prompt(0, 20), prompt(50, 20)], &params(5)).unwrap_err();
    match err {
        EngineError::StepFailed { outputs, .. } => assert_eq!(outputs.len(), 2),
        other => panic!("expected a failed step, got {other:?}"),
    }
    assert_all_blocks_free(&engine);
    let out = engine.generate([prompt(0, 20)], &params(5)).unwrap().remove(0);
    assert_eq!(out.token_ids, alone(&prompt(0, 20), 5));
}
