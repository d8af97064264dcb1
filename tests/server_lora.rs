//! LoRA adapters through the server on the tiny Llama family model and the adapters
//! scripts/tiny-adapters.py writes beside it (`PAGODA_FAMILIES_DIR`): a request's `model`
//! names an adapter and gets the library's completion for that adapter; `/v1/models` lists the
//! adapters with the base as `parent`; the load and unload routes answer as vLLM's do (and sit
//! behind the API key); an adapter in use is not unloaded; `vllm:lora_requests_info` names the
//! adapters of the running requests; the request counters carry each adapter's name as
//! `model_name`.
#![cfg(feature = "server")]

mod server_support;

use std::path::PathBuf;

use pagoda::executor::lora::LoraConfig;
use pagoda::server::ServerOptions;
use pagoda::server::prometheus::MetricsPrefix;
use pagoda::{CacheConfig, Engine, EngineConfig, Prompt, SamplingParams};
use serde_json::{Value, json};
use server_support::{MODEL, TestServer, read_until_data_contains, request_with, send_request};

const KEY: [&str; 1] = ["Authorization: Bearer k"];
const PROMPT: &str = "The capital of France is";

fn family_dir(family: &str) -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the tiny families (scripts/tiny-adapters.py adds their adapters)")
        .join(family)
}

fn adapter(name: &str) -> PathBuf {
    family_dir("llama").join("lora").join(name)
}

fn engine() -> Engine {
    let config = EngineConfig {
        model: Some(family_dir("llama")),
        cache: CacheConfig { num_gpu_blocks: 64, ..CacheConfig::default() },
        seed: 1,
        lora: Some(LoraConfig { max_loras: 2, max_lora_rank: 8, max_cpu_loras: 2 }),
        ..EngineConfig::default()
    };
    Engine::new(config).unwrap()
}

fn post(server: &TestServer, path: &str, body: &Value) -> (u16, String) {
    request_with(server.addr, "POST", path, Some(&body.to_string()), &KEY)
}

fn error_of(text: &str) -> Value {
    serde_json::from_str::<Value>(text).unwrap()["error"].clone()
}

/// The greedy completion of `model` (200) and the `model` the answer names.
fn complete(server: &TestServer, model: &str) -> (String, String) {
    let body =
        json!({"model": model, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    let (status, text) = post(server, "/v1/completions", &body);
    assert_eq!(status, 200, "{model}: {text}");
    let value: Value = serde_json::from_str(&text).unwrap();
    (value["choices"][0]["text"].as_str().unwrap().to_owned(), value["model"].as_str().unwrap().to_owned())
}

/// The `vllm:lora_requests_info` labels.
fn lora_info(server: &TestServer) -> String {
    let (status, text) = request_with(server.addr, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    let line = text.lines().find(|l| l.starts_with("vllm:lora_requests_info{")).unwrap().to_owned();
    let (labels, value) = line.split_once("} ").unwrap();
    assert!(value.parse::<f64>().unwrap() > 1.7e9, "the value is the time: {line}");
    labels.trim_start_matches("vllm:lora_requests_info{").to_owned()
}

#[test]
fn adapters_are_served_listed_loaded_and_unloaded_as_vllm_does() {
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(6) };
    let mut library = engine();
    let mut expected = Vec::new();
    for name in ["sql", "chat"] {
        library.load_lora(name, &adapter(name)).unwrap();
    }
    let prompt_len = library.encode_prompt(&Prompt::from(PROMPT)).unwrap().len() as u64;
    for lora in [Some("sql"), Some("chat"), None, Some("sql")] {
        expected
            .push(library.generate_with_lora([Prompt::from(PROMPT)], &params, lora).unwrap().remove(0).text);
    }
    drop(library);

    let options = ServerOptions {
        api_key: Some("k".into()),
        metrics_prefix: MetricsPrefix::Vllm,
        lora_modules: vec![("sql".into(), adapter("sql")), ("chat".into(), adapter("chat"))],
        ..ServerOptions::default()
    };
    let server = TestServer::start_with(engine(), options);

    let (status, text) = request_with(server.addr, "GET", "/v1/models", None, &KEY);
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&text).unwrap();
    let cards: Vec<(Value, Value, Value)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|card| (card["id"].clone(), card["parent"].clone(), card["root"].clone()))
        .collect();
    let root = |name: &str| json!(adapter(name).to_string_lossy());
    assert_eq!(
        cards,
        [
            (json!(MODEL), Value::Null, json!(MODEL)),
            (json!("chat"), json!(MODEL), root("chat")),
            (json!("sql"), json!(MODEL), root("sql")),
        ]
    );

    // Each adapter's completion is the library's, named after the adapter; they differ.
    let served: Vec<(String, String)> =
        ["sql", "chat", MODEL, "sql"].iter().map(|m| complete(&server, m)).collect();
    for ((text, model), (expected, asked)) in
        served.iter().zip(expected.iter().zip(["sql", "chat", MODEL, "sql"]))
    {
        assert_eq!((text, model.as_str()), (expected, asked));
    }
    assert_ne!(served[0].0, served[1].0);
    assert_ne!(served[0].0, served[2].0);

    // The request counters per served model: the base model's requests under its name, each
    // adapter's under the adapter's (two "sql" requests, one "chat", one base; 6 tokens each).
    let (_, text) = request_with(server.addr, "GET", "/metrics", None, &[]);
    let sample = |name: &str, labels: String| -> u64 {
        let prefix = format!("vllm:{name}{{{labels}}} ");
        let value = text.lines().find_map(|l| l.strip_prefix(&prefix));
        value.unwrap_or_else(|| panic!("no {prefix} in\n{text}")).parse().unwrap()
    };
    for (model, requests) in [("sql", 2), ("chat", 1), (MODEL, 1)] {
        let labels = format!("model_name=\"{model}\",engine=\"0\"");
        assert_eq!(sample("prompt_tokens_total", labels.clone()), requests * prompt_len, "{model}");
        assert_eq!(sample("generation_tokens_total", labels.clone()), requests * 6, "{model}");
        let finished =
            |reason: &str| sample("request_success_total", format!("finished_reason=\"{reason}\",{labels}"));
        assert_eq!((finished("length"), finished("stop")), (requests, 0), "{model}");
    }
    let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
    let (status, text) = post(&server, "/v1/chat/completions", &chat);
    assert_eq!(
        (status, serde_json::from_str::<Value>(&text).unwrap()["model"].clone()),
        (200, json!("chat"))
    );

    // An unknown model is a 404 blaming `model`.
    let (status, text) =
        post(&server, "/v1/completions", &json!({"model": "nope", "prompt": PROMPT, "max_tokens": 1}));
    let error = error_of(&text);
    assert_eq!((status, &error["type"], &error["param"]), (404, &json!("not_found_error"), &json!("model")));

    // Loading: behind the key; fields, duplicates, missing paths and misfits refused.
    let math = json!({"lora_name": "math", "lora_path": adapter("math")});
    let unkeyed = request_with(server.addr, "POST", "/v1/load_lora_adapter", Some(&math.to_string()), &[]);
    assert_eq!(unkeyed.0, 401);
    let refused = [
        (json!({"lora_name": "math"}), 400, "Both 'lora_name' and 'lora_path' must be provided."),
        (
            json!({"lora_name": "sql", "lora_path": adapter("sql")}),
            400,
            "The lora adapter 'sql' has already been loaded.",
        ),
    ];
    for (body, code, message) in refused {
        let (status, text) = post(&server, "/v1/load_lora_adapter", &body);
        assert_eq!((status, error_of(&text)["message"].as_str().unwrap()), (code, message), "{body}");
    }
    let missing = json!({"lora_name": "math", "lora_path": adapter("nowhere")});
    assert_eq!(post(&server, "/v1/load_lora_adapter", &missing).0, 404);
    let misfit = json!({"lora_name": "misfit", "lora_path": family_dir("llama").join("llama.f32.gguf")});
    let (status, text) = post(&server, "/v1/load_lora_adapter", &misfit);
    assert_eq!((status, &error_of(&text)["param"]), (400, &json!("lora_path")), "{text}");
    assert_eq!(
        post(&server, "/v1/load_lora_adapter", &math),
        (200, "Success: LoRA adapter 'math' added successfully.".into())
    );
    let (math_text, _) = complete(&server, "math");
    assert_ne!(math_text, served[2].0, "the adapter changes the continuation");
    assert_eq!(lora_info(&server), r#"max_lora="2",running_lora_adapters="",waiting_lora_adapters="""#);

    // An adapter a running request uses is not unloaded; the gauge names it while it runs.
    let long =
        json!({"model": "sql", "prompt": PROMPT, "max_tokens": 900, "ignore_eos": true, "stream": true});
    let stream = send_request(server.addr, "POST", "/v1/completions", Some(&long.to_string()), &KEY);
    let reader = read_until_data_contains(stream, "\"text\"");
    assert_eq!(lora_info(&server), r#"max_lora="2",running_lora_adapters="sql",waiting_lora_adapters="""#);
    let (status, text) = post(&server, "/v1/unload_lora_adapter", &json!({"lora_name": "sql"}));
    assert_eq!((status, &error_of(&text)["type"]), (409, &json!("invalid_request_error")), "{text}");
    drop(reader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lora_info(&server).contains("\"sql\"") {
        assert!(std::time::Instant::now() < deadline, "the disconnected request was never aborted");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    // Unloading: the name must be given and known; an unloaded adapter is an unknown model.
    for name in ["sql", "math"] {
        let expected = format!("Success: LoRA adapter '{name}' removed successfully.");
        assert_eq!(post(&server, "/v1/unload_lora_adapter", &json!({"lora_name": name})), (200, expected));
    }
    assert_eq!(post(&server, "/v1/unload_lora_adapter", &json!({})).0, 400);
    let (status, text) = post(&server, "/v1/unload_lora_adapter", &json!({"lora_name": "sql"}));
    assert_eq!(
        (status, error_of(&text)["message"].as_str().unwrap()),
        (404, "The lora adapter 'sql' cannot be found.")
    );
    let (status, _) =
        post(&server, "/v1/completions", &json!({"model": "sql", "prompt": PROMPT, "max_tokens": 1}));
    assert_eq!(status, 404);
    let (_, text) = request_with(server.addr, "GET", "/v1/models", None, &KEY);
    let ids: Vec<Value> = serde_json::from_str::<Value>(&text).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|card| card["id"].clone())
        .collect();
    assert_eq!(ids, [json!(MODEL), json!("chat")]);
}

/// Without `--enable-lora` the load route refuses (400) and the gauge has empty labels.
#[test]
fn a_server_without_lora_refuses_to_load_one() {
    let config = EngineConfig {
        model: Some(family_dir("llama")),
        cache: CacheConfig { num_gpu_blocks: 16, ..CacheConfig::default() },
        ..EngineConfig::default()
    };
    let options = ServerOptions { metrics_prefix: MetricsPrefix::Vllm, ..ServerOptions::default() };
    let server = TestServer::start_with(Engine::new(config).unwrap(), options);
    let body = json!({"lora_name": "sql", "lora_path": adapter("sql")}).to_string();
    let (status, text) = request_with(server.addr, "POST", "/v1/load_lora_adapter", Some(&body), &[]);
    assert_eq!(status, 400, "{text}");
    assert!(error_of(&text)["message"].as_str().unwrap().contains("--enable-lora"), "{text}");
    assert_eq!(lora_info(&server), r#"max_lora="",running_lora_adapters="",waiting_lora_adapters="""#);
}
