//! The engine end to end on the tiny model's tokenizer and a logits-function executor:
//! text, stops, sampling, penalties, errors, aborts, preemption and metrics, all exact.

mod engine_support;

use engine_support::{EOS, VOCAB, byte_tokens, engine, random_logits, scripted_logits, tiny_tokenizer};
use pagoda::core::scheduler::AddRequestError;
use pagoda::sampling::SamplingParamsError;
use pagoda::{
    ChatMessage, CompletionOutput, Engine, EngineConfig, EngineError, FinishReason, Prompt, SamplingParams,
    TokenId,
};

fn config() -> EngineConfig {
    EngineConfig { seed: 1, ..EngineConfig::default() }
}

/// Adds every request, steps to the end, and returns completions in input order.
fn run_all(engine: &mut Engine, requests: &[(&str, SamplingParams)]) -> Vec<CompletionOutput> {
    let mut completions: Vec<CompletionOutput> = requests
        .iter()
        .map(|(prompt, params)| {
            let ids = engine.encode_prompt(&Prompt::from(*prompt)).unwrap();
            let id = engine.add_tokens_request(ids.clone(), params.clone()).unwrap();
            CompletionOutput::new(id, ids)
        })
        .collect();
    while engine.has_unfinished_requests() {
        for output in engine.step().unwrap() {
            let completion = completions.iter_mut().find(|c| c.request_id == output.request_id).unwrap();
            completion.extend(&output);
        }
    }
    completions
}

/// A logits row with `favourites` at descending logits 5, 4, 3, ... and 0 elsewhere.
fn fixed_logits(favourites: Vec<TokenId>) -> engine_support::LogitsFn {
    Box::new(move |_, _| {
        let mut logits = vec![0.0; VOCAB];
        for (rank, &token) in favourites.iter().enumerate() {
            logits[token as usize] = 5.0 - rank as f32;
        }
        logits[EOS as usize] = -8.0;
        logits
    })
}

#[test]
fn a_stop_string_across_tokens_ends_the_text_exactly() {
    let script = byte_tokens("Hello, wörld! END more");
    let mut engine = engine(config(), scripted_logits(script.clone()));
    let params = SamplingParams { stop: vec!["END".into()], ..SamplingParams::greedy(64) };
    let out = engine.generate(["hi"], &params).unwrap().remove(0);
    assert_eq!(out.text, "Hello, wörld! ");
    assert_eq!(out.finish_reason, Some(FinishReason::Stop));
    assert_eq!(out.token_ids, script[.."Hello, wörld! END".len()]);
    assert_eq!(engine.metrics().scheduler.kv_cache_usage, 0.0);
    assert!(!engine.has_unfinished_requests());
}

#[test]
fn include_stop_str_in_output_keeps_the_stop_string() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("Hello END more")));
    let params = SamplingParams {
        stop: vec!["END".into()],
        include_stop_str_in_output: true,
        ..SamplingParams::greedy(64)
    };
    assert_eq!(engine.generate(["hi"], &params).unwrap()[0].text, "Hello END");
}

#[test]
fn eos_ends_with_stop_and_stays_out_of_the_text() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("ok")));
    let params = SamplingParams { skip_special_tokens: false, ..SamplingParams::greedy(10) };
    let out = engine.generate(["hi"], &params).unwrap().remove(0);
    let mut expected = byte_tokens("ok");
    expected.push(EOS);
    assert_eq!(out.token_ids, expected);
    assert_eq!(out.text, "ok");
    assert_eq!(out.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn max_tokens_ends_with_length() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("abcdef")));
    let out = engine.generate(["hi"], &SamplingParams::greedy(3)).unwrap().remove(0);
    assert_eq!(out.text, "abc");
    assert_eq!(out.finish_reason, Some(FinishReason::Length));
}

#[test]
fn streamed_text_never_splits_a_character() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("añ€😀z")));
    engine.add_request("hi", SamplingParams::greedy(20)).unwrap();
    let mut pieces = Vec::new();
    while engine.has_unfinished_requests() {
        pieces.extend(engine.step().unwrap().into_iter().map(|output| output.new_text));
    }
    assert_eq!(pieces, ["a", "", "ñ", "", "", "€", "", "", "", "😀", "z", ""]);
}

#[test]
fn min_tokens_keeps_eos_away() {
    let x = byte_tokens("x")[0];
    let logits: engine_support::LogitsFn = Box::new(move |_, _| {
        let mut logits = vec![0.0; VOCAB];
        logits[EOS as usize] = 10.0;
        logits[x as usize] = 5.0;
        logits
    });
    let mut engine = engine(config(), logits);
    let params = SamplingParams { min_tokens: 2, ..SamplingParams::greedy(10) };
    let out = engine.generate(["hi"], &params).unwrap().remove(0);
    assert_eq!(out.token_ids, [x, x, EOS]);
    assert_eq!(out.text, "xx");
}

#[test]
fn seeded_sampling_repeats_alone_and_batched() {
    let params = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed: Some(seed),
        max_tokens: 24,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let alone = run_all(&mut engine(config(), Box::new(random_logits)), &[("the tower", params(1234))]);
    let again = run_all(&mut engine(config(), Box::new(random_logits)), &[("the tower", params(1234))]);
    let chunked = EngineConfig {
        scheduler: pagoda::SchedulerConfig { max_num_batched_tokens: 5, ..Default::default() },
        ..config()
    };
    let batched = run_all(
        &mut engine(chunked, Box::new(random_logits)),
        &[("a cat", params(1)), ("the tower", params(1234)), ("is in", params(2))],
    );
    assert_eq!(alone[0].token_ids.len(), 24);
    assert_eq!(alone[0].token_ids, again[0].token_ids);
    assert_eq!(alone[0].token_ids, batched[1].token_ids);
    assert_eq!(alone[0].text, batched[1].text);
    assert_ne!(batched[0].token_ids, batched[2].token_ids);
    let greedy = run_all(
        &mut engine(config(), Box::new(random_logits)),
        &[("the tower", SamplingParams { ignore_eos: true, ..SamplingParams::greedy(24) })],
    );
    assert_ne!(alone[0].token_ids, greedy[0].token_ids);
}

#[test]
fn unseeded_requests_follow_the_engine_seed() {
    let params = SamplingParams { max_tokens: 16, ignore_eos: true, ..SamplingParams::default() };
    let run = |seed| {
        let mut engine = engine(EngineConfig { seed, ..config() }, Box::new(random_logits));
        engine.generate(["x", "y"], &params).unwrap().into_iter().map(|c| c.token_ids).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn top_k_one_equals_greedy() {
    let sampled =
        SamplingParams { top_k: 1, seed: Some(3), max_tokens: 20, ignore_eos: true, ..Default::default() };
    let greedy = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(20) };
    let prompts = ["one", "two words", "three little words"];
    let a = engine(config(), Box::new(random_logits)).generate(prompts, &sampled).unwrap();
    let b = engine(config(), Box::new(random_logits)).generate(prompts, &greedy).unwrap();
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a.token_ids, b.token_ids);
    }
}

#[test]
fn penalties_steer_greedy_decoding_exactly() {
    let favourites = byte_tokens("abc");
    let run = |prompt: &str, params: SamplingParams| {
        let mut engine = engine(config(), fixed_logits(favourites.clone()));
        engine.generate([prompt], &params).unwrap().remove(0).text
    };
    assert_eq!(run("zz", SamplingParams::greedy(6)), "aaaaaa");
    let frequency = SamplingParams { frequency_penalty: 1.5, ..SamplingParams::greedy(6) };
    assert_eq!(run("zz", frequency), "abacba");
    let presence = SamplingParams { presence_penalty: 2.0, ..SamplingParams::greedy(6) };
    assert_eq!(run("zz", presence), "abaaaa");
    let repetition = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy(6) };
    assert_eq!(run("a", repetition), "bcaaaa");
}

#[test]
fn logprobs_are_returned_per_token() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("hey")));
    let params = SamplingParams { logprobs: Some(3), ..SamplingParams::greedy(3) };
    let out = engine.generate(["hi"], &params).unwrap().remove(0);
    assert_eq!(out.logprobs.len(), 3);
    for (logprobs, &token) in out.logprobs.iter().zip(&out.token_ids) {
        assert_eq!(logprobs.top.len(), 3);
        assert_eq!(logprobs.top[0].0, token);
        assert_eq!(logprobs.logprob, logprobs.top[0].1);
    }
}

#[test]
fn chat_prompts_use_the_template() {
    let engine = engine(config(), Box::new(random_logits));
    let chat = Prompt::Chat(vec![ChatMessage::new("user", "hi")]);
    let expected =
        tiny_tokenizer().encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    assert_eq!(engine.encode_prompt(&chat).unwrap(), expected);
    assert_eq!(expected[0], 1);
}

#[test]
fn bad_requests_get_typed_errors() {
    let mut engine = engine(config(), Box::new(random_logits));
    let bad_temperature = SamplingParams { temperature: -1.0, ..Default::default() };
    assert!(matches!(
        engine.add_request("hi", bad_temperature),
        Err(EngineError::InvalidParams(SamplingParamsError::Temperature(-1.0)))
    ));
    assert!(matches!(
        engine.add_request(vec![999], SamplingParams::default()),
        Err(EngineError::TokenOutOfVocab { id: 999, vocab_size: VOCAB })
    ));
    let bad_bias = SamplingParams { logit_bias: [(3, 1.0), (999, -5.0)].into(), ..Default::default() };
    assert!(matches!(
        engine.add_request("hi", bad_bias),
        Err(EngineError::BiasOutOfVocab { id: 999, vocab_size: VOCAB })
    ));
    assert!(matches!(
        engine.add_request(Vec::<TokenId>::new(), SamplingParams::default()),
        Err(EngineError::Rejected(AddRequestError::EmptyPrompt(_)))
    ));
    assert!(matches!(
        engine.add_request(vec![5; 600], SamplingParams::default()),
        Err(EngineError::Rejected(AddRequestError::PromptTooLong {
            prompt_len: 600,
            max_model_len: 512,
            ..
        }))
    ));
    assert!(!engine.has_unfinished_requests());
}

#[test]
fn a_full_waiting_queue_refuses_new_requests() {
    let mut engine =
        engine(EngineConfig { max_waiting_requests: Some(2), ..config() }, Box::new(random_logits));
    engine.add_request("a", SamplingParams::greedy(4)).unwrap();
    engine.add_request("b", SamplingParams::greedy(4)).unwrap();
    assert!(matches!(
        engine.add_request("c", SamplingParams::greedy(4)),
        Err(EngineError::Overloaded { waiting: 2, limit: 2 })
    ));
    engine.step().unwrap();
    engine.add_request("c", SamplingParams::greedy(4)).unwrap();
}

#[test]
fn abort_frees_the_blocks_and_ends_with_abort() {
    let mut engine = engine(config(), Box::new(random_logits));
    let id = engine
        .add_request(vec![7; 40], SamplingParams { ignore_eos: true, ..SamplingParams::greedy(50) })
        .unwrap();
    engine.step().unwrap();
    engine.step().unwrap();
    assert!(engine.metrics().scheduler.kv_cache_usage > 0.0);
    let last = engine.abort(id).unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::Abort));
    assert_eq!(last.num_output_tokens, 2);
    assert_eq!(engine.metrics().scheduler.kv_cache_usage, 0.0);
    assert!(!engine.has_unfinished_requests());
    assert_eq!(engine.abort(id), None);
    assert_eq!(engine.metrics().finished.abort, 1);
}

#[test]
fn preemption_does_not_change_seeded_outputs() {
    let params =
        |seed| SamplingParams { seed: Some(seed), max_tokens: 40, ignore_eos: true, ..Default::default() };
    let requests: Vec<(&str, SamplingParams)> =
        ["first prompt here", "second one", "the third prompt", "4th"]
            .into_iter()
            .zip(10..)
            .map(|(prompt, seed)| (prompt, params(seed)))
            .collect();
    let roomy = run_all(&mut engine(config(), Box::new(random_logits)), &requests);
    let small_pool =
        EngineConfig { cache: pagoda::CacheConfig { num_gpu_blocks: 8, ..Default::default() }, ..config() };
    let mut tight_engine = engine(small_pool, Box::new(random_logits));
    let tight = run_all(&mut tight_engine, &requests);
    assert!(tight_engine.metrics().scheduler.num_preemptions > 0);
    for (roomy, tight) in roomy.iter().zip(&tight) {
        assert_eq!(roomy.token_ids, tight.token_ids);
        assert_eq!(roomy.text, tight.text);
    }
}

#[test]
fn metrics_count_tokens_requests_and_latencies() {
    let mut engine = engine(config(), scripted_logits(byte_tokens("abcd")));
    let outs = engine
        .generate(["one", "two two"], &SamplingParams { max_tokens: 3, ..SamplingParams::greedy(3) })
        .unwrap();
    let metrics = engine.metrics();
    let prompt_tokens: usize = outs.iter().map(|o| o.prompt_token_ids.len()).sum();
    assert_eq!(metrics.prompt_tokens, prompt_tokens as u64);
    assert_eq!(metrics.generation_tokens, 6);
    assert_eq!(metrics.finished.length, 2);
    assert_eq!(metrics.time_to_first_token.count, 2);
    assert_eq!(metrics.inter_token_latency.count, 4);
    assert_eq!(metrics.e2e_request_latency.count, 2);
    assert_eq!(metrics.scheduler.num_running, 0);
}
