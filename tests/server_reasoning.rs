//! Reasoning output through the server (`ServerOptions::reasoning_parser`): a model scripted
//! to write `<think>…</think>` or harmony channels gets its reply split into
//! `reasoning_content` (and `reasoning`) and `content`, streamed and not, with tool calls
//! parsed from the answer; `chat_template_kwargs` and `reasoning_effort` reach the template.
#![cfg(feature = "server")]

mod engine_support;
mod server_support;

use std::path::PathBuf;
use std::time::Duration;

use engine_support::{LogitsExecutor, byte_tokens, scripted_logits};
use pagoda::model::ModelFiles;
use pagoda::model::reasoning::ReasoningParser;
use pagoda::model::testing::TinyLlama;
use pagoda::server::ServerOptions;
use pagoda::{Engine, EngineConfig, ExecutorKind};
use serde_json::{Value, json};
use server_support::TestServer;

/// A server whose model writes `script` (then EOS) after any prompt: the tiny model's
/// tokenizer (a byte a token) with 2048 positions, room for pagoda's tool prompt and a reply.
fn server(parser: Option<ReasoningParser>, script: &str) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut tiny = TinyLlama::new(0);
    tiny.config.max_position_embeddings = 2048;
    tiny.write_hf_dir(dir.path()).unwrap();
    let model = ModelFiles::open(dir.path()).unwrap();
    let executor = LogitsExecutor::new(scripted_logits(byte_tokens(script)), Duration::ZERO);
    let engine = Engine::with_executor(EngineConfig::default(), model, Box::new(executor)).unwrap();
    TestServer::start_with(engine, ServerOptions { reasoning_parser: parser, ..ServerOptions::default() })
}

fn ask(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Capital of France?"}], "temperature": 0});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The message of a non-streamed reply.
fn reply_message(server: &TestServer, body: &Value) -> (Value, Value) {
    let (status, reply) = server.post_json("/v1/chat/completions", body);
    assert_eq!(status, 200, "{reply}");
    (reply["choices"][0]["message"].clone(), reply["choices"][0]["finish_reason"].clone())
}

/// What a streamed reply's deltas add up to: reasoning (checked equal under both names),
/// content, the tool calls, the finish reason; and every delta's reasoning and content.
struct Streamed {
    reasoning: String,
    content: String,
    tool_calls: Vec<Value>,
    finish: Value,
    deltas: Vec<(Option<String>, Option<String>)>,
}

fn streamed(server: &TestServer, body: &Value) -> Streamed {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let (status, chunks) = server.post_stream("/v1/chat/completions", &body);
    assert_eq!(status, 200);
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
    let mut out = Streamed {
        reasoning: String::new(),
        content: String::new(),
        tool_calls: Vec::new(),
        finish: Value::Null,
        deltas: Vec::new(),
    };
    for chunk in &chunks[..chunks.len() - 1] {
        let chunk: Value = serde_json::from_str(chunk).unwrap();
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        assert_eq!(delta["reasoning"], delta["reasoning_content"], "{delta}");
        let reasoning = delta["reasoning_content"].as_str().map(str::to_owned);
        let content = delta["content"].as_str().map(str::to_owned);
        out.reasoning.push_str(reasoning.as_deref().unwrap_or_default());
        out.content.push_str(content.as_deref().unwrap_or_default());
        out.tool_calls.extend(delta["tool_calls"].as_array().into_iter().flatten().cloned());
        if !choice["finish_reason"].is_null() {
            out.finish = choice["finish_reason"].clone();
        }
        out.deltas.push((reasoning, content));
    }
    out
}

const THOUGHT: &str = "<think>\nThe capital of France is Paris.\n</think>\n\nParis.";

#[test]
fn qwen3_splits_reasoning_from_content_streamed_and_not() {
    let server = server(Some(ReasoningParser::Qwen3), THOUGHT);
    let (message, finish) = reply_message(&server, &ask(json!({})));
    assert_eq!(message["reasoning_content"], "\nThe capital of France is Paris.\n");
    assert_eq!(message["reasoning"], "\nThe capital of France is Paris.\n");
    assert_eq!(message["content"], "\n\nParis.");
    assert_eq!(finish, "stop");

    let streamed = streamed(&server, &ask(json!({})));
    assert_eq!(streamed.reasoning, "\nThe capital of France is Paris.\n");
    assert_eq!(streamed.content, "\n\nParis.");
    assert_eq!(streamed.finish, "stop");
    // One byte a token: the markers arrive over several deltas and none of their text leaks.
    for (reasoning, content) in &streamed.deltas {
        for text in [reasoning, content].into_iter().flatten() {
            assert!(!text.contains('<') && !text.contains('>'), "{text:?}");
        }
    }
    let first_content = streamed.deltas.iter().position(|(_, c)| c.as_deref().is_some_and(|c| !c.is_empty()));
    let last_reasoning = streamed.deltas.iter().rposition(|(r, _)| r.is_some());
    assert!(last_reasoning < first_content, "reasoning deltas all come before content deltas");
}

#[test]
fn without_a_parser_or_with_thinking_off_the_reply_stays_whole() {
    let whole = server(None, THOUGHT);
    let (message, _) = reply_message(&whole, &ask(json!({})));
    assert_eq!(message["content"], THOUGHT);
    assert!(message.get("reasoning_content").is_none() && message.get("reasoning").is_none(), "{message}");

    let qwen3 = server(Some(ReasoningParser::Qwen3), "Paris.");
    let off = ask(json!({"chat_template_kwargs": {"enable_thinking": false}}));
    let (message, _) = reply_message(&qwen3, &off);
    assert_eq!(message["content"], "Paris.");
    assert!(message.get("reasoning_content").is_none(), "{message}");
    let streamed = streamed(&qwen3, &off);
    assert_eq!((streamed.reasoning.as_str(), streamed.content.as_str()), ("", "Paris."));
    // Thinking on (the default), a reply that never closes its thinking is all reasoning.
    let (message, _) = reply_message(&qwen3, &ask(json!({})));
    assert_eq!(message["reasoning_content"], "Paris.");
    assert!(message.get("content").is_none(), "{message}");
}

#[test]
fn deepseek_r1_reasoning_runs_to_the_close() {
    let server = server(Some(ReasoningParser::DeepseekR1), "Let me see. 2+2 is 4.</think>4");
    let (message, _) = reply_message(&server, &ask(json!({})));
    assert_eq!(
        (&message["reasoning_content"], &message["content"]),
        (&json!("Let me see. 2+2 is 4."), &json!("4"))
    );
    let streamed = streamed(&server, &ask(json!({})));
    assert_eq!((streamed.reasoning.as_str(), streamed.content.as_str()), ("Let me see. 2+2 is 4.", "4"));
}

#[test]
fn gpt_oss_harmony_channels_split_into_reasoning_and_final() {
    let harmony = "<|channel|>analysis<|message|>User wants the capital.<|end|>\
        <|start|>assistant<|channel|>final<|message|>Paris.<|return|>";
    let server = server(Some(ReasoningParser::GptOss), harmony);
    let (message, _) = reply_message(&server, &ask(json!({"reasoning_effort": "low"})));
    assert_eq!(
        (&message["reasoning_content"], &message["content"]),
        (&json!("User wants the capital."), &json!("Paris."))
    );
    let streamed = streamed(&server, &ask(json!({})));
    assert_eq!(
        (streamed.reasoning.as_str(), streamed.content.as_str()),
        ("User wants the capital.", "Paris.")
    );
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

/// `script` answers with a call of `get_weather` for Paris when offered the tool, streamed
/// and not, with `reasoning` and `content` beside it; returns the server.
fn check_weather_call(
    parser: ReasoningParser,
    script: &str,
    reasoning: &str,
    content: Option<&str>,
) -> TestServer {
    let server = server(Some(parser), script);
    let body = ask(json!({"tools": weather_tool()}));
    let (message, finish) = reply_message(&server, &body);
    assert_eq!(finish, "tool_calls");
    assert_eq!(message["reasoning_content"], reasoning);
    assert_eq!(message.get("content").and_then(Value::as_str), content, "{message}");
    let call = &message["tool_calls"][0]["function"];
    assert_eq!((&call["name"], &call["arguments"]), (&json!("get_weather"), &json!("{\"city\":\"Paris\"}")));

    let streamed = streamed(&server, &body);
    assert_eq!(streamed.finish, "tool_calls");
    assert_eq!(
        (streamed.reasoning.as_str(), streamed.content.as_str()),
        (reasoning, content.unwrap_or_default())
    );
    assert_eq!(streamed.tool_calls.len(), 1);
    assert_eq!(streamed.tool_calls[0]["function"]["name"], "get_weather");
    assert_eq!(streamed.tool_calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    server
}

#[test]
fn tool_calls_are_parsed_from_the_answer_after_the_reasoning() {
    let script = "<think>I need the weather.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    check_weather_call(ReasoningParser::Qwen3, script, "I need the weather.", None);
}

#[test]
fn gpt_oss_calls_functions_in_harmony_messages() {
    let script = "<|channel|>analysis<|message|>Need the weather.<|end|>\
        <|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>\
        <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
    let server = check_weather_call(ReasoningParser::GptOss, script, "Need the weather.", Some("Checking."));
    // Without tools offered, the call is neither reasoning nor answer.
    let (message, finish) = reply_message(&server, &ask(json!({})));
    assert_eq!((finish, &message["content"]), (json!("stop"), &json!("Checking.")));
    assert!(message.get("tool_calls").is_none(), "{message}");
}

#[test]
fn a_constrained_reply_is_all_answer() {
    let choice = "<think>a</think>b";
    let server = server(Some(ReasoningParser::Qwen3), choice);
    let (message, _) = reply_message(&server, &ask(json!({"structured_outputs": {"choice": [choice]}})));
    assert_eq!(message["content"], choice);
    assert!(message.get("reasoning_content").is_none(), "{message}");
}

#[test]
fn bad_reasoning_effort_and_template_kwargs_are_400s() {
    let server = server(Some(ReasoningParser::Qwen3), "x");
    let (status, reply) =
        server.post_json("/v1/chat/completions", &ask(json!({"reasoning_effort": "extreme"})));
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "reasoning_effort");
    let (status, reply) =
        server.post_json("/v1/chat/completions", &ask(json!({"chat_template_kwargs": [1]})));
    assert_eq!(status, 400, "{reply}");
}

/// The real Qwen3 template (`PAGODA_FAMILIES_DIR`) on the simulated executor: `enable_thinking`
/// false closes the thinking block in the prompt, through `/tokenize` and the chat endpoint.
#[test]
fn enable_thinking_reaches_the_qwen3_template() {
    let dir = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).expect("PAGODA_FAMILIES_DIR");
    let config = EngineConfig {
        model: Some(dir.join("qwen3")),
        executor: ExecutorKind::Sim,
        ..EngineConfig::default()
    };
    let server = TestServer::start(Engine::new(config).unwrap());
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let tokenize = |kwargs: Value| {
        let (status, reply) =
            server.post_json("/tokenize", &json!({"messages": messages, "chat_template_kwargs": kwargs}));
        assert_eq!(status, 200, "{reply}");
        reply["tokens"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap()).collect::<Vec<_>>()
    };
    let on = tokenize(json!({}));
    let off = tokenize(json!({"enable_thinking": false}));
    // Qwen3's `<think>`, "\n\n", `</think>`, "\n\n" after the assistant header.
    assert_eq!(off[..on.len()], on[..]);
    assert_eq!(off[on.len()..], [151667, 271, 151668, 271]);
    let body =
        json!({"messages": messages, "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": false}});
    let (status, reply) = server.post_json("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["usage"]["prompt_tokens"], off.len());
}
