//! The server on the tiny Gemma 2 and Mistral models (`PAGODA_FAMILIES_DIR`), whose chat
//! templates refuse a system turn (Gemma 2), tools, tool calls and results, and turns that
//! do not alternate: a system message, a forced tool call and a tool round trip all answer
//! 200, the call valid, and `/tokenize` renders as the completion does.
#![cfg(feature = "server")]

mod server_support;

use std::path::PathBuf;

use pagoda::{CacheConfig, Engine, EngineConfig, ExecutorKind};
use serde_json::{Value, json};
use server_support::TestServer;

fn server(family: &str) -> TestServer {
    let dir = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).expect("PAGODA_FAMILIES_DIR");
    let config = EngineConfig {
        model: Some(dir.join(family)),
        executor: ExecutorKind::Wgpu,
        cache: CacheConfig { num_gpu_blocks: 64, ..CacheConfig::default() },
        ..EngineConfig::default()
    };
    TestServer::start(Engine::new(config).unwrap())
}

/// A tool whose only argument is one of two words, so a forced call is short (a random
/// model would otherwise write keys until `max_tokens`).
fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]}}, "required": ["unit"],
        "additionalProperties": false}}}])
}

fn check_family(family: &str) {
    let server = server(family);
    let system = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]);
    let (status, reply) = server
        .post_json("/v1/chat/completions", &json!({"messages": system, "max_tokens": 3, "temperature": 0}));
    assert_eq!(status, 200, "{family}, system message: {reply}");
    let (_, tokenized) = server.post_json("/tokenize", &json!({"messages": system}));
    assert_eq!(
        reply["usage"]["prompt_tokens"], tokenized["count"],
        "{family}: /tokenize renders the same prompt"
    );

    let ask = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]);
    let forced = json!({"messages": ask, "tools": tools(), "tool_choice": "required", "max_tokens": 60, "temperature": 0});
    let (status, reply) = server.post_json("/v1/chat/completions", &forced);
    assert_eq!(status, 200, "{family}, forced call: {reply}");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{family}: {reply}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["celsius", "kelvin"].contains(&arguments["unit"].as_str().unwrap()), "{family}: {arguments}");

    let mut round_trip = ask.as_array().unwrap().clone();
    round_trip.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    round_trip.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "{\"sky\": \"clear\"}"}));
    let answer = json!({"messages": round_trip, "tools": tools(), "max_tokens": 3, "temperature": 0});
    let (status, reply) = server.post_json("/v1/chat/completions", &answer);
    assert_eq!(status, 200, "{family}, tool result: {reply}");

    let assistant_first =
        json!({"messages": [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Hi"}]});
    let (status, reply) = server.post_json("/v1/chat/completions", &assistant_first);
    assert_eq!(status, 400, "{family}: {reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("does not support a conversation whose first turn"), "{family}: {message}");
}

#[test]
fn gemma2_answers_system_messages_and_tool_calls() {
    check_family("gemma2");
}

#[test]
fn mistral_answers_system_messages_and_tool_calls() {
    check_family("mistral");
}
