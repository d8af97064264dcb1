//! Async scheduling on the GPU executor: the engine one step ahead produces the serial
//! loop's outputs token for token and bit for bit (tokens, text, logprobs, finish reasons):
//! greedy and seeded sampling, preemption on a tiny pool, prefix-cache hits, a stop string
//! and an abort mid-batch, and a constrained request in the batch; on the default model and
//! on two tiny families, and on two mixtures of experts (their decode steps routed on the
//! device). Steps whose tokens the host samples are recorded ahead and held for
//! them; LoRA steps pipeline too, adapters swapped in and out of one GPU slot.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pagoda::core::cache_config::KvCacheDtype;
use pagoda::executor::lora::LoraConfig;
use pagoda::model::default_model_path;
use pagoda::structured::Constraint;
use pagoda::{Engine, EngineBuilder, EngineConfig, FinishReason, Prompt, RequestId, SamplingParams};

/// A request: its prompt, how it samples, and its LoRA adapter.
type Req<'a> = (&'a str, SamplingParams, Option<&'a str>);

/// `requests` without adapters.
fn base(requests: &[(&'static str, SamplingParams)]) -> Vec<Req<'static>> {
    requests.iter().map(|(prompt, params)| (*prompt, params.clone(), None)).collect()
}

/// What one request produced, logprobs as their exact bits.
#[derive(Debug, Clone, PartialEq, Default)]
struct Done {
    tokens: Vec<u32>,
    text: String,
    logprob_bits: Vec<u32>,
    reason: Option<FinishReason>,
}

fn engine(model: PathBuf, async_scheduling: bool, blocks: usize) -> Engine {
    builder(EngineConfig::default(), model, async_scheduling, blocks)
        .build()
        .expect("engine on the GPU executor")
}

fn builder(config: EngineConfig, model: PathBuf, async_scheduling: bool, blocks: usize) -> EngineBuilder {
    EngineBuilder::from_config(config)
        .model(model)
        .block_size(4)
        .num_gpu_blocks(blocks)
        .kv_cache_dtype(KvCacheDtype::F32)
        .max_num_seqs(8)
        .max_num_batched_tokens(48)
        .max_model_len(256)
        .async_scheduling(async_scheduling)
        .show_progress(false)
}

/// Runs `requests` to the end, aborting the request at `abort.1` after step `abort.0`.
fn run(
    engine: &mut Engine,
    requests: &[Req<'_>],
    abort: Option<(usize, usize)>,
) -> BTreeMap<RequestId, Done> {
    let ids: Vec<RequestId> = requests
        .iter()
        .map(|(prompt, params, lora)| {
            let tokens = engine.encode_prompt(&Prompt::Text((*prompt).into())).unwrap();
            engine.add_tokens_request_with_lora(tokens, params.clone(), *lora).unwrap()
        })
        .collect();
    let mut done: BTreeMap<RequestId, Done> = BTreeMap::new();
    let mut steps = 0;
    while engine.has_unfinished_requests() {
        let mut outputs = engine.step().unwrap();
        steps += 1;
        if let Some((_, index)) = abort.filter(|&(at, _)| at == steps) {
            outputs.extend(engine.abort(ids[index]));
        }
        for output in outputs {
            let entry = done.entry(output.request_id).or_default();
            entry.tokens.extend(&output.new_token_ids);
            entry.text.push_str(&output.new_text);
            for logprobs in &output.new_logprobs {
                entry.logprob_bits.push(logprobs.logprob.to_bits());
                entry.logprob_bits.extend(logprobs.top.iter().map(|&(id, value)| id ^ value.to_bits()));
            }
            entry.reason = entry.reason.or(output.finish_reason);
        }
    }
    done
}

/// What the device did over a run: steps, those submitted to an idle device, and those held
/// for tokens the host sampled.
#[derive(Debug, Clone, Copy)]
struct DeviceSteps {
    steps: u64,
    idle_gaps: u64,
    held_steps: u64,
}

/// [`run`], with the device's steps over it.
fn run_counted(
    engine: &mut Engine,
    requests: &[Req<'_>],
    abort: Option<(usize, usize)>,
) -> (BTreeMap<RequestId, Done>, DeviceSteps) {
    let before = engine.device_counters().expect("a GPU executor counts its steps");
    let done = run(engine, requests, abort);
    let run = engine.device_counters().unwrap().since(&before);
    (done, DeviceSteps { steps: run.steps, idle_gaps: run.idle_gaps, held_steps: run.held_steps })
}

/// Runs `requests` serially and one step ahead and checks they agree bit for bit (the
/// aborted request's cut point aside); returns the serial outputs, both preemption counts and
/// both runs' device steps.
fn both_loops(
    model: PathBuf,
    blocks: usize,
    requests: &[Req<'_>],
    abort: Option<(usize, usize)>,
) -> (BTreeMap<RequestId, Done>, [u64; 2], [DeviceSteps; 2]) {
    both_engines(|ahead| engine(model.clone(), ahead, blocks), requests, abort)
}

/// [`both_loops`] on the engines `make(async_scheduling)` builds.
fn both_engines(
    make: impl Fn(bool) -> Engine,
    requests: &[Req<'_>],
    abort: Option<(usize, usize)>,
) -> (BTreeMap<RequestId, Done>, [u64; 2], [DeviceSteps; 2]) {
    let mut serial_engine = make(false);
    assert!(!serial_engine.async_scheduling());
    let (mut serial, serial_device) = run_counted(&mut serial_engine, requests, abort);
    assert_eq!(serial_device.held_steps, 0);
    let mut ahead_engine = make(true);
    assert!(ahead_engine.async_scheduling());
    let (mut ahead, ahead_device) = run_counted(&mut ahead_engine, requests, abort);
    if let Some((_, index)) = abort {
        let (s, a) =
            (serial.remove(&(index as RequestId)).unwrap(), ahead.remove(&(index as RequestId)).unwrap());
        assert_eq!((s.reason, a.reason), (Some(FinishReason::Abort), Some(FinishReason::Abort)));
    }
    assert_eq!(serial, ahead);
    let preemptions = [serial_engine.metrics(), ahead_engine.metrics()].map(|m| m.scheduler.num_preemptions);
    // The steps whose outputs came back (one ahead may still be in flight).
    for metrics in [serial_engine.metrics(), ahead_engine.metrics()] {
        let steps = metrics.host_overlap.steps;
        assert!(
            steps > 0 && steps <= metrics.scheduler.num_steps,
            "{steps} of {}",
            metrics.scheduler.num_steps
        );
    }
    // The serial loop reads every step back before it records the next: each starts on an
    // idle device.
    assert_eq!(serial_device.idle_gaps, serial_device.steps, "{serial_device:?}");
    (serial, preemptions, [serial_device, ahead_device])
}

fn family(name: &str) -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints")
        .join(name)
}

#[test]
fn the_default_model_one_step_ahead_matches_the_serial_loop_bit_for_bit() {
    let story = "<|im_start|>user\nTell me a short story about a cat.<|im_end|>\n<|im_start|>assistant\n";
    let capital = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let greedy = SamplingParams { logprobs: Some(2), ..SamplingParams::greedy(32) };
    let seeded =
        SamplingParams { temperature: 0.8, seed: Some(7), logprobs: Some(1), ..SamplingParams::greedy(32) };
    let stopped = SamplingParams { stop: vec![" cat".into()], ..SamplingParams::greedy(24) };
    let choice = Constraint::Choice(vec!["Paris".into(), "Lyon".into()]);
    let constrained = SamplingParams { structured_outputs: Some(choice), ..SamplingParams::greedy(8) };
    let requests = [
        (story, greedy.clone()),
        (story, seeded),
        (capital, greedy),
        (story, stopped),
        (capital, constrained),
        (capital, SamplingParams::greedy(24)),
    ];
    // 13 usable blocks of 4 tokens: the two long stories (about 49 tokens each, their first
    // four blocks shared) cannot run together.
    let model = default_model_path().expect("default model");
    let (serial, preemptions, [_, ahead]) = both_loops(model, 14, &base(&requests), Some((6, 5)));
    assert!(preemptions.iter().all(|&n| n > 0), "{preemptions:?}");
    // The seeded request's tokens are sampled on the host: the steps after them are held.
    assert!(ahead.held_steps > 0, "{ahead:?}");
    assert_eq!(serial[&3].reason, Some(FinishReason::Stop));
    assert!(serial[&3].tokens.len() < 24);
    assert!(["Paris", "Lyon"].contains(&serial[&4].text.as_str()), "{:?}", serial[&4].text);
}

#[test]
fn tiny_families_one_step_ahead_match_the_serial_loop_bit_for_bit() {
    let seeded =
        SamplingParams { temperature: 1.0, seed: Some(3), logprobs: Some(1), ..SamplingParams::greedy(20) };
    let greedy = SamplingParams { logprobs: Some(1), ..SamplingParams::greedy(20) };
    let nucleus = SamplingParams { top_p: 0.8, top_k: 20, temperature: 0.9, ..SamplingParams::greedy(16) };
    let penalized = SamplingParams {
        min_p: 0.05,
        repetition_penalty: 1.3,
        frequency_penalty: 0.4,
        temperature: 0.9,
        ..SamplingParams::greedy(16)
    };
    // A greedy pick the host makes from candidates (min_tokens masks the stop tokens).
    let held_back =
        SamplingParams { min_tokens: 8, stop_token_ids: vec![5, 6], ..SamplingParams::greedy(16) };
    let stopped = SamplingParams { stop: vec!["e".into()], ..nucleus.clone() };
    let requests = [("hello there", greedy.clone()), ("hello there", seeded), ("abc abc abc", greedy)];
    let (serial, _, _) = both_loops(family("gemma3"), 24, &base(&requests), None);
    assert!(serial.values().all(|done| done.tokens.len() == 20), "gemma3: {serial:?}");
    // Host-sampled variants on a pool that preempts: 9 usable blocks of 4 tokens for four
    // requests of up to 16; one aborted, one stopped by a string.
    let requests = [
        ("hello there", nucleus),
        ("hello there friend", penalized),
        ("one two", held_back),
        ("abc def", stopped),
    ];
    let (serial, preemptions, [_, ahead]) = both_loops(family("llama"), 10, &base(&requests), Some((6, 1)));
    assert!(preemptions.iter().all(|&n| n > 0), "{preemptions:?}");
    assert_eq!(serial[&0].tokens.len(), 16, "{serial:?}");
    // Every token is sampled on the host: a decode step is recorded while the one before it
    // runs and held until its tokens are written (a step after a preemption or a resumption
    // waits for the one before it instead).
    assert!(ahead.held_steps * 2 > ahead.steps, "{ahead:?}");
}

#[test]
fn greedy_steps_are_fed_on_the_device_and_match_the_serial_loop_bit_for_bit() {
    let story = "<|im_start|>user\nTell me a short story about a cat.<|im_end|>\n<|im_start|>assistant\n";
    let dog = "<|im_start|>user\nTell me a short story about a dog.<|im_end|>\n<|im_start|>assistant\n";
    let capital = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let stopped = SamplingParams { stop: vec![" cat".into()], ..SamplingParams::greedy(24) };
    // Plain greedy picks (the argmax the device keeps), a stop string and an abort mid-batch,
    // two prompts sharing their first blocks, on a pool too small for all of them at once.
    let requests = [
        (story, SamplingParams::greedy(28)),
        (dog, SamplingParams::greedy(28)),
        (capital, SamplingParams::greedy(20)),
        (story, stopped),
        (capital, SamplingParams::greedy(24)),
    ];
    let model = default_model_path().expect("default model");
    let (serial, preemptions, [_, ahead]) = both_loops(model, 16, &base(&requests), Some((5, 4)));
    assert!(preemptions.iter().all(|&n| n > 0), "{preemptions:?}");
    assert_eq!(serial[&3].reason, Some(FinishReason::Stop));
    assert_eq!(serial[&0].tokens.len(), 28);
    // One step ahead, most steps are submitted while the one before runs (their inputs read
    // from its sampled ids on the device): only a step after a preemption, a resumption or
    // the first of a run waits for the one before it.
    assert!(ahead.idle_gaps * 2 < ahead.steps, "{ahead:?}");
}

#[test]
fn lora_steps_pipeline_with_adapters_swapped_in_one_slot_and_match_the_serial_loop() {
    let lora = LoraConfig { max_loras: 1, max_lora_rank: 8, max_cpu_loras: 3 };
    let make = |ahead| {
        let config = EngineConfig { lora: Some(lora), ..EngineConfig::default() };
        let mut engine = builder(config, family("llama"), ahead, 40).build().expect("LoRA engine");
        for name in ["sql", "chat", "math"] {
            engine.load_lora(name, &family("llama").join("lora").join(name)).unwrap();
        }
        engine
    };
    let greedy = SamplingParams::greedy(10);
    let seeded = SamplingParams { temperature: 0.8, seed: Some(2), ..SamplingParams::greedy(10) };
    // One GPU slot: each adapter's requests run while the others wait, and a finishing
    // adapter's slot is refilled for the next step while the step in flight still reads it.
    let requests = [
        ("hello there", greedy.clone(), Some("sql")),
        ("hello there", greedy.clone(), Some("chat")),
        ("abc abc abc", seeded, Some("math")),
        ("hello there", greedy, None),
    ];
    let (serial, _, [_, ahead]) = both_engines(make, &requests, None);
    assert_ne!(serial[&0].tokens, serial[&1].tokens, "the adapters change the continuation");
    assert_ne!(serial[&0].tokens, serial[&3].tokens);
    // Greedy LoRA steps are fed on the device and submitted while the one before runs.
    assert!(ahead.idle_gaps < ahead.steps, "{ahead:?}");
    assert!(ahead.held_steps > 0, "{ahead:?}");
}

#[test]
fn moe_decode_steps_route_on_the_device_pipeline_and_match_the_serial_loop_bit_for_bit() {
    // Plain greedy picks on a pool that preempts (9 usable blocks of 4 tokens for four
    // requests of up to 16): prompts of more than 8 tokens read the router's choices back
    // and wait for the steps before them; decode steps of up to 8 tokens route on the device.
    let requests = [
        ("hello there", SamplingParams::greedy(16)),
        ("abc abc abc", SamplingParams::greedy(16)),
        ("one two", SamplingParams::greedy(14)),
        ("hello there friend", SamplingParams::greedy(16)),
    ];
    for name in ["qwen3-moe", "qwen2-moe"] {
        let (serial, preemptions, [_, ahead]) = both_loops(family(name), 10, &base(&requests), None);
        assert!(preemptions.iter().all(|&n| n > 0), "{name}: {preemptions:?}");
        assert_eq!(serial[&0].tokens.len(), 16, "{name}: {serial:?}");
        // most decode steps are submitted while the one before runs
        assert!(ahead.idle_gaps * 2 < ahead.steps, "{name}: {ahead:?}");
    }
    // Tokens the host samples (seeded, logprobs): the MoE step after them is recorded whole
    // and held for them.
    let seeded =
        SamplingParams { temperature: 0.9, seed: Some(5), logprobs: Some(1), ..SamplingParams::greedy(10) };
    let greedy = SamplingParams { logprobs: Some(2), ..SamplingParams::greedy(10) };
    let requests = [("hello there", seeded), ("abc abc abc", greedy)];
    let (_, _, [_, ahead]) = both_loops(family("qwen2-moe"), 24, &base(&requests), None);
    assert!(ahead.held_steps > 0, "{ahead:?}");
    // gpt-oss's biased experts route by id too (each pair adds its expert's rows of the
    // stacked biases): its decode steps are recorded whole and most run behind the one before.
    let requests = [("hello there", SamplingParams::greedy(12)), ("abc abc abc", SamplingParams::greedy(12))];
    let (serial, _, [_, ahead]) = both_loops(family("gpt-oss"), 24, &base(&requests), None);
    assert_eq!(serial[&0].tokens.len(), 12, "{serial:?}");
    assert!(ahead.idle_gaps * 2 < ahead.steps, "{ahead:?}");
}
