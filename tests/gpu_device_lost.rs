//! A lost device on the wgpu executor (destroyed on lavapipe, as a driver reset would
//! lose it): the step fails with `DeviceLost`, never a panic, and the engine ends every
//! live request with an error and refuses further work.

use std::path::Path;

use pagoda::config::{CacheConfig, KvCacheDtype, SchedulerConfig};
use pagoda::dtype::DType;
use pagoda::executor::wgpu::WgpuExecutor;
use pagoda::executor::{ExecutorError, ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::ModelFiles;
use pagoda::model::testing::TinyLlama;
use pagoda::{Engine, EngineConfig, EngineError, FinishReason, SamplingParams};

fn open(dir: &Path) -> ModelFiles {
    ModelFiles::open(dir.join("tiny.gguf")).unwrap()
}

#[test]
fn a_destroyed_device_fails_the_step_with_device_lost_and_stops_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(3).write_gguf(&dir.path().join("tiny.gguf"), DType::Q8_0).unwrap();
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
    let ctx = GpuContext::new(&GpuOptions::default()).expect("a wgpu adapter (lavapipe in CI)");
    let executor = WgpuExecutor::new(ctx, &open(dir.path()), &cache, &scheduler, false).unwrap();
    let config =
        EngineConfig { cache: cache.clone(), scheduler: scheduler.clone(), ..EngineConfig::default() };
    let mut engine = Engine::with_executor(config, open(dir.path()), Box::new(executor)).unwrap();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(3) };
    assert_eq!(engine.generate([vec![5, 6, 7]], &params).unwrap()[0].token_ids.len(), 3);

    let mut executor = WgpuExecutor::new(
        GpuContext::new(&GpuOptions::default()).unwrap(),
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
