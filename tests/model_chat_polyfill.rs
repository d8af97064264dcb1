//! Chat templates polyfilled for what they do not support (llama.cpp's chat engine does the
//! same): every real template (llama.cpp's collection in `PAGODA_CHAT_TEMPLATES`, the family
//! models' in `PAGODA_FAMILIES_DIR`, SmolLM2's) renders a system prompt, a tool round trip
//! and a multi-turn chat with every text it was given; where the template supports what a
//! conversation uses, the render is exactly plain minijinja's render of the template. The
//! family templates probe as what they are known to support, and the library's chat
//! prompts (which the C ABI's `pagoda_engine_add_chat` makes) render through the same path.

use std::path::{Path, PathBuf};

mod chat_support;

use chat_support::{PLAIN_NOW, plain};
use pagoda::model::chat::{ChatCapabilities, ChatTemplate, ToolFormat};
use pagoda::model::gguf::GgufFile;
use pagoda::model::{ChatMessage, default_model_path};
use pagoda::{Engine, EngineConfig, ExecutorKind, Prompt, SamplingParams};
use serde_json::{Value, json};

/// A conversation to render, the texts its render must show, and whether a template with
/// given capabilities renders it without a polyfill.
struct Case {
    name: &'static str,
    messages: Vec<ChatMessage>,
    tools: Option<Vec<Value>>,
    needles: &'static [&'static str],
    native: fn(&ChatCapabilities) -> bool,
}

fn message(role: &str, content: &str) -> ChatMessage {
    ChatMessage::new(role, content)
}

fn call(name: &str, city: &str, id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": {"city": city}}})
}

fn result(content: &str, id: &str) -> ChatMessage {
    let mut result = message("tool", content);
    result.tool_call_id = Some(id.into());
    result
}

fn cases() -> Vec<Case> {
    let weather = json!({"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    let mut asks = message("assistant", "");
    asks.tool_calls = vec![call("get_weather", "Oslo", "call_1")];
    let round_trip = vec![message("user", "Weather here?"), asks.clone(), result("sunny-21C", "call_1")];
    let mut asks_twice = message("assistant", "");
    asks_twice.tool_calls =
        vec![call("get_weather", "Oslo", "call_1"), call("get_weather", "Bergen", "call_2")];
    let everything = vec![
        message("system", "Answer in French."),
        message("user", "Weather in both places?"),
        asks_twice,
        result("sunny-21C", "call_1"),
        result("rainy-12C", "call_2"),
        message("assistant", "Soleil et pluie."),
        message("user", "Thanks!"),
    ];
    let multi_turn = vec![message("user", "1+1?"), message("assistant", "two"), message("user", "and 2+2?")];
    vec![
        Case {
            name: "system prompt",
            messages: vec![message("system", "Answer in French."), message("user", "Hello there")],
            tools: None,
            needles: &["Answer in French.", "Hello there"],
            native: |caps| caps.system_role,
        },
        Case {
            name: "tools offered",
            messages: vec![message("user", "Weather in Oslo?")],
            tools: Some(vec![weather.clone()]),
            needles: &["get_weather", "Weather in Oslo?"],
            native: |caps| caps.tools,
        },
        Case {
            name: "tool round trip",
            messages: round_trip,
            tools: Some(vec![weather.clone()]),
            needles: &["Weather here?", "get_weather", "Oslo", "sunny-21C"],
            native: |caps| caps.tools && caps.tool_calls && caps.tool_responses,
        },
        Case {
            name: "system, parallel calls and a follow-up",
            messages: everything,
            tools: Some(vec![weather]),
            needles: &[
                "Answer in French.",
                "Oslo",
                "Bergen",
                "sunny-21C",
                "rainy-12C",
                "Soleil et pluie.",
                "Thanks!",
            ],
            native: |caps| caps.system_role && caps.tools && caps.parallel_tool_calls && caps.tool_responses,
        },
        Case {
            name: "multi-turn",
            messages: multi_turn,
            tools: None,
            needles: &["1+1?", "two", "and 2+2?"],
            native: |_| true,
        },
    ]
}

/// The template alone: minijinja configured as transformers renders chat templates.
fn plain_render(source: &str, messages: &[ChatMessage], tools: Option<&[Value]>) -> Result<String, String> {
    let env = plain(source).map_err(|e| e.to_string())?;
    let base = minijinja::context! {
        messages => messages, add_generation_prompt => true, bos_token => "<s>", eos_token => "</s>",
    };
    let ctx = match tools {
        Some(tools) => minijinja::context! { tools => tools, ..base },
        None => base,
    };
    env.get_template("chat").and_then(|t| t.render(ctx)).map_err(|e| e.to_string())
}

/// Renders every case with `template`; the failures, each named.
fn check(name: &str, template: &ChatTemplate, source: &str) -> Vec<String> {
    let caps = template.capabilities();
    let mut failures = Vec::new();
    for case in cases() {
        let what = format!("{name}, {} ({caps})", case.name);
        match template.render_with_tools(&case.messages, case.tools.as_deref(), true) {
            Err(error) => failures.push(format!("{what}: {error}")),
            Ok(text) => {
                let missing: Vec<_> = case.needles.iter().filter(|needle| !text.contains(*needle)).collect();
                if !missing.is_empty() {
                    failures.push(format!("{what}: {missing:?} missing from {text:?}"));
                }
                if (case.native)(&caps)
                    && plain_render(source, &case.messages, case.tools.as_deref()) != Ok(text)
                {
                    failures.push(format!("{what}: supported natively, yet not the template's own render"));
                }
            }
        }
    }
    failures
}

fn env_dir(var: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(var).unwrap_or_else(|| panic!("{var} names the test data directory")))
}

#[test]
fn llama_cpp_templates_render_every_case() {
    let dir = env_dir("PAGODA_CHAT_TEMPLATES");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jinja"))
        .collect();
    paths.sort();
    let (mut checked, mut failures, mut capabilities) = (0, Vec::new(), Vec::new());
    for path in &paths {
        let source = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        // Templates minijinja itself cannot run are another matter.
        let Ok(template) = ChatTemplate::new(&source, "<s>", "</s>") else { continue };
        template.fix_clock(PLAIN_NOW);
        if plain_render(&source, &[message("user", "Hi")], None).is_err() {
            continue;
        }
        checked += 1;
        capabilities.push((name.to_string(), template.capabilities()));
        failures.extend(check(&name, &template, &source));
    }
    println!("{checked} of {} templates checked", paths.len());
    for (name, caps) in &capabilities {
        println!("{name}: {caps}");
    }
    assert!(checked >= 50, "only {checked} templates checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The template of HF directory `dir`, with the BOS and EOS texts [`plain_render`] gives it.
fn hf_template(dir: &Path) -> (ChatTemplate, String) {
    let template = ChatTemplate::from_hf_dir(dir, "<s>", "</s>").unwrap();
    let source = template.source().to_owned();
    (template, source)
}

#[test]
fn family_and_smollm2_templates_render_every_case_and_probe_as_known() {
    let families = env_dir("PAGODA_FAMILIES_DIR");
    let all = ChatCapabilities::ALL;
    let no_tools = ChatCapabilities { tools: false, tool_calls: false, parallel_tool_calls: false, ..all };
    let alternating =
        ChatCapabilities { non_alternating: false, assistant_first: false, ..Default::default() };
    // What each template renders itself, read off its source.
    let expected = [
        ("gemma2", alternating),
        ("gemma3", ChatCapabilities { system_role: true, ..alternating }),
        ("mistral", ChatCapabilities { system_role: true, ..alternating }),
        (
            "phi3",
            ChatCapabilities {
                tools: false,
                tool_calls: false,
                parallel_tool_calls: false,
                tool_responses: false,
                ..all
            },
        ),
        ("qwen2", all),
        ("qwen3", all),
        ("llama", no_tools),
    ];
    let mut failures = Vec::new();
    for (name, caps) in expected {
        let (template, source) = hf_template(&families.join(name));
        assert_eq!(template.capabilities(), caps, "{name}: {}", template.capabilities());
        failures.extend(check(name, &template, &source));
    }
    let smollm2 =
        ChatTemplate::from_gguf(&GgufFile::open(default_model_path().unwrap()).unwrap(), "<s>", "</s>");
    let smollm2 = smollm2.unwrap();
    let source = smollm2.source().to_owned();
    assert_eq!(smollm2.capabilities(), no_tools);
    assert_eq!(smollm2.tool_format(), ToolFormat::Hermes);
    failures.extend(check("smollm2", &smollm2, &source));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn library_chat_prompts_take_a_system_message_and_tools_on_gemma2() {
    let model = env_dir("PAGODA_FAMILIES_DIR").join("gemma2");
    let config = EngineConfig { model: Some(model), executor: ExecutorKind::Sim, ..EngineConfig::default() };
    let mut engine = Engine::new(config).unwrap();
    let messages = vec![message("system", "Be brief."), message("user", "Hi")];
    let tools = vec![json!({"type": "function", "function": {"name": "get_weather"}})];
    let template = engine.chat_template().unwrap();
    let text = template.render_with_tools(&messages, Some(&tools), true).unwrap();
    assert!(text.contains("<start_of_turn>user\nBe brief.\n\nYou can call functions"), "{text}");
    let expected = engine.tokenizer().encode(&text, true).unwrap();
    let prompt = Prompt::ChatWithTools { messages: messages.clone(), tools };
    assert_eq!(engine.encode_prompt(&prompt).unwrap(), expected);
    engine.add_request(Prompt::Chat(messages), SamplingParams::greedy(1)).unwrap();
}
