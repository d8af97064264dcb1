//! Prompt logprobs over HTTP on SmolLM2 through the wgpu executor (lavapipe without a GPU):
//! vLLM's `prompt_logprobs` on both endpoints and OpenAI's `echo` (scoring with
//! `max_tokens: 0`), streamed or not, carry the library's values exactly.
#![cfg(feature = "server")]

mod server_support;

use pagoda::model::default_model_path;
use pagoda::sampling::PromptLogprobs;
use pagoda::{CacheConfig, ChatMessage, Engine, EngineConfig, ExecutorKind, Prompt, SamplingParams};
use serde_json::{Value, json};
use server_support::TestServer;

const PROMPT: &str = "The capital of France is";

fn wgpu_engine() -> Engine {
    let config = EngineConfig {
        model: Some(default_model_path().unwrap()),
        executor: ExecutorKind::Wgpu,
        cache: CacheConfig { num_gpu_blocks: 64, ..CacheConfig::default() },
        seed: 5,
        ..EngineConfig::default()
    };
    Engine::new(config).unwrap()
}

/// A JSON logprob as the f32 it was serialized from.
fn f32_of(value: &Value) -> f32 {
    value.as_f64().unwrap_or_else(|| panic!("{value} is not a number")) as f32
}

/// Checks vLLM's `prompt_logprobs` list against the library's, `top_n` alternatives each.
fn check_vllm_shape(list: &Value, expected: &PromptLogprobs, top_n: usize) {
    let list = list.as_array().unwrap_or_else(|| panic!("prompt_logprobs is {list}"));
    assert_eq!(list.len(), expected.len());
    assert!(list[0].is_null());
    for (position, (value, entry)) in list.iter().zip(expected).enumerate().skip(1) {
        let entry = entry.as_ref().unwrap();
        let position_map = value.as_object().unwrap();
        let own = &position_map[&entry.token_id.to_string()];
        assert_eq!(f32_of(&own["logprob"]).to_bits(), entry.logprob.to_bits(), "position {position}");
        assert!(own["decoded_token"].is_string());
        let in_top = entry.top.iter().take(top_n).position(|&(id, _)| id == entry.token_id);
        assert_eq!(own["rank"], json!(in_top.map_or(entry.rank, |index| index + 1)));
        for (rank, &(id, logprob)) in entry.top.iter().take(top_n).enumerate() {
            let alternative = &position_map[&id.to_string()];
            assert_eq!(f32_of(&alternative["logprob"]).to_bits(), logprob.to_bits());
            assert_eq!(alternative["rank"], json!(rank + 1));
        }
        assert_eq!(position_map.len(), top_n + usize::from(in_top.is_none()));
    }
}

/// The JSON chunks of a streamed request (without the closing `[DONE]`).
fn stream_chunks(server: &TestServer, body: &Value) -> Vec<Value> {
    let (status, data) = server.post_stream("/v1/completions", body);
    assert_eq!(status, 200, "{data:?}");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    data[..data.len() - 1].iter().map(|chunk| serde_json::from_str(chunk).unwrap()).collect()
}

#[test]
fn prompt_logprobs_and_echo_carry_the_librarys_values() {
    let mut library = wgpu_engine();
    let params = SamplingParams { prompt_logprobs: Some(2), logprobs: Some(2), ..SamplingParams::greedy(3) };
    let expected = library.generate([PROMPT], &params).unwrap().remove(0);
    let prompt_logprobs = expected.prompt_logprobs.clone().unwrap();
    assert_eq!(prompt_logprobs.len(), expected.prompt_token_ids.len());
    let chat = [ChatMessage::new("user", "Hi")];
    let chat_expected = library
        .generate(
            [Prompt::Chat(chat.to_vec())],
            &SamplingParams { prompt_logprobs: Some(1), ..SamplingParams::greedy(1) },
        )
        .unwrap()
        .remove(0);
    drop(library);

    let server = TestServer::start(wgpu_engine());
    // vLLM's prompt_logprobs on /v1/completions, beside a plain generation.
    let body = json!({"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "prompt_logprobs": 2});
    let (status, response) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["text"], expected.text.as_str());
    check_vllm_shape(&choice["prompt_logprobs"], &prompt_logprobs, 2);

    // echo with logprobs and max_tokens 0: the prompt scored, nothing generated.
    let body = json!({"prompt": PROMPT, "max_tokens": 0, "echo": true, "logprobs": 2, "temperature": 0});
    let (status, response) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["text"], PROMPT);
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(response["usage"]["completion_tokens"], 0);
    assert_eq!(response["usage"]["prompt_tokens"], json!(prompt_logprobs.len()));
    assert!(choice.get("prompt_logprobs").is_none());
    let logprobs = &choice["logprobs"];
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), prompt_logprobs.len());
    assert_eq!(logprobs["text_offset"][0], 0);
    assert!(logprobs["token_logprobs"][0].is_null() && logprobs["top_logprobs"][0].is_null());
    for (position, entry) in prompt_logprobs.iter().enumerate().skip(1) {
        let entry = entry.as_ref().unwrap();
        assert_eq!(f32_of(&logprobs["token_logprobs"][position]).to_bits(), entry.logprob.to_bits());
        assert_eq!(logprobs["top_logprobs"][position].as_object().unwrap().len(), 2);
    }

    // Streamed, the same values: the prompt and its logprobs in the choice's first chunk,
    // nothing generated, and usage without completion tokens.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = stream_chunks(&server, &streamed);
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    let first = &chunks[0]["choices"][0];
    assert_eq!((&first["text"], &first["finish_reason"]), (&json!(PROMPT), &json!("length")));
    assert_eq!(first["logprobs"], *logprobs);
    assert_eq!(chunks[1]["usage"]["completion_tokens"], 0);

    // echo while generating: the prompt, then the library's continuation and its logprobs.
    let body = json!({"prompt": PROMPT, "max_tokens": 3, "echo": true, "logprobs": 1, "temperature": 0});
    let (status, response) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["text"], format!("{PROMPT}{}", expected.text));
    let token_logprobs = choice["logprobs"]["token_logprobs"].as_array().unwrap();
    assert_eq!(token_logprobs.len(), prompt_logprobs.len() + 3);
    for (value, generated) in token_logprobs[prompt_logprobs.len()..].iter().zip(&expected.logprobs) {
        assert_eq!(f32_of(value).to_bits(), generated.logprob.to_bits());
    }
    let offsets = choice["logprobs"]["text_offset"].as_array().unwrap();
    assert!(offsets.windows(2).all(|pair| pair[0].as_u64() <= pair[1].as_u64()));
    // Streamed: the chunks put together are the same text, logprobs and offsets, and the first
    // chunk also carries vLLM's prompt_logprobs when asked.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["prompt_logprobs"] = json!(1);
    let chunks = stream_chunks(&server, &streamed);
    check_vllm_shape(&chunks[0]["choices"][0]["prompt_logprobs"], &prompt_logprobs, 1);
    let mut text = String::new();
    let mut joined: [Vec<Value>; 3] = Default::default();
    for chunk in &chunks {
        let choice = &chunk["choices"][0];
        text.push_str(choice["text"].as_str().unwrap());
        for (list, key) in joined.iter_mut().zip(["token_logprobs", "top_logprobs", "text_offset"]) {
            list.extend(choice["logprobs"][key].as_array().unwrap().iter().cloned());
        }
    }
    assert_eq!(text, choice["text"].as_str().unwrap());
    for (list, key) in joined.iter().zip(["token_logprobs", "top_logprobs", "text_offset"]) {
        assert_eq!(Value::from(list.clone()), choice["logprobs"][key], "{key}");
    }

    // vLLM's prompt_logprobs on /v1/chat/completions: the templated prompt's, at the top level.
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0,
                      "prompt_logprobs": 1});
    let (status, response) = server.post_json("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{response}");
    check_vllm_shape(&response["prompt_logprobs"], chat_expected.prompt_logprobs.as_ref().unwrap(), 1);
}
