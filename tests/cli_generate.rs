//! The `pagoda` binary on the tiny model with the simulated executor: `generate --json`,
//! `--prompts-file`, `--chat`, `bench --json`, `info`, and clear errors; and a quiet
//! `generate`, prompt logprobs and `perplexity` on the GPU of a headless machine.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use pagoda::TokenId;
use pagoda::executor::sim::{CostModel, SimConfig, next_token};
use pagoda::model::testing::TinyLlama;
use pagoda::model::{ChatMessage, ModelFiles};
use serde_json::Value;

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda")).args(args).env("RUST_LOG", "error").output().unwrap()
}

fn tiny_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
    dir
}

fn json_lines(output: &Output) -> Vec<Value> {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The simulated model's continuation (seed 3, the tiny vocabulary, EOS 2).
fn continuation(prompt: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
    let sim = SimConfig { vocab_size: 275, eos_token_id: Some(2), seed: 3, cost: CostModel::default() };
    let mut history = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < max_tokens && out.last() != Some(&2) {
        let token = next_token(&sim, &history);
        history.push(token);
        out.push(token);
    }
    out
}

fn ids(value: &Value) -> Vec<TokenId> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as TokenId).collect()
}

fn sim_args<'a>(dir: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args =
        vec!["generate", "--model", dir.to_str().unwrap(), "--executor", "sim", "--seed", "3", "--json"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn generate_json_prints_one_exact_object_per_prompt() {
    let dir = tiny_dir();
    let tokenizer = ModelFiles::open(dir.path()).unwrap().tokenizer;
    let lines = json_lines(&pagoda(&sim_args(dir.path(), &["--max-tokens", "6", "the tower", "x"])));
    assert_eq!(lines.len(), 2);
    for (line, prompt) in lines.iter().zip(["the tower", "x"]) {
        let prompt_ids = tokenizer.encode(prompt, true).unwrap();
        assert_eq!(ids(&line["prompt_token_ids"]), prompt_ids);
        let expected = continuation(&prompt_ids, 6);
        assert_eq!(ids(&line["token_ids"]), expected);
        let finish = if expected.last() == Some(&2) { "stop" } else { "length" };
        assert_eq!(line["finish_reason"], finish);
        assert!(line["text"].is_string());
    }
}

#[test]
fn prompts_file_and_chat_prompts() {
    let dir = tiny_dir();
    let file = dir.path().join("prompts.jsonl");
    std::fs::write(&file, "\"first line\"\n\n\"two\\nlines\"\n").unwrap();
    let from_file = json_lines(&pagoda(&sim_args(dir.path(), &["--prompts-file", file.to_str().unwrap()])));
    let direct = json_lines(&pagoda(&sim_args(dir.path(), &["first line", "two\nlines"])));
    assert_eq!(from_file, direct);

    let files = ModelFiles::open(dir.path()).unwrap();
    let rendered = files.chat_template.unwrap().render(&[ChatMessage::new("user", "hi")], true).unwrap();
    let chat = json_lines(&pagoda(&sim_args(dir.path(), &["--chat", "hi"])));
    assert_eq!(ids(&chat[0]["prompt_token_ids"]), files.tokenizer.encode(&rendered, true).unwrap());
}

#[test]
fn bench_on_the_simulated_executor_prints_one_json_report() {
    let output = pagoda(&[
        "bench",
        "--executor",
        "sim",
        "--workload",
        "shared-prefix",
        "--num-requests",
        "20",
        "--json",
    ]);
    let report = &json_lines(&output)[0];
    assert_eq!(report["workload"], "shared-prefix");
    assert_eq!(report["num_finished"], 20);
    for key in ["output_throughput", "total_throughput", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s"]
    {
        assert!(report[key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert!(report["prefix_cache_hit_rate"].as_f64().unwrap() > 0.0);
    for key in ["num_preemptions", "num_recomputed_tokens", "peak_kv_cache_usage"] {
        assert!(report[key].is_number(), "{key}");
    }
}

#[test]
fn info_describes_the_model() {
    let dir = tiny_dir();
    let output = pagoda(&["info", "--model", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("architecture llama, 2 layers, hidden 64"), "{text}");
    assert!(text.contains("chat template yes"), "{text}");
    // The tiny model: embedding, 2 × 9 layer tensors, the final norm, all f32.
    assert!(text.contains("weights: 20 tensors"), "{text}");
    assert!(text.contains("    f32       20 tensors"), "{text}");
}

#[test]
fn structured_output_flags_hold_the_output() {
    let dir = tiny_dir();
    let lines = json_lines(&pagoda(&sim_args(
        dir.path(),
        &["--choice", "north,south,east", "--max-tokens", "16", "go"],
    )));
    assert!(["north", "south", "east"].contains(&lines[0]["text"].as_str().unwrap()), "{}", lines[0]);
    let lines =
        json_lines(&pagoda(&sim_args(dir.path(), &["--regex", "[0-9]{3}", "--max-tokens", "16", "go"])));
    let text = lines[0]["text"].as_str().unwrap();
    assert!(text.len() == 3 && text.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, r#"{"enum": ["on", "off"]}"#).unwrap();
    let lines =
        json_lines(&pagoda(&sim_args(dir.path(), &["--json-schema", schema.to_str().unwrap(), "go"])));
    assert!(["\"on\"", "\"off\""].contains(&lines[0]["text"].as_str().unwrap()), "{}", lines[0]);
    let output = pagoda(&sim_args(dir.path(), &["--regex", "(a", "go"]));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid regex constraint"));
    let output = pagoda(&sim_args(dir.path(), &["--regex", "a", "--choice", "a,b", "go"]));
    assert!(!output.status.success(), "two constraints were accepted");
}

#[test]
fn mistakes_give_clear_errors() {
    let dir = tiny_dir();
    let output = pagoda(&sim_args(dir.path(), &[]));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no prompts"));
    let output = pagoda(&sim_args(dir.path(), &["--temperature", "-1", "hi"]));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("temperature must be"));
    let output = pagoda(&["bench", "--executor", "sim", "--workload", "nonsense"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown workload"));
    let output = pagoda(&["generate", "--model", "/nonexistent/model.gguf", "hi"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: "));
}

/// On a machine without a display, `generate` on the GPU prints nothing on stderr but its
/// summary line: no windowing probe the user did not ask for.
#[test]
fn generate_on_a_headless_gpu_prints_only_its_summary() {
    let dir = tiny_dir();
    let model = dir.path().to_str().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["generate", "--model", model, "--temperature", "0", "--max-tokens", "2", "the tower"])
        .env_remove("RUST_LOG")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("NODEVICE_SELECT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {stderr}");
    assert!(lines[0].starts_with("1 prompt(s): 6 prompt and 2 generated tokens"), "stderr: {stderr}");
}

/// `--prompt-logprobs N` adds each prompt token's logprob, rank and top N to the `--json`
/// line (the tiny model on the GPU: the simulated executor has no logits).
#[test]
fn generate_json_prints_prompt_logprobs() {
    let dir = tiny_dir();
    let model = dir.path().to_str().unwrap();
    let args = ["generate", "--model", model, "--temperature", "0", "--max-tokens", "1", "--json"];
    let lines = json_lines(&pagoda(&[&args[..], &["--prompt-logprobs", "2", "the tower"]].concat()));
    let prompt = ids(&lines[0]["prompt_token_ids"]);
    let entries = lines[0]["prompt_logprobs"].as_array().unwrap();
    assert_eq!(entries.len(), prompt.len());
    assert!(entries[0].is_null());
    for (entry, &token) in entries.iter().zip(&prompt).skip(1) {
        assert_eq!(entry["token_id"], token);
        assert!(entry["logprob"].as_f64().unwrap() <= 0.0 && entry["rank"].as_u64().unwrap() >= 1);
        assert_eq!(entry["top"].as_array().unwrap().len(), 2);
    }
    let output = pagoda(&[&args[..], &["--prompt-logprobs", "21", "the tower"]].concat());
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("prompt_logprobs must be at most 20"));
}

/// `pagoda chat` on the simulated model, one user line on its stdin: what it prints.
fn chat(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["chat", "--model", dir.to_str().unwrap(), "--executor", "sim", "--seed", "3"];
    args.extend_from_slice(&["--max-tokens", "12"]);
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(&args)
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Hi\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The simulated model never closes a thinking block, so under deepseek_r1 its whole reply is
/// reasoning: printed as it is off a terminal (no dimming codes), left out with
/// --hide-reasoning.
#[test]
fn chat_prints_reasoning_or_hides_it() {
    let dir = tiny_dir();
    let plain = chat(dir.path(), &[]);
    assert!(plain.len() > 1 && plain.ends_with('\n'), "{plain:?}");
    assert_eq!(chat(dir.path(), &["--reasoning-parser", "deepseek_r1"]), plain);
    assert_eq!(chat(dir.path(), &["--reasoning-parser", "deepseek_r1", "--hide-reasoning"]), "\n");
    let off = chat(
        dir.path(),
        &[
            "--reasoning-parser",
            "qwen3",
            "--hide-reasoning",
            "--chat-template-kwargs",
            r#"{"enable_thinking": false}"#,
        ],
    );
    assert_eq!(off, plain, "thinking off: all answer");
}

/// `pagoda perplexity` prints the library's figures (the tiny model on the GPU); a text shorter
/// than two chunks and the simulated executor (no logits) are clear errors.
#[test]
fn perplexity_prints_the_librarys_figures() {
    use pagoda::engine::perplexity::{PerplexityOptions, perplexity};
    use pagoda::{Engine, EngineConfig, ExecutorKind};
    let dir = tiny_dir();
    let model = dir.path().to_str().unwrap();
    let path = dir.path().join("text.txt");
    let text = "the tower of the old town stands by the river, and the bridge below it opens twice a day";
    std::fs::write(&path, format!("{text}\n")).unwrap();
    let file = path.to_str().unwrap();
    let lines = json_lines(&pagoda(&["perplexity", file, "--model", model, "-c", "8", "--json"]));
    let config = EngineConfig {
        model: Some(dir.path().into()),
        executor: ExecutorKind::Wgpu,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).unwrap();
    let options = PerplexityOptions { ctx_size: 8, max_chunks: None };
    let expected = perplexity(&mut engine, text, &options, |_, _, _| {}).unwrap();
    let line = &lines[0];
    assert_eq!(line["num_tokens"], expected.num_tokens);
    assert_eq!(line["chunks"], expected.num_tokens / 8);
    assert_eq!(line["num_scored"], 3 * (expected.num_tokens / 8));
    // serde_json reads a printed f64 back to within an ulp (no float_roundtrip here).
    let same = |value: &Value, expected: f64| (value.as_f64().unwrap() / expected - 1.0).abs() < 1e-15;
    assert!(same(&line["ppl"], expected.ppl) && same(&line["ppl_error"], expected.ppl_error), "{line}");
    let running = line["running_ppl"].as_array().unwrap();
    assert_eq!(running.len(), expected.running_ppl.len());
    assert!(running.iter().zip(&expected.running_ppl).all(|(value, &ppl)| same(value, ppl)), "{line}");
    assert_eq!(expected.ppl, expected.mean_nll.exp());

    let short = pagoda(&["perplexity", file, "--model", model, "-c", "512"]);
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("needs at least 1024"), "{short:?}");
    let sim = pagoda(&["perplexity", file, "--model", model, "-c", "8", "--executor", "sim"]);
    assert!(!sim.status.success());
    assert!(String::from_utf8_lossy(&sim.stderr).contains("prompt_logprobs is not served"), "{sim:?}");
}
