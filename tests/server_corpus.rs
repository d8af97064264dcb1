//! A corpus of malformed and hostile HTTP bodies, each answered with exactly the status,
//! OpenAI error type and blamed parameter expected — and the server still serves after.
#![cfg(feature = "server")]

mod engine_support;
mod replica_support;
mod server_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use engine_support::{engine, random_logits};
use pagoda::server::limits::ServerLimits;
use pagoda::{EngineConfig, SchedulerConfig};
use replica_support::{Replica, write_tiny_model};
use serde_json::{Value, json};
use server_support::{TestServer, parse_response};

const BODY_LIMIT: usize = 64 << 10;

/// Expected answer: status, OpenAI error type, blamed parameter.
type Expected = (u16, &'static str, Option<&'static str>);

const BODY: Expected = (400, "invalid_request_error", Some("body"));
const SAMPLING: Expected = (400, "invalid_request_error", Some("sampling"));
const NO_PARAM: Expected = (400, "invalid_request_error", None);
const TOO_LARGE: Expected = (413, "invalid_request_error", None);

fn param(name: &'static str) -> Expected {
    (400, "invalid_request_error", Some(name))
}

fn completion(extra: Value) -> Vec<u8> {
    let mut body = json!({"prompt": "hello", "max_tokens": 4});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body.to_string().into_bytes()
}

fn chat(extra: Value) -> Vec<u8> {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body.to_string().into_bytes()
}

fn text(body: &str) -> Vec<u8> {
    body.as_bytes().to_vec()
}

fn cases() -> Vec<(&'static str, &'static str, Vec<u8>, Expected)> {
    let c = "/v1/completions";
    let ch = "/v1/chat/completions";
    let many_stops: Vec<String> = (0..65).map(|i| format!("s{i}")).collect();
    vec![
        ("empty body", c, vec![], BODY),
        ("unclosed object", c, text("{"), BODY),
        ("null", c, text("null"), BODY),
        ("an array", c, text("[]"), BODY),
        ("no prompt", c, text("{}"), BODY),
        ("prompt a number", c, completion(json!({"prompt": 5})), BODY),
        ("prompt an object", c, completion(json!({"prompt": {"text": "hi"}})), BODY),
        ("prompt empty list", c, completion(json!({"prompt": []})), param("prompt")),
        ("prompt an empty token list", c, completion(json!({"prompt": [[]]})), NO_PARAM),
        ("prompt token out of vocabulary", c, completion(json!({"prompt": [999_999]})), NO_PARAM),
        ("prompt token negative", c, completion(json!({"prompt": [-1]})), BODY),
        ("prompt token 1e20", c, completion(json!({"prompt": [1e20]})), BODY),
        ("prompt longer than max_model_len", c, completion(json!({"prompt": vec![7; 300]})), NO_PARAM),
        ("max_tokens 0", c, completion(json!({"max_tokens": 0})), SAMPLING),
        ("max_tokens -1", c, completion(json!({"max_tokens": -1})), BODY),
        ("max_tokens 1e30", c, completion(json!({"max_tokens": 1e30})), BODY),
        ("max_tokens a string", c, completion(json!({"max_tokens": "5"})), BODY),
        ("temperature -1", c, completion(json!({"temperature": -1})), SAMPLING),
        ("temperature a string", c, completion(json!({"temperature": "hot"})), BODY),
        ("top_p 0", c, completion(json!({"top_p": 0})), SAMPLING),
        ("top_p 1.5", c, completion(json!({"top_p": 1.5})), SAMPLING),
        ("top_k -2", c, completion(json!({"top_k": -2})), SAMPLING),
        ("top_k 2^40", c, completion(json!({"top_k": 1u64 << 40})), BODY),
        ("min_p 2", c, completion(json!({"min_p": 2})), SAMPLING),
        ("repetition_penalty 0", c, completion(json!({"repetition_penalty": 0})), SAMPLING),
        ("presence_penalty 3", c, completion(json!({"presence_penalty": 3})), SAMPLING),
        ("frequency_penalty -3", c, completion(json!({"frequency_penalty": -3})), SAMPLING),
        ("n 0", c, completion(json!({"n": 0})), param("n")),
        ("n 65", c, completion(json!({"n": 65})), param("n")),
        ("n -1", c, completion(json!({"n": -1})), BODY),
        ("logprobs 100", c, completion(json!({"logprobs": 100})), SAMPLING),
        ("an empty stop string", c, completion(json!({"stop": [""]})), SAMPLING),
        ("65 stop strings", c, completion(json!({"stop": many_stops})), param("stop")),
        ("a stop string of 2000 bytes", c, completion(json!({"stop": "x".repeat(2000)})), param("stop")),
        ("stop a number", c, completion(json!({"stop": 5})), BODY),
        (
            "2000 stop token ids",
            c,
            completion(json!({"stop_token_ids": vec![3; 2000]})),
            param("stop_token_ids"),
        ),
        ("min_tokens above max_tokens", c, completion(json!({"min_tokens": 10})), SAMPLING),
        (
            "bad_words, unknown and answer-changing",
            c,
            completion(json!({"bad_words": ["x"]})),
            param("bad_words"),
        ),
        ("suffix", c, completion(json!({"suffix": "x"})), param("suffix")),
        ("best_of 3", c, completion(json!({"best_of": 3})), param("best_of")),
        ("logit_bias key not an id", c, completion(json!({"logit_bias": {"one": 5}})), param("logit_bias")),
        ("logit_bias value a string", c, completion(json!({"logit_bias": {"1": "5"}})), param("logit_bias")),
        ("logit_bias value null", c, completion(json!({"logit_bias": {"1": null}})), param("logit_bias")),
        (
            "response_format xml",
            c,
            completion(json!({"response_format": {"type": "xml"}})),
            param("response_format"),
        ),
        (
            "json_schema without schema",
            ch,
            chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})),
            param("response_format"),
        ),
        (
            "schema of an unknown type",
            ch,
            chat(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}}}),
            ),
            param("response_format"),
        ),
        ("unclosed regex", c, completion(json!({"guided_regex": "(a"})), param("guided_regex")),
        (
            "grammar without its rule",
            c,
            completion(json!({"structured_outputs": {"grammar": "start: nope\n"}})),
            param("structured_outputs"),
        ),
        (
            "empty structured_outputs",
            c,
            completion(json!({"structured_outputs": {}})),
            param("structured_outputs"),
        ),
        (
            "two structured_outputs",
            c,
            completion(json!({"structured_outputs": {"regex": "a", "choice": ["a"]}})),
            param("structured_outputs"),
        ),
        ("empty guided_choice", c, completion(json!({"guided_choice": []})), param("guided_choice")),
        (
            "response_format and guided_regex",
            ch,
            chat(json!({"response_format": {"type": "json_object"}, "guided_regex": "a+"})),
            param("guided_regex"),
        ),
        (
            "tool_choice naming no tool",
            ch,
            chat(
                json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            ),
            param("tool_choice"),
        ),
        (
            "tool_choice required without tools",
            ch,
            chat(json!({"tool_choice": "required"})),
            param("tool_choice"),
        ),
        ("a tool that is not a function", ch, chat(json!({"tools": [{"type": "retrieval"}]})), BODY),
        (
            "tool call arguments that are not JSON",
            ch,
            chat(
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{"}}]}]}),
            ),
            param("messages"),
        ),
        ("another model", c, completion(json!({"model": "gpt-4"})), (404, "not_found_error", Some("model"))),
        ("10 prompts × n 30", c, completion(json!({"prompt": vec!["a"; 10], "n": 30})), param("n")),
        (
            "n 64 × max_tokens 20000",
            c,
            completion(json!({"n": 64, "max_tokens": 20000})),
            param("max_tokens"),
        ),
        ("stream a string", c, completion(json!({"stream": "yes"})), BODY),
        ("seed 2^63", c, text(r#"{"prompt": "a", "seed": 9223372036854775808}"#), BODY),
        ("seed 1.5", c, completion(json!({"seed": 1.5})), BODY),
        ("stream_options a list", c, completion(json!({"stream_options": [1]})), BODY),
        ("body over the limit", c, completion(json!({"prompt": "x".repeat(BODY_LIMIT)})), TOO_LARGE),
        ("invalid UTF-8", c, [b"{\"prompt\": \"".to_vec(), vec![0xff, 0xfe], b"\"}".to_vec()].concat(), BODY),
        ("nested 20000 deep", c, [vec![b'['; 20_000], vec![b']'; 20_000]].concat(), BODY),
        (
            "a number of 10000 digits",
            c,
            format!("{{\"max_tokens\": {}}}", "9".repeat(10_000)).into_bytes(),
            BODY,
        ),
        ("chat: empty object", ch, text("{}"), BODY),
        ("chat: no messages", ch, chat(json!({"messages": []})), param("messages")),
        ("chat: top_logprobs without logprobs", ch, chat(json!({"top_logprobs": 2})), param("top_logprobs")),
        ("chat: messages a string", ch, chat(json!({"messages": "hi"})), BODY),
        ("chat: a message without role", ch, chat(json!({"messages": [{"content": "hi"}]})), BODY),
        ("chat: role null", ch, chat(json!({"messages": [{"role": null, "content": "hi"}]})), BODY),
        ("chat: content a number", ch, chat(json!({"messages": [{"role": "user", "content": 5}]})), BODY),
        (
            "chat: an image part",
            ch,
            chat(json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x"}}]}]})),
            param("messages"),
        ),
        ("chat: max_completion_tokens 0", ch, chat(json!({"max_completion_tokens": 0})), SAMPLING),
        ("chat: top_logprobs 50", ch, chat(json!({"logprobs": true, "top_logprobs": 50})), SAMPLING),
        ("chat: n 65", ch, chat(json!({"n": 65})), param("n")),
        ("chat: another model", ch, chat(json!({"model": "x"})), (404, "not_found_error", Some("model"))),
        ("chat: 100 stop strings", ch, chat(json!({"stop": vec!["s"; 100]})), param("stop")),
        (
            "chat: prompt longer than max_model_len",
            ch,
            chat(json!({"messages": [
            {"role": "user", "content": "z".repeat(2000)}]})),
            NO_PARAM,
        ),
        (
            "chat: body over the limit",
            ch,
            chat(json!({"messages": [
            {"role": "user", "content": "y".repeat(BODY_LIMIT)}]})),
            TOO_LARGE,
        ),
    ]
}

/// POSTs raw bytes and reads the answer (the server may answer before reading it all).
fn post_raw(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // A server that refuses the body early may close before reading it: that is its answer.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

#[test]
fn malformed_bodies_get_the_expected_status_type_and_param() {
    let config = EngineConfig {
        scheduler: SchedulerConfig { max_model_len: 256, ..SchedulerConfig::default() },
        seed: 1,
        ..EngineConfig::default()
    };
    let limits = ServerLimits { max_body_bytes: BODY_LIMIT, ..ServerLimits::default() };
    let server = TestServer::start_with_limits(engine(config, Box::new(random_logits)), limits);
    let cases = cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (name, path, body, (status, kind, blamed)) in &cases {
        let (got_status, text) = post_raw(server.addr, path, body);
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let error = &answer["error"];
        let got = (got_status, error["type"].as_str(), error["param"].as_str());
        if got != (*status, Some(*kind), *blamed) || error["code"] != *status || !error["message"].is_string()
        {
            failures.push(format!("{name}: got {got:?} {text}"));
        }
    }
    let (status, answer) = server.post_json("/v1/completions", &json!({"prompt": "hi", "max_tokens": 3}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 3);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_too_long_prompt_is_a_400_naming_max_model_len() {
    let config = EngineConfig {
        scheduler: SchedulerConfig { max_model_len: 256, ..SchedulerConfig::default() },
        ..EngineConfig::default()
    };
    let server = TestServer::start(engine(config, Box::new(random_logits)));
    let (status, answer) = server.post_json("/v1/completions", &json!({"prompt": vec![7; 300]}));
    assert_eq!(status, 400);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("300 tokens, more than max_model_len (256)"), "{message}");
}

#[test]
fn pagoda_serve_flags_set_the_request_limits() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_model(dir.path());
    let flags = [
        ["--max-request-body-bytes", "300"],
        ["--max-sequences-per-request", "2"],
        ["--max-tokens-per-request", "20"],
        ["--max-stop-strings", "1"],
        ["--max-stop-string-bytes", "4"],
        ["--max-stop-token-ids", "1"],
        ["--max-logit-bias", "1"],
    ];
    let server = Replica::start(dir.path(), &flags.concat());
    let c = "/v1/completions";
    let cases = [
        ("a body over 300 bytes", completion(json!({"prompt": "x".repeat(300)})), TOO_LARGE),
        ("3 sequences", completion(json!({"n": 3})), param("n")),
        ("2 × 11 tokens", completion(json!({"n": 2, "max_tokens": 11})), param("max_tokens")),
        ("2 stop strings", completion(json!({"stop": ["a", "b"]})), param("stop")),
        ("a 5-byte stop string", completion(json!({"stop": "abcde"})), param("stop")),
        ("2 stop token ids", completion(json!({"stop_token_ids": [1, 2]})), param("stop_token_ids")),
        ("2 biases", completion(json!({"logit_bias": {"1": 1, "2": 1}})), param("logit_bias")),
    ];
    for (name, body, (status, kind, blamed)) in cases {
        let (got, text) = post_raw(server.addr, c, &body);
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(
            (got, answer["error"]["type"].as_str(), answer["error"]["param"].as_str()),
            (status, Some(kind), blamed),
            "{name}: {text}"
        );
    }
    let within = completion(
        json!({"n": 2, "max_tokens": 10, "stop": "abcd", "stop_token_ids": [1], "logit_bias": {"1": -1}}),
    );
    let (status, text) = post_raw(server.addr, c, &within);
    assert_eq!(status, 200, "{text}");
}
