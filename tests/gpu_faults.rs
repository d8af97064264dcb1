//! Failing devices on the wgpu executor, never a panic. A lost device (destroyed on
//! lavapipe, as a driver reset would lose it): the step fails with `DeviceLost`, and the
//! engine ends every live request with an error and refuses further work. A submit wgpu's
//! validation rejects: the step fails with `Device`, the engine ends every live request
//! with an error, frees their blocks and serves the next requests exactly as before.

use std::path::Path;

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::fault::{Fault, FaultKind, FaultPlan};
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ExecutorError, ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::ModelFiles;
use pagoda::model::testing::TinyLlama;
use pagoda::{Engine, EngineConfig, EngineError, FinishReason, SamplingParams};

fn open(dir: &Path) -> ModelFiles {
    ModelFiles::open(dir.join("tiny.gguf")).unwrap()
}

/// A 32-block pool of 4-token blocks, 32 tokens and 4 sequences a step.
fn configs() -> (CacheConfig, SchedulerConfig) {
    let cache = CacheConfig {
        block_size: 4,
        num_gpu_blocks: 32,
        kv_cache_dtype: KvCacheDtype::F32,
        ..Default::default()
    };
    let scheduler = SchedulerConfig {
        max_num_batched_tokens: 32,
        max_num_seqs: 4,
        max_model_len: 64,
        ..Default::default()
    };
    (cache, scheduler)
}

/// An engine on the tiny model in `dir` whose wgpu executor fails as `faults` say.
fn engine(dir: &Path, faults: FaultPlan) -> Engine {
    let (cache, scheduler) = configs();
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    let executor = WgpuExecutor::new(ctx, &open(dir), &cache, &scheduler, false).unwrap().with_faults(faults);
    let config = EngineConfig { cache, scheduler, ..EngineConfig::default() };
    Engine::with_executor(config, open(dir), Box::new(executor)).unwrap()
}

#[test]
fn a_rejected_submit_fails_the_step_frees_its_blocks_and_the_engine_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(3).write_gguf(&dir.path().join("tiny.gguf"), DType::Q8_0).unwrap();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(6) };
    let prompts = [vec![5, 6, 7], vec![9, 10, 11, 12, 13]];
    let expected = engine(dir.path(), FaultPlan::default()).generate(prompts.clone(), &params).unwrap();

    let fault = Fault { step: 3, kind: FaultKind::Transient };
    let mut engine = engine(dir.path(), FaultPlan::new([fault]));
    for prompt in &prompts {
        engine.add_request(prompt.clone(), params.clone()).unwrap();
    }
    assert!(engine.step().is_ok() && engine.step().is_ok());
    assert!(engine.scheduler().kv_cache_manager().usage() > 0.0);
    match engine.step() {
        Err(EngineError::StepFailed { source: ExecutorError::Device(message), outputs }) => {
            assert!(message.contains("Validation Error"), "{message}");
            let ends: Vec<_> = outputs.iter().map(|o| (o.request_id, o.finish_reason)).collect();
            assert_eq!(ends, vec![(0, Some(FinishReason::Error)), (1, Some(FinishReason::Error))]);
        }
        other => panic!("expected a failed step, got {other:?}"),
    }
    assert_eq!(engine.scheduler().kv_cache_manager().usage(), 0.0);
    assert!(!engine.has_unfinished_requests());
    let again = engine.generate(prompts, &params).unwrap();
    let tokens = |outputs: &[pagoda::CompletionOutput]| -> Vec<Vec<u32>> {
        outputs.iter().map(|o| o.token_ids.clone()).collect()
    };
    assert_eq!(tokens(&again), tokens(&expected));
}

#[test]
fn a_destroyed_device_fails_the_step_with_device_lost_and_stops_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(3).write_gguf(&dir.path().join("tiny.gguf"), DType::Q8_0).unwrap();
    let (cache, scheduler) = configs();
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    let executor = WgpuExecutor::new(ctx, &open(dir.path()), &cache, &scheduler, false).unwrap();
    let config =
        EngineConfig { cache: cache.clone(), scheduler: scheduler.clone(), ..EngineConfig::default() };
    let mut engine = Engine::with_executor(config, open(dir.path()), Box::new(executor)).unwrap();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(3) };
    assert_eq!(engine.generate([vec![5, 6, 7]], &params).unwrap()[0].token_ids.len(), 3);

    let mut executor = WgpuExecutor::new(
        GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap()).unwrap(),
        &open(dir.path()),
        &cache,
        &scheduler,
        false,
    )
    .unwrap();
    executor.context().lose_device();
    assert!(executor.context().device_lost().is_some());
    let config = EngineConfig { cache, scheduler, ..EngineConfig::default() };
    let mut probe =
        pagoda::core::scheduler::Scheduler::new(config.scheduler.clone(), config.cache.clone()).unwrap();
    let request = pagoda::Request::new(0, vec![5, 6, 7], params.clone(), None, 0.0);
    probe.add_request(request).unwrap();
    let error = executor.execute(&probe.schedule(), &mut StepMasks::none()).unwrap_err();
    assert!(matches!(error, ExecutorError::DeviceLost(_)), "{error:?}");

    let mut engine = Engine::with_executor(config, open(dir.path()), Box::new(executor)).unwrap();
    engine.add_request(vec![5, 6, 7], params.clone()).unwrap();
    match engine.step() {
        Err(EngineError::StepFailed { source, outputs }) => {
            assert!(source.is_device_lost(), "{source:?}");
            assert_eq!(outputs.len(), 1);
            assert_eq!(outputs[0].finish_reason, Some(FinishReason::Error));
        }
        other => panic!("expected a failed step, got {other:?}"),
    }
    assert_eq!(engine.scheduler().kv_cache_manager().usage(), 0.0);
    assert!(matches!(engine.add_request(vec![5], params), Err(EngineError::DeviceLost(_))));
}
