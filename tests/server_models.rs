//! The server on real models through the wgpu executor (lavapipe without a GPU): concurrent
//! requests, streaming and not, give the library's outputs for the same seed; the tiny
//! random Llama and SmolLM2-135M-Instruct (a few tokens: lavapipe is slow).
#![cfg(feature = "server")]

mod server_support;

use pagoda::model::default_model_path;
use pagoda::model::testing::TinyLlama;
use pagoda::{CacheConfig, Engine, EngineConfig, ExecutorKind, Prompt, SamplingParams};
use serde_json::json;
use server_support::{MODEL, TestServer, sse_data};

fn wgpu_engine(model: std::path::PathBuf) -> Engine {
    let config = EngineConfig {
        model: Some(model),
        executor: ExecutorKind::Wgpu,
        cache: CacheConfig { num_gpu_blocks: 64, ..CacheConfig::default() },
        seed: 5,
        ..EngineConfig::default()
    };
    Engine::new(config).unwrap()
}

/// The streamed text of a completions SSE body.
fn streamed(chunks: &[String]) -> String {
    chunks[..chunks.len() - 1]
        .iter()
        .map(|chunk| serde_json::from_str::<serde_json::Value>(chunk).unwrap())
        .filter_map(|value| value["choices"][0]["text"].as_str().map(str::to_owned))
        .collect()
}

/// Three concurrent requests (two streamed) equal the library's completions.
fn check_server_matches_library(model: std::path::PathBuf, prompts: [&str; 3], params: [SamplingParams; 3]) {
    let mut library = wgpu_engine(model.clone());
    let expected: Vec<String> = prompts
        .iter()
        .zip(&params)
        .map(|(prompt, params)| library.generate([Prompt::from(*prompt)], params).unwrap().remove(0).text)
        .collect();
    drop(library);
    let server = TestServer::start(wgpu_engine(model));
    std::thread::scope(|scope| {
        for ((prompt, params), expected) in prompts.iter().zip(&params).zip(&expected) {
            let server = &server;
            scope.spawn(move || {
                let stream = params.seed == Some(2);
                let body = json!({
                    "model": MODEL, "prompt": prompt, "max_tokens": params.max_tokens,
                    "temperature": params.temperature, "seed": params.seed, "ignore_eos": true, "stream": stream,
                });
                if stream {
                    let (status, chunks) = server.post_stream("/v1/completions", &body);
                    assert_eq!(status, 200);
                    assert_eq!(&streamed(&chunks), expected);
                } else {
                    let (status, response) = server.post_json("/v1/completions", &body);
                    assert_eq!(status, 200, "{response}");
                    assert_eq!(response["choices"][0]["text"].as_str().unwrap(), expected);
                }
            });
        }
    });
}

fn params(temperature: f32, seed: u64, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: Some(seed),
        max_tokens,
        ignore_eos: true,
        ..SamplingParams::default()
    }
}

#[test]
fn tiny_model_server_equals_library() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(7).write_hf_dir(dir.path()).unwrap();
    check_server_matches_library(
        dir.path().to_owned(),
        ["the tower", "a cat is in the tower", "x"],
        [params(0.0, 1, 12), params(0.9, 2, 12), params(1.0, 3, 9)],
    );
}

#[test]
fn smollm2_server_equals_library() {
    let model = default_model_path().unwrap();
    check_server_matches_library(
        model,
        ["The capital of France is", "Once upon a time", "1, 2, 3,"],
        [params(0.0, 1, 4), params(0.8, 2, 4), params(0.8, 3, 3)],
    );
    let server = TestServer::start(wgpu_engine(default_model_path().unwrap()));
    let chat = json!({"messages": [{"role": "user", "content": "What is the capital of France?"}],
                      "temperature": 0, "max_tokens": 8, "stream": true});
    let (status, body) = server.request("POST", "/v1/chat/completions", Some(&chat.to_string()));
    assert_eq!(status, 200);
    let text: String = sse_data(&body)
        .iter()
        .filter(|chunk| *chunk != "[DONE]")
        .filter_map(|chunk| {
            let value: serde_json::Value = serde_json::from_str(chunk).unwrap();
            value["choices"][0]["delta"]["content"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "The capital of France is Paris.");
}
