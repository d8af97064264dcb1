//! Fault injection behind the server: a failed step ends a streamed request with an error
//! event and a plain one with a 500, both in OpenAI's shape, and the server goes on; a
//! lost device makes `/health` and new requests answer 503 and `pagoda serve` exit non-zero.
#![cfg(feature = "server")]

mod engine_support;
mod server_support;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engine_support::tiny_model;
use pagoda::executor::fault::{Fault, FaultKind, FaultPlan};
use pagoda::executor::sim::{CostModel, SimConfig, SimExecutor};
use pagoda::model::testing::TinyLlama;
use pagoda::{Engine, EngineConfig};
use serde_json::{Value, json};
use server_support::{TestServer, parse_response, series};

/// A server on the simulated model whose `step`-th step fails with `kind`.
fn faulty_server(step: u64, kind: FaultKind) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimConfig { vocab_size: 275, eos_token_id: Some(2), seed: 1, cost: CostModel::default() };
    let executor = SimExecutor::new(sim).unwrap().with_faults(FaultPlan::new([Fault { step, kind }]));
    let engine = Engine::with_executor(EngineConfig::default(), tiny_model(dir.path()), Box::new(executor));
    TestServer::start(engine.unwrap())
}

fn body(stream: bool) -> Value {
    json!({"prompt": "hello", "max_tokens": 20, "ignore_eos": true, "stream": stream})
}

/// The `error` object of an OpenAI error body.
fn error_of(value: &Value) -> &Value {
    let error = &value["error"];
    assert!(error["message"].is_string(), "not an OpenAI error: {value}");
    error
}

/// Streams one completion and returns its last event before `[DONE]`.
fn last_streamed_event(server: &TestServer) -> Value {
    let (status, chunks) = server.post_stream("/v1/completions", &body(true));
    assert_eq!(status, 200);
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
    serde_json::from_str(&chunks[chunks.len() - 2]).unwrap()
}

#[test]
fn a_failed_step_ends_a_stream_with_an_error_event_and_the_server_goes_on() {
    let server = faulty_server(2, FaultKind::Transient);
    let event = last_streamed_event(&server);
    let error = error_of(&event);
    assert_eq!((error["type"].as_str(), error["code"].as_u64()), (Some("server_error"), Some(500)));

    let (status, answer) = server.post_json("/v1/completions", &body(false));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 20);
    assert_eq!(server.request("GET", "/health", None).0, 200);
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
    assert_eq!(server.metric(&series("num_requests_running", "")), 0.0);
}

#[test]
fn a_failed_step_answers_a_plain_request_with_a_500_and_the_server_goes_on() {
    let server = faulty_server(1, FaultKind::Transient);
    let (status, answer) = server.post_json("/v1/completions", &body(false));
    assert_eq!(status, 500);
    let error = error_of(&answer);
    assert_eq!((error["type"].as_str(), error["code"].as_u64()), (Some("server_error"), Some(500)));
    let (status, answer) = server.post_json(
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "ignore_eos": true
        }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
}

#[test]
fn a_lost_device_fails_the_stream_then_health_and_new_requests_answer_503() {
    let server = faulty_server(2, FaultKind::DeviceLost);
    let event = last_streamed_event(&server);
    assert_eq!(error_of(&event)["code"], 500);
    assert_eq!(
        server.state.engine().device_lost().as_deref(),
        Some("the device was lost: injected at step 2")
    );

    let (status, text) = server.request("GET", "/health", None);
    assert_eq!(status, 503);
    let health: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error_of(&health)["type"], "service_unavailable_error");
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let request =
            json!({"prompt": "hi", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
        let (status, answer) = server.post_json(path, &request);
        assert_eq!(status, 503, "{path}: {answer}");
        assert_eq!(error_of(&answer)["type"], "service_unavailable_error");
    }
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
}

#[test]
fn pagoda_serve_exits_non_zero_once_its_device_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--executor", "sim", "--sim-fault", "1:device-lost", "--port", &port.to_string()])
        .arg("--model")
        .arg(dir.path())
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline && child.try_wait().unwrap().is_none() => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => panic!("the server never listened: {error}"),
        }
    };
    let request = body(false).to_string();
    let mut stream = stream;
    std::io::Write::write_all(
        &mut stream,
        format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{request}",
            request.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    assert_eq!(parse_response(&raw).0, 500);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "pagoda serve did not exit after losing its device");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("the engine stopped: the device was lost: injected at step 1"), "{stderr}");
}
