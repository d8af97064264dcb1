//! The wgpu executor samples through `pagoda::sampling` on the tiny random model: a seeded
//! request draws the same tokens alone, batched and after preemption, and `min_tokens`
//! holds EOS and stop ids back on a model that wants to stop at once; `logit_bias` bans and
//! forces tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pagoda::dtype::DType;
use pagoda::engine::ExecutorKind;
use pagoda::model::testing::TinyLlama;
use pagoda::{
    CacheConfig, Engine, EngineConfig, FinishReason, KvCacheDtype, SamplingParams, SchedulerConfig,
};

const EOS: u32 = 2;

/// A wgpu engine on `model` with a pool of `num_gpu_blocks` blocks of 4 tokens.
fn engine(model: &Path, num_gpu_blocks: usize) -> Engine {
    let config = EngineConfig {
        model: Some(model.to_owned()),
        cache: CacheConfig {
            block_size: 4,
            num_gpu_blocks,
            kv_cache_dtype: KvCacheDtype::F32,
            ..Default::default()
        },
        scheduler: SchedulerConfig {
            max_num_batched_tokens: 32,
            max_num_seqs: 4,
            max_model_len: 64,
            ..Default::default()
        },
        executor: ExecutorKind::Wgpu,
        ..Default::default()
    };
    Engine::new(config).expect("a wgpu adapter (lavapipe in CI)")
}

/// Runs each `(prompt, params)` request to completion; outputs in request order.
fn run(engine: &mut Engine, requests: &[(Vec<u32>, SamplingParams)]) -> Vec<(Vec<u32>, FinishReason)> {
    let ids: Vec<_> = requests
        .iter()
        .map(|(prompt, params)| engine.add_tokens_request(prompt.clone(), params.clone()).unwrap())
        .collect();
    let mut outputs = vec![(Vec::new(), None); ids.len()];
    while engine.has_unfinished_requests() {
        for out in engine.step().unwrap() {
            let index = ids.iter().position(|&id| id == out.request_id).unwrap();
            outputs[index].0.extend_from_slice(&out.new_token_ids);
            outputs[index].1 = out.finish_reason.or(outputs[index].1);
        }
    }
    outputs.into_iter().map(|(tokens, reason)| (tokens, reason.unwrap())).collect()
}

fn tiny_gguf(dir: &Path, tiny: &TinyLlama) -> PathBuf {
    let path = dir.join("tiny.gguf");
    tiny.write_gguf(&path, DType::Q8_0).unwrap();
    path
}

#[test]
fn seeded_sampling_is_the_same_alone_batched_and_preempted() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_gguf(dir.path(), &TinyLlama::new(33));
    let sampled = |seed| SamplingParams {
        temperature: 0.8,
        seed: Some(seed),
        max_tokens: 12,
        ignore_eos: true,
        ..Default::default()
    };
    let prompt = vec![40, 41, 42, 43, 44, 45];
    let batch = vec![
        (vec![100, 101, 102, 103, 104, 105, 106], sampled(5)),
        (prompt.clone(), sampled(1234)),
        (vec![7, 8, 9, 10, 11], sampled(77)),
    ];

    let mut large = engine(&model, 64);
    let alone = run(&mut large, &[(prompt.clone(), sampled(1234))]).remove(0).0;
    let greedy = run(
        &mut large,
        &[(prompt.clone(), SamplingParams { ignore_eos: true, ..SamplingParams::greedy(12) })],
    );
    assert_eq!(alone.len(), 12);
    assert_ne!(alone, greedy[0].0, "temperature 0.8 must actually sample");
    assert_eq!(run(&mut large, &batch)[1].0, alone, "batched with two other requests");

    // 3 requests of up to 19 tokens need 15 blocks of 4; 9 usable blocks force preemption.
    let mut small = engine(&model, 10);
    let preempted = run(&mut small, &batch);
    assert!(small.metrics().scheduler.num_preemptions > 0, "the small pool must preempt");
    assert_eq!(preempted[1].0, alone, "after preemption and recompute");
    assert_eq!(preempted, run(&mut large, &batch), "every request, preempted or not");
}

#[test]
fn min_tokens_holds_back_eos_on_a_model_that_wants_to_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut tiny = TinyLlama::new(33);
    let prompt = vec![40, 41, 42, 43, 44, 45];
    let first =
        run(&mut engine(&tiny_gguf(dir.path(), &tiny), 64), &[(prompt.clone(), SamplingParams::greedy(1))]);
    // Make EOS's (tied) LM-head row three times the row of the greedy first token, so EOS
    // wins wherever that token had a positive logit.
    let favourite = first[0].0[0] as usize;
    let embed = tiny.tensors.iter_mut().find(|t| t.name == "model.embed_tokens.weight").unwrap();
    let h = embed.shape[1];
    let row: Vec<f32> = embed.values[favourite * h..(favourite + 1) * h].iter().map(|v| v * 3.0).collect();
    embed.values[EOS as usize * h..(EOS as usize + 1) * h].copy_from_slice(&row);
    let mut eos_prone = engine(&tiny_gguf(dir.path(), &tiny), 64);

    let greedy = SamplingParams::greedy(8);
    let sampled = SamplingParams { temperature: 0.8, seed: Some(3), ..SamplingParams::greedy(8) };
    let at_once = run(&mut eos_prone, &[(prompt.clone(), greedy.clone())]);
    assert_eq!(at_once[0], (vec![EOS], FinishReason::Stop), "the setup must stop at once");

    // The third masks more stop ids than the GPU gives greedy candidates: its full row.
    let many_stops: Vec<u32> = (EOS..EOS + 100).collect();
    let requests = [
        SamplingParams { min_tokens: 5, ..greedy.clone() },
        SamplingParams { min_tokens: 5, ..sampled },
        SamplingParams { min_tokens: 5, stop_token_ids: many_stops, ..greedy },
    ];
    let held = run(&mut eos_prone, &requests.clone().map(|params| (prompt.clone(), params)));
    for ((tokens, reason), params) in held.into_iter().zip(requests) {
        let ends = |t: &u32| *t == EOS || params.stop_token_ids.contains(t);
        assert!(tokens.len() >= 5, "{tokens:?}");
        assert!(!tokens[..5].iter().any(ends), "EOS or a stop id before min_tokens: {tokens:?}");
        assert!(tokens.len() == 8 || (reason == FinishReason::Stop && ends(tokens.last().unwrap())));
    }
}

#[test]
fn logit_bias_bans_and_forces_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine(&tiny_gguf(dir.path(), &TinyLlama::new(33)), 64);
    let prompt = vec![40, 41, 42, 43, 44, 45];
    let greedy = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(6) };
    let plain = run(&mut engine, &[(prompt.clone(), greedy.clone())]).remove(0).0;

    let banned: BTreeMap<u32, f32> = plain.iter().map(|&id| (id, -100.0)).collect();
    let forced = BTreeMap::from([(77, 100.0)]);
    let outputs = run(
        &mut engine,
        &[
            (prompt.clone(), SamplingParams { logit_bias: banned.clone(), ..greedy.clone() }),
            (prompt.clone(), greedy.clone()),
            (prompt.clone(), SamplingParams { logit_bias: forced, temperature: 0.8, ..greedy }),
        ],
    );
    assert_eq!(outputs[0].0.len(), 6);
    assert!(!outputs[0].0.iter().any(|id| banned.contains_key(id)), "{:?} uses a banned token", outputs[0].0);
    assert_eq!(outputs[1].0, plain, "a request without a bias in the same batch");
    assert_eq!(outputs[2].0, vec![77; 6]);
}
