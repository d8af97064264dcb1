//! The OpenAI-compatible server on a loopback port: outputs equal the library's, streaming
//! and not, under concurrency; `/tokenize` gives the prompts they run; errors are 400/404/503
//! with OpenAI bodies; metrics move; a client that disconnects frees its blocks.
#![cfg(feature = "server")]

mod engine_support;
mod server_support;

use std::io::Read;
use std::time::Duration;

use engine_support::{byte_tokens, engine, random_logits, scripted_logits, slow_engine};
use pagoda::{ChatMessage, EngineConfig, Prompt, SamplingParams, SchedulerConfig};
use serde_json::{Value, json};
use server_support::{MODEL, TestServer, read_until_data_contains, series};

fn config() -> EngineConfig {
    EngineConfig { seed: 1, ..EngineConfig::default() }
}

fn seeded(seed: u64, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        seed: Some(seed),
        max_tokens,
        ignore_eos: true,
        ..SamplingParams::default()
    }
}

/// The library's text for one prompt.
fn library_text(prompt: Prompt, params: &SamplingParams) -> (String, usize, usize) {
    let mut engine = engine(config(), Box::new(random_logits));
    let out = engine.generate([prompt], params).unwrap().remove(0);
    (out.text, out.prompt_token_ids.len(), out.token_ids.len())
}

/// The concatenated `text` (completions) or `delta.content` (chat) of streamed chunks.
fn streamed_text(chunks: &[String], chat: bool) -> (String, Option<String>, Option<Value>) {
    let mut text = String::new();
    let mut finish = None;
    let mut usage = None;
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
    for chunk in &chunks[..chunks.len() - 1] {
        let value: Value = serde_json::from_str(chunk).unwrap();
        if let Some(u) = value.get("usage") {
            usage = Some(u.clone());
        }
        for choice in value["choices"].as_array().unwrap() {
            let piece = if chat { &choice["delta"]["content"] } else { &choice["text"] };
            text.push_str(piece.as_str().unwrap_or(""));
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_owned());
            }
        }
    }
    (text, finish, usage)
}

#[test]
fn completions_equal_the_library_streaming_or_not_under_concurrency() {
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let prompts = ["the tower", "a wise cat", "in the", "zebra", "one more prompt", "x", "yy", "the end"];
    std::thread::scope(|scope| {
        for (index, prompt) in prompts.iter().enumerate() {
            let server = &server;
            scope.spawn(move || {
                let seed = 100 + index as u64;
                let (expected, prompt_len, completion_len) =
                    library_text(Prompt::from(*prompt), &seeded(seed, 12 + index));
                let body = json!({
                    "model": MODEL, "prompt": prompt, "max_tokens": 12 + index, "temperature": 0.8,
                    "seed": seed, "ignore_eos": true, "stream": index % 2 == 1,
                    "stream_options": {"include_usage": true},
                });
                if index % 2 == 1 {
                    let (status, chunks) = server.post_stream("/v1/completions", &body);
                    assert_eq!(status, 200);
                    let (text, finish, usage) = streamed_text(&chunks, false);
                    assert_eq!(text, expected);
                    assert_eq!(finish.as_deref(), Some("length"));
                    let usage = usage.unwrap();
                    assert_eq!(usage["prompt_tokens"], prompt_len);
                    assert_eq!(usage["completion_tokens"], completion_len);
                } else {
                    let (status, response) = server.post_json("/v1/completions", &body);
                    assert_eq!(status, 200, "{response}");
                    assert_eq!(response["object"], "text_completion");
                    assert_eq!(response["model"], MODEL);
                    assert_eq!(response["choices"][0]["text"], expected);
                    assert_eq!(response["choices"][0]["finish_reason"], "length");
                    assert_eq!(response["usage"]["prompt_tokens"], prompt_len);
                    assert_eq!(response["usage"]["completion_tokens"], completion_len);
                    assert_eq!(response["usage"]["total_tokens"], prompt_len + completion_len);
                }
            });
        }
    });
    assert_eq!(server.metric(&series("request_success_total", "finished_reason=\"length\",")), 8.0);
    assert_eq!(server.metric(&series("num_requests_running", "")), 0.0);
}

#[test]
fn n_choices_are_requests_seeded_seed_plus_index_and_count_their_prompt_once() {
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let prompts = ["the tower", "a wise cat"];
    let expected: Vec<(String, usize, usize)> = prompts
        .iter()
        .flat_map(|prompt| {
            (0..3).map(move |choice| library_text(Prompt::from(*prompt), &seeded(40 + choice, 6)))
        })
        .collect();
    let prompt_tokens = expected[0].1 + expected[3].1;
    let completion_tokens: usize = expected.iter().map(|e| e.2).sum();
    let body = |stream: bool| {
        json!({"prompt": prompts, "n": 3, "max_tokens": 6, "temperature": 0.8, "seed": 40,
               "ignore_eos": true, "stream": stream, "stream_options": {"include_usage": true}})
    };
    let (status, response) = server.post_json("/v1/completions", &body(false));
    assert_eq!(status, 200, "{response}");
    let choices = response["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 6);
    for (index, (choice, (text, _, _))) in choices.iter().zip(&expected).enumerate() {
        assert_eq!(choice["index"], index);
        assert_eq!(choice["text"], *text, "choice {index}");
    }
    assert_eq!(response["usage"]["prompt_tokens"], prompt_tokens);
    assert_eq!(response["usage"]["completion_tokens"], completion_tokens);

    let (status, chunks) = server.post_stream("/v1/completions", &body(true));
    assert_eq!(status, 200);
    let mut texts = vec![String::new(); 6];
    let mut usage = Value::Null;
    for chunk in &chunks[..chunks.len() - 1] {
        let value: Value = serde_json::from_str(chunk).unwrap();
        for choice in value["choices"].as_array().unwrap() {
            texts[choice["index"].as_u64().unwrap() as usize].push_str(choice["text"].as_str().unwrap());
        }
        if !value["usage"].is_null() {
            usage = value["usage"].clone();
        }
    }
    assert_eq!(texts, expected.iter().map(|e| e.0.clone()).collect::<Vec<_>>());
    assert_eq!(usage["prompt_tokens"], prompt_tokens);
    assert_eq!(usage["completion_tokens"], completion_tokens);

    // vLLM takes any i64 seed; -1 draws as u64::MAX, and its second choice wraps to 0.
    let body = json!({"prompt": prompts[0], "n": 2, "max_tokens": 6, "temperature": 0.8, "seed": -1,
                      "ignore_eos": true});
    let (status, response) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let texts: Vec<&str> =
        response["choices"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
    let expected: Vec<String> =
        [u64::MAX, 0].map(|seed| library_text(Prompt::from(prompts[0]), &seeded(seed, 6)).0).into();
    assert_eq!(texts, expected);

    let chat = json!({"messages": [{"role": "user", "content": "hello"}], "n": 2, "max_tokens": 4,
                      "seed": 9, "temperature": 0.8, "ignore_eos": true, "stream": true});
    let (status, chunks) = server.post_stream("/v1/chat/completions", &chat);
    assert_eq!(status, 200);
    let roles: Vec<(u64, Value)> = chunks[..chunks.len() - 1]
        .iter()
        .map(|chunk| serde_json::from_str::<Value>(chunk).unwrap())
        .filter(|value| !value["choices"][0]["delta"]["role"].is_null())
        .map(|value| {
            (value["choices"][0]["index"].as_u64().unwrap(), value["choices"][0]["delta"]["role"].clone())
        })
        .collect();
    assert_eq!(roles, vec![(0, json!("assistant")), (1, json!("assistant"))]);
    let chat = json!({"messages": [{"role": "user", "content": "hello"}], "n": 2, "max_tokens": 4,
                      "seed": 9, "temperature": 0.8, "ignore_eos": true});
    let (status, response) = server.post_json("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{response}");
    let replies: Vec<&str> = response["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    let messages = vec![ChatMessage::new("user", "hello")];
    let alone = |seed| library_text(Prompt::Chat(messages.clone()), &seeded(seed, 4)).0;
    assert_eq!(replies, vec![alone(9), alone(10)]);
}

#[test]
fn chat_completions_equal_the_library_streaming_or_not() {
    let messages = vec![ChatMessage::new("system", "be brief"), ChatMessage::new("user", "hello there")];
    let (expected, prompt_len, completion_len) = library_text(Prompt::Chat(messages), &seeded(7, 10));
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let body = |stream: bool| {
        json!({
            "model": MODEL, "max_tokens": 10, "temperature": 0.8, "seed": 7, "ignore_eos": true, "stream": stream,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}],
        })
    };
    let (status, response) = server.post_json("/v1/chat/completions", &body(false));
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["object"], "chat.completion");
    assert_eq!(response["choices"][0]["message"]["role"], "assistant");
    assert_eq!(response["choices"][0]["message"]["content"], expected);
    assert_eq!(response["choices"][0]["finish_reason"], "length");
    assert_eq!(response["usage"]["prompt_tokens"], prompt_len);
    assert_eq!(response["usage"]["completion_tokens"], completion_len);

    let (status, chunks) = server.post_stream("/v1/chat/completions", &body(true));
    assert_eq!(status, 200);
    let first: Value = serde_json::from_str(&chunks[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (text, finish, usage) = streamed_text(&chunks, true);
    assert_eq!(text, expected);
    assert_eq!(finish.as_deref(), Some("length"));
    assert_eq!(usage.unwrap()["total_tokens"], prompt_len + completion_len);
}

#[test]
fn stop_strings_and_logprobs_over_http() {
    let script = byte_tokens("one two STOP three");
    let server = TestServer::start(engine(config(), scripted_logits(script)));
    let body = json!({"prompt": "count", "max_tokens": 30, "temperature": 0, "stop": "STOP", "logprobs": 2});
    let (status, response) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["text"], "one two ");
    assert_eq!(choice["finish_reason"], "stop");
    let logprobs = &choice["logprobs"];
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), "one two STOP".len());
    assert_eq!(logprobs["tokens"][0], "o");
    assert_eq!(logprobs["text_offset"][1], 1);
    assert_eq!(logprobs["top_logprobs"][0].as_object().unwrap().len(), 2);

    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
                      "logprobs": true, "top_logprobs": 1});
    let (status, response) = server.post_json("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["choices"][0]["message"]["content"], "one");
    let content = response["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    assert_eq!(content[1]["token"], "n");
    assert_eq!(content[1]["bytes"], json!([b'n']));
    assert_eq!(content[1]["top_logprobs"][0]["token"], "n");
}

#[test]
fn models_and_health() {
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let (status, body) = server.request("GET", "/health", None);
    assert_eq!((status, body.as_str()), (200, ""));
    let (status, body) = server.request("GET", "/v1/models", None);
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(models["data"][0]["max_model_len"], 512);
}

#[test]
fn tokenize_gives_the_prompts_the_endpoints_run_and_detokenize_reverses_it_and_tokenizer_info_describes_it() {
    let library = engine(config(), Box::new(random_logits));
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let ids = |answer: &Value| -> Vec<u32> {
        answer["tokens"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap() as u32).collect()
    };

    let text = "hello there";
    let (status, answer) = server.post_json("/tokenize", &json!({"prompt": text, "return_token_strs": true}));
    assert_eq!(status, 200, "{answer}");
    let prompt = library.encode_prompt(&Prompt::Text(text.into())).unwrap();
    assert_eq!(ids(&answer), prompt);
    assert_eq!(
        (answer["count"].as_u64(), answer["max_model_len"].as_u64()),
        (Some(prompt.len() as u64), Some(512))
    );
    assert_eq!(answer["token_strs"].as_array().unwrap().len(), prompt.len());
    let (_, plain) = server.post_json("/tokenize", &json!({"prompt": text, "add_special_tokens": false}));
    assert_eq!(ids(&plain), library.tokenizer().encode(text, true).unwrap());
    assert!(plain["token_strs"].is_null());
    let (status, back) = server.post_json("/detokenize", &json!({"tokens": ids(&plain)}));
    assert_eq!((status, back["prompt"].as_str()), (200, Some(text)));

    let messages = vec![ChatMessage::new("system", "be brief"), ChatMessage::new("user", "hello")];
    let conversation =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]);
    let (_, chat) = server.post_json("/tokenize", &json!({"messages": conversation}));
    assert_eq!(ids(&chat), library.encode_prompt(&Prompt::Chat(messages.clone())).unwrap());
    let (_, reply) =
        server.post_json("/v1/chat/completions", &json!({"messages": conversation, "max_tokens": 1}));
    assert_eq!(reply["usage"]["prompt_tokens"], chat["count"]);
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let (_, with_tools) = server.post_json("/tokenize", &json!({"messages": conversation, "tools": tools}));
    let (_, reply) = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": conversation, "tools": tools, "max_tokens": 1}),
    );
    assert_eq!(reply["usage"]["prompt_tokens"], with_tools["count"]);
    assert!(ids(&with_tools).len() > ids(&chat).len(), "the tools are in the prompt");
    let (_, open) =
        server.post_json("/tokenize", &json!({"messages": conversation, "add_generation_prompt": false}));
    let expected = library.encode_chat(&messages, None, false).unwrap();
    assert_eq!(ids(&open), expected);
    assert!(expected.len() < ids(&chat).len(), "the generation prompt adds tokens");

    // vLLM's /tokenizer_info, which lm-evaluation-harness reads before tokenizing through /tokenize.
    let (status, info) = server.request("GET", "/tokenizer_info", None);
    assert_eq!(status, 200, "{info}");
    let info: Value = serde_json::from_str(&info).unwrap();
    let tokenizer = library.tokenizer();
    let piece = |id: Option<u32>| id.and_then(|id| tokenizer.id_to_piece(id));
    assert_eq!(info["eos_token"].as_str(), piece(tokenizer.eos_token_id()).as_deref());
    assert_eq!(info["bos_token"].as_str(), piece(tokenizer.bos_token_id()).as_deref());
    assert_eq!(info["add_bos_token"], json!(tokenizer.prompt_bos().is_some()));
    assert_eq!(info["model_max_length"], 512);
    assert_eq!(info["chat_template"].as_str(), library.chat_template().map(|t| t.source()));

    let refused = [
        ("/tokenize", json!({}), "prompt"),
        ("/tokenize", json!({"prompt": "a", "messages": conversation}), "prompt"),
        ("/tokenize", json!({"messages": []}), "messages"),
        (
            "/tokenize",
            json!({"messages": conversation, "tools": [{"type": "code", "function": {"name": "f"}}]}),
            "tools",
        ),
        ("/detokenize", json!({"tokens": [1, 999_999]}), "tokens"),
    ];
    for (path, body, param) in refused {
        let (status, answer) = server.post_json(path, &body);
        assert_eq!((status, answer["error"]["param"].as_str()), (400, Some(param)), "{body}: {answer}");
    }
}

#[test]
fn malformed_requests_get_openai_style_errors() {
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let (status, body) = server.request("POST", "/v1/completions", Some("{not json"));
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["code"], 400);
    assert!(error["error"]["message"].as_str().unwrap().starts_with("invalid request body"));

    let cases = [
        ("/v1/completions", json!({"max_tokens": 4}), 400, "prompt"),
        (
            "/v1/completions",
            json!({"prompt": [[1, 2], "hi"]}),
            400,
            "prompt to be a string, a list of strings",
        ),
        ("/v1/completions", json!({"prompt": "hi", "stop": [1]}), 400, "a string or a list of strings"),
        ("/v1/completions", json!({"prompt": "hi", "temperature": -1}), 400, "temperature"),
        ("/v1/completions", json!({"prompt": "hi", "top_p": 0}), 400, "top_p"),
        ("/v1/completions", json!({"prompt": "hi", "n": 0}), 400, "n = 0"),
        ("/v1/completions", json!({"prompt": "hi", "bad_words": ["x"]}), 400, "bad_words is not supported"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false}),
            400,
            "add_generation_prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "echo": true, "logprobs": 1, "max_tokens": 0}),
            400,
            "prompt_logprobs is not served",
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "prompt_logprobs": 21}),
            400,
            "prompt_logprobs must be at most 20",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 1, "stream": true}),
            400,
            "prompt_logprobs",
        ),
        ("/v1/completions", json!({"prompt": "hi", "best_of": 3}), 400, "best_of = 3"),
        ("/v1/completions", json!({"prompt": "hi", "suffix": "!"}), 400, "suffix"),
        (
            "/v1/completions",
            json!({"prompt": "hi", "logit_bias": {"9999999": 1}}),
            400,
            "outside the vocabulary",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "n": 65}),
            400,
            "n = 65",
        ),
        ("/v1/completions", json!({"prompt": "hi", "max_tokens": 0}), 400, "max_tokens"),
        ("/v1/completions", json!({"prompt": "hi", "max_tokens": 0, "echo": false}), 400, "max_tokens"),
        ("/v1/completions", json!({"prompt": [999]}), 400, "outside the vocabulary"),
        ("/v1/completions", json!({"prompt": "hi ".repeat(600)}), 400, "max_model_len"),
        ("/v1/completions", json!({"prompt": "hi", "model": "gpt-4"}), 404, "gpt-4"),
        ("/v1/chat/completions", json!({"messages": []}), 400, "messages"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user"}]}), 400, "invalid request body"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            "image_url",
        ),
    ];
    for (path, body, expected_status, needle) in cases {
        let (status, error) = server.post_json(path, &body);
        assert_eq!(status, expected_status, "{body} -> {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message:?} lacks {needle:?}");
    }
    let (status, _) = server.post_json("/v1/completions", &json!({"prompt": "still fine", "max_tokens": 2}));
    assert_eq!(status, 200);
}

#[test]
fn metrics_show_preemptions_with_a_small_pool() {
    // Prefix caching off: a resumed victim cannot re-hit its own blocks, so every token it
    // had computed is recomputed, whatever the timing of the four clients.
    let cache = pagoda::CacheConfig { num_gpu_blocks: 8, enable_prefix_caching: false, ..Default::default() };
    let small = EngineConfig { cache, ..config() };
    let server = TestServer::start(engine(small, Box::new(random_logits)));
    std::thread::scope(|scope| {
        for index in 0..4 {
            let server = &server;
            scope.spawn(move || {
                let body = json!({"prompt": format!("prompt number {index} is here"), "max_tokens": 40,
                                  "ignore_eos": true, "seed": index});
                let (status, response) = server.post_json("/v1/completions", &body);
                assert_eq!(status, 200, "{response}");
                assert_eq!(response["usage"]["completion_tokens"], 40);
            });
        }
    });
    assert!(server.metric(&series("num_preemptions_total", "")) > 0.0);
    assert!(server.metric(&series("num_recomputed_tokens_total", "")) > 0.0);
    assert_eq!(server.metric(&series("generation_tokens_total", "")), 160.0);
    assert_eq!(server.metric(&series("e2e_request_latency_seconds_count", "")), 4.0);
    assert_eq!(server.metric(&series("time_to_first_token_seconds_count", "")), 4.0);
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
}

#[test]
fn metrics_count_prefix_cache_queries_and_hits() {
    let server = TestServer::start(engine(config(), Box::new(random_logits)));
    let body = json!({"prompt": "a shared system prompt that spans more than two blocks of sixteen tokens",
                      "max_tokens": 2});
    let mut prompt_tokens = Vec::new();
    for _ in 0..2 {
        let (status, response) = server.post_json("/v1/completions", &body);
        assert_eq!(status, 200, "{response}");
        prompt_tokens.push(response["usage"]["prompt_tokens"].as_u64().unwrap());
    }
    let n = prompt_tokens[0];
    assert!(n > 32 && prompt_tokens[1] == n, "{prompt_tokens:?}");
    // The second request re-hits every full block of the first, never its last token.
    let full_block_tokens = (n - 1) / 16 * 16;
    assert_eq!(server.metric(&series("prefix_cache_queries_total", "")), (2 * n) as f64);
    assert_eq!(server.metric(&series("prefix_cache_hits_total", "")), full_block_tokens as f64);
}

#[test]
fn a_disconnected_stream_is_aborted_and_frees_its_blocks() {
    let slow = slow_engine(config(), Box::new(random_logits), Duration::from_millis(5));
    let server = TestServer::start(slow);
    let body = json!({"prompt": "a long story", "max_tokens": 400, "ignore_eos": true, "stream": true});
    let stream = server.send("POST", "/v1/completions", Some(&body.to_string()));
    let reader = read_until_data_contains(stream, "\"text\"");
    assert!(server.metric(&series("kv_cache_usage_perc", "")) > 0.0);
    drop(reader);
    server.wait_for_metric(&series("request_success_total", "finished_reason=\"abort\","), 1.0);
    assert_eq!(server.metric(&series("num_requests_running", "")), 0.0);
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
    let (status, _) = server.post_json("/v1/completions", &json!({"prompt": "after", "max_tokens": 3}));
    assert_eq!(status, 200);
}

#[test]
fn a_client_gone_before_a_plain_response_aborts_its_request() {
    let slow = slow_engine(config(), Box::new(random_logits), Duration::from_millis(5));
    let server = TestServer::start(slow);
    let body = json!({"prompt": "a long story", "max_tokens": 400, "ignore_eos": true});
    let connection = server.send("POST", "/v1/completions", Some(&body.to_string()));
    server.wait_for_metric(&series("num_requests_running", ""), 1.0);
    drop(connection);
    server.wait_for_metric(&series("request_success_total", "finished_reason=\"abort\","), 1.0);
    assert_eq!(server.metric(&series("num_requests_running", "")), 0.0);
    assert_eq!(server.metric(&series("kv_cache_usage_perc", "")), 0.0);
    assert!(server.metric(&series("generation_tokens_total", "")) < 400.0);
}

#[test]
fn a_full_waiting_queue_answers_503_and_the_others_complete() {
    let config = EngineConfig {
        scheduler: SchedulerConfig { max_num_seqs: 1, ..Default::default() },
        max_waiting_requests: Some(1),
        ..config()
    };
    let server = TestServer::start(slow_engine(config, Box::new(random_logits), Duration::from_millis(2)));
    let long = json!({"prompt": "first", "max_tokens": 1000, "ignore_eos": true, "stream": true});
    let first = server.send("POST", "/v1/completions", Some(&long.to_string()));
    let mut first = read_until_data_contains(first, "\"text\"");
    std::thread::scope(|scope| {
        let second = scope
            .spawn(|| server.post_json("/v1/completions", &json!({"prompt": "second", "max_tokens": 5})));
        server.wait_for_metric(&series("num_requests_waiting", ""), 1.0);
        let (status, error) =
            server.post_json("/v1/completions", &json!({"prompt": "third", "max_tokens": 5}));
        assert_eq!(status, 503);
        assert_eq!(error["error"]["type"], "service_unavailable_error");
        assert!(error["error"]["message"].as_str().unwrap().contains("overloaded"));
        let (status, response) = second.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(response["choices"][0]["finish_reason"], "length");
    });
    let mut rest = String::new();
    first.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("\"finish_reason\":\"length\""));
    assert!(rest.contains("[DONE]"));
}
