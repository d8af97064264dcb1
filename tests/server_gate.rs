//! The gate in front of `/v1/*`, `/tokenize` and `/detokenize`: an API key (401 in OpenAI's
//! error shape without it, `/health` and `/metrics` open), and a drain (503 for new requests,
//! `/health` unhealthy, requests in flight finish, or end with an error chunk at the deadline).
#![cfg(feature = "server")]

mod engine_support;
mod server_support;

use std::io::Read;
use std::time::Duration;

use engine_support::{random_logits, slow_engine};
use pagoda::EngineConfig;
use pagoda::server::ServerOptions;
use serde_json::{Value, json};
use server_support::{MODEL, TestServer, parse_response, read_until_data_contains, request_with, sse_data};

fn config() -> EngineConfig {
    EngineConfig { seed: 1, ..EngineConfig::default() }
}

fn completion(max_tokens: usize, stream: bool) -> String {
    json!({"model": MODEL, "prompt": "the tower", "max_tokens": max_tokens, "ignore_eos": true, "stream": stream})
        .to_string()
}

fn error_of(body: &str) -> Value {
    serde_json::from_str::<Value>(body).unwrap()["error"].clone()
}

#[test]
fn the_api_key_guards_v1_and_leaves_health_and_metrics_open() {
    let options = ServerOptions { api_key: Some("s3cret".into()), ..ServerOptions::default() };
    let server =
        TestServer::start_with(slow_engine(config(), Box::new(random_logits), Duration::ZERO), options);
    let body = completion(4, false);
    let refused: [&[&str]; 4] = [
        &[],
        &["Authorization: Bearer wrong"],
        &["Authorization: s3cret"],
        &["Authorization: Bearer s3cret2"],
    ];
    for headers in refused {
        let (status, text) = request_with(server.addr, "POST", "/v1/completions", Some(&body), headers);
        assert_eq!(status, 401, "{headers:?}");
        let error = error_of(&text);
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["code"], 401);
        assert_eq!(error["message"], "invalid or missing API key");
    }
    let (status, text) = request_with(server.addr, "GET", "/v1/models", None, &[]);
    assert_eq!((status, error_of(&text)["code"].clone()), (401, json!(401)));
    let key = ["Authorization: Bearer s3cret"];
    let (status, text) = request_with(server.addr, "POST", "/v1/completions", Some(&body), &key);
    assert_eq!(status, 200, "{text}");
    let response: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(response["usage"]["completion_tokens"], 4);
    assert_eq!(request_with(server.addr, "GET", "/v1/models", None, &key).0, 200);
    let tokenize = r#"{"prompt": "hi"}"#;
    assert_eq!(request_with(server.addr, "POST", "/tokenize", Some(tokenize), &[]).0, 401);
    assert_eq!(request_with(server.addr, "POST", "/tokenize", Some(tokenize), &key).0, 200);
    assert_eq!(server.request("GET", "/health", None).0, 200);
    assert_eq!(server.request("GET", "/metrics", None).0, 200);
}

#[test]
fn a_drain_refuses_new_requests_and_lets_those_in_flight_finish() {
    let server = TestServer::start(slow_engine(config(), Box::new(random_logits), Duration::from_millis(2)));
    let streams: Vec<_> = (0..4)
        .map(|_| {
            let stream = server.send("POST", "/v1/completions", Some(&completion(30, true)));
            read_until_data_contains(stream, "\"text\"")
        })
        .collect();
    let state = std::sync::Arc::clone(&server.state);
    let drain = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(state.drain(Duration::from_secs(600)))
    });
    while !server.state.is_draining() {
        std::thread::yield_now();
    }
    assert_eq!(server.request("GET", "/health", None).0, 503);
    let (status, text) = server.request("POST", "/v1/completions", Some(&completion(4, false)));
    assert_eq!(status, 503);
    assert_eq!(error_of(&text)["message"], "the server is shutting down");
    for mut reader in streams {
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        let chunks = sse_data(&rest);
        assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
        let last: Value = serde_json::from_str(&chunks[chunks.len() - 2]).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "length");
    }
    assert_eq!(drain.join().unwrap(), 0);
    assert_eq!(server.state.num_in_flight(), 0);
}

#[test]
fn past_the_deadline_a_drain_ends_streams_with_an_error_chunk() {
    let server = TestServer::start(slow_engine(config(), Box::new(random_logits), Duration::from_millis(2)));
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let stream = server.send("POST", "/v1/completions", Some(&completion(400, true)));
            read_until_data_contains(stream, "\"text\"")
        })
        .collect();
    let plain = server.send("POST", "/v1/completions", Some(&completion(400, false)));
    while server.state.engine().num_live_requests() < 4 {
        std::thread::yield_now();
    }
    assert_eq!(server.block_on(server.state.drain(Duration::ZERO)), 4);
    for mut reader in streams {
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        let chunks = sse_data(&rest);
        assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
        let error = error_of(&chunks[chunks.len() - 2]);
        assert_eq!(error["code"], 503);
        assert!(error["message"].as_str().unwrap().ends_with("was aborted (the server is shutting down)"));
    }
    let mut raw = Vec::new();
    let mut plain = plain;
    plain.read_to_end(&mut raw).unwrap();
    let (status, text) = parse_response(&raw);
    assert_eq!(status, 500, "{text}");
}
