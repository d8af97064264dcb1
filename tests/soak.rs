//! The soak: 64 concurrent clients against `pagoda serve` on 127.0.0.1 — completions and
//! chat, streaming and not, `n` up to 3, stop strings, seeded sampling, streams dropped
//! mid-way — for a fixed time; then every request that was not dropped must hold exactly
//! the text and tokens the library produces for it alone, the server must hold no request
//! and no KV block, its finished + aborted requests must equal the sequences sent, and its
//! resident memory after warm-up must stay within ±10% (checked for runs of a minute or
//! more; shorter runs print it).
//!
//! `cargo test --test soak` runs a short version on the simulated model (CI);
//! `scripts/soak.sh` runs 10 minutes on the simulated model and 2 on the default model:
//! `cargo test --test soak -- --duration SECS [--clients N] [--executor sim|wgpu] [--seed S]`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use pagoda::model::testing::TinyLlama;
use pagoda::{ChatMessage, Engine, EngineConfig, ExecutorKind, Prompt, SamplingParams};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const WORDS: [&str; 16] = [
    "the", "river", "of", "stone", "and", "light", "carries", "a", "quiet", "song", "over", "seven", "hills",
    "to", "morning", "sea",
];
const STOPS: [&str; 5] = ["e", " the", "\n", ".", "ng"];

struct Options {
    duration: Duration,
    clients: usize,
    executor: ExecutorKind,
    seed: u64,
    skip: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        duration: Duration::from_secs(5),
        clients: 64,
        executor: ExecutorKind::Sim,
        seed: 0,
        skip: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--duration" => {
                options.duration = Duration::from_secs(value()?.parse().map_err(|_| "bad --duration")?)
            }
            "--clients" => options.clients = value()?.parse().map_err(|_| "bad --clients")?,
            "--seed" => options.seed = value()?.parse().map_err(|_| "bad --seed")?,
            "--executor" => {
                options.executor = match value()?.as_str() {
                    "sim" => ExecutorKind::Sim,
                    "wgpu" => ExecutorKind::Wgpu,
                    other => return Err(format!("unknown executor {other}")),
                }
            }
            // A test-name filter `cargo test` passes to every test binary: run only if it
            // names the soak.
            filter if !filter.starts_with('-') => options.skip |= !"soak".contains(filter),
            // Flags cargo's test runner passes to every test binary.
            _ => {}
        }
    }
    Ok(options)
}

/// One request a client sent and what it got back.
struct Exchange {
    chat: bool,
    prompt: String,
    params: SamplingParams,
    n: usize,
    dropped: bool,
    /// Per choice: text, finish reason, completion tokens (summed over choices for usage).
    texts: Vec<String>,
    finish_reasons: Vec<Option<String>>,
    completion_tokens: Option<u64>,
}

fn random_request(rng: &mut ChaCha8Rng) -> (Exchange, bool) {
    let words = rng.random_range(3..40);
    let prompt: Vec<&str> = (0..words).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect();
    let stop: Vec<String> = if rng.random_bool(0.3) {
        (0..rng.random_range(1..=2)).map(|_| STOPS[rng.random_range(0..STOPS.len())].to_owned()).collect()
    } else {
        Vec::new()
    };
    let params = SamplingParams {
        temperature: if rng.random_bool(0.3) { 0.0 } else { 0.9 },
        seed: Some(rng.random_range(0..1u64 << 32)),
        max_tokens: rng.random_range(4..48),
        stop,
        ..SamplingParams::default()
    };
    let n = [1, 1, 1, 2, 3][rng.random_range(0..5)];
    let stream = rng.random_bool(0.5);
    let exchange = Exchange {
        chat: rng.random_bool(0.5),
        prompt: prompt.join(" "),
        params,
        n,
        dropped: stream && rng.random_bool(0.15),
        texts: vec![String::new(); n],
        finish_reasons: vec![None; n],
        completion_tokens: None,
    };
    (exchange, stream)
}

fn body(exchange: &Exchange, stream: bool) -> Value {
    let p = &exchange.params;
    let mut body = json!({
        "max_tokens": p.max_tokens, "temperature": p.temperature, "seed": p.seed, "n": exchange.n,
        "stream": stream, "stop": p.stop,
    });
    if exchange.chat {
        body["messages"] = json!([{"role": "user", "content": exchange.prompt}]);
    } else {
        body["prompt"] = json!(exchange.prompt);
    }
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// Sends one request; fills in the exchange's answer. Errors are the soak's failures.
fn send(addr: SocketAddr, exchange: &mut Exchange, stream: bool) -> Result<(), String> {
    let path = if exchange.chat { "/v1/chat/completions" } else { "/v1/completions" };
    let payload = body(exchange, stream).to_string();
    let mut socket = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    write!(
        socket,
        "POST {path} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )
    .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(socket);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).map_err(|e| e.to_string())?;
    if !status_line.contains(" 200 ") {
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
        return Err(format!("{status_line}{rest}"));
    }
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    if !stream {
        let mut raw = String::new();
        reader.read_to_string(&mut raw).map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_str(&raw).map_err(|e| format!("{e}: {raw}"))?;
        for choice in answer["choices"].as_array().ok_or("no choices")? {
            let index = choice["index"].as_u64().ok_or("no index")? as usize;
            let text = if exchange.chat { &choice["message"]["content"] } else { &choice["text"] };
            exchange.texts[index] = text.as_str().unwrap_or_default().to_owned();
            exchange.finish_reasons[index] = choice["finish_reason"].as_str().map(str::to_owned);
        }
        exchange.completion_tokens = answer["usage"]["completion_tokens"].as_u64();
        return Ok(());
    }
    let mut events = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("the stream ended before [DONE]".into());
        }
        let Some(data) = line.trim_end().strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            return Ok(());
        }
        events += 1;
        if exchange.dropped && events == 2 {
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
        if chunk.get("error").is_some() {
            return Err(format!("error event: {data}"));
        }
        if let Some(tokens) = chunk["usage"]["completion_tokens"].as_u64() {
            exchange.completion_tokens = Some(tokens);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let index = choice["index"].as_u64().ok_or("no index")? as usize;
            let text = if exchange.chat { &choice["delta"]["content"] } else { &choice["text"] };
            exchange.texts[index].push_str(text.as_str().unwrap_or_default());
            if let Some(reason) = choice["finish_reason"].as_str() {
                exchange.finish_reasons[index] = Some(reason.to_owned());
            }
        }
    }
}

/// The server's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut socket = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    write!(socket, "GET {path} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut raw = String::new();
    socket.read_to_string(&mut raw).map_err(|e| e.to_string())?;
    let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    Ok((status, body))
}

/// Sum of every series of a metric (any prefix, any labels) in the Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let base = series.split('{').next()?;
            (base.rsplit(':').next() == Some(name)).then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(model: &PathBuf, executor: ExecutorKind) -> Result<Server, String> {
    let port =
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let executor = if executor == ExecutorKind::Sim { "sim" } else { "wgpu" };
    let child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string(), "--executor", executor])
        .arg("--model")
        .arg(model)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let server = Server { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
    for _ in 0..1200 {
        if get(server.addr, "/health").is_ok_and(|(status, _)| status == 200) {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("the server never became healthy".into())
}

/// Per choice, text and finish reason; and the completion tokens of all choices.
type Answer = (Vec<String>, Vec<Option<String>>, u64);

/// What the library produces for `exchange` alone.
fn library(engine: &mut Engine, exchange: &Exchange) -> Result<Answer, String> {
    let prompt = if exchange.chat {
        Prompt::Chat(vec![ChatMessage::new("user", exchange.prompt.as_str())])
    } else {
        Prompt::Text(exchange.prompt.clone())
    };
    let (mut texts, mut reasons, mut tokens) = (Vec::new(), Vec::new(), 0);
    for choice in 0..exchange.n as u64 {
        let params = SamplingParams {
            seed: exchange.params.seed.map(|seed| seed.wrapping_add(choice)),
            ..exchange.params.clone()
        };
        let out = engine.generate([prompt.clone()], &params).map_err(|e| e.to_string())?.remove(0);
        texts.push(out.text);
        reasons.push(out.finish_reason.map(|r| r.as_str().to_owned()));
        tokens += out.token_ids.len() as u64;
    }
    Ok((texts, reasons, tokens))
}

/// What the clients sent and what checking it against the library found.
#[derive(Default)]
struct Tally {
    requests: usize,
    sequences: usize,
    dropped: usize,
    checked: usize,
    tokens_checked: u64,
    mismatches: Vec<String>,
}

impl Tally {
    /// Counts `exchange` and, unless it was dropped, checks it against `engine` alone.
    fn check(&mut self, engine: &mut Engine, exchange: &Exchange) -> Result<(), String> {
        self.requests += 1;
        self.sequences += exchange.n;
        if exchange.dropped {
            self.dropped += 1;
            return Ok(());
        }
        let (texts, reasons, tokens) = library(engine, exchange)?;
        self.checked += 1;
        self.tokens_checked += tokens;
        if texts != exchange.texts
            || reasons != exchange.finish_reasons
            || Some(tokens) != exchange.completion_tokens
        {
            self.mismatches.push(format!(
                "{} {:?} n={} {:?}: server {:?} {:?} {:?}, library {texts:?} {reasons:?} {tokens}",
                if exchange.chat { "chat" } else { "completion" },
                exchange.prompt,
                exchange.n,
                exchange.params,
                exchange.texts,
                exchange.finish_reasons,
                exchange.completion_tokens
            ));
        }
        Ok(())
    }

    fn add(&mut self, other: Tally) {
        self.requests += other.requests;
        self.sequences += other.sequences;
        self.dropped += other.dropped;
        self.checked += other.checked;
        self.tokens_checked += other.tokens_checked;
        self.mismatches.extend(other.mismatches);
    }
}

/// The library engine answers are checked against.
fn library_engine(model: &Path, executor: ExecutorKind) -> Result<Engine, String> {
    let config = EngineConfig { model: Some(model.to_owned()), executor, ..EngineConfig::default() };
    Engine::new(config).map_err(|e| e.to_string())
}

fn run(options: &Options) -> Result<(), String> {
    let tiny = tempfile::tempdir().map_err(|e| e.to_string())?;
    let model = match options.executor {
        ExecutorKind::Sim => {
            TinyLlama::new(0).write_hf_dir(tiny.path()).map_err(|e| e.to_string())?;
            tiny.path().to_owned()
        }
        ExecutorKind::Wgpu => pagoda::model::default_model_path().map_err(|e| e.to_string())?,
    };
    let server = start_server(&model, options.executor)?;
    let pid = server.child.id();
    let addr = server.addr;
    let started = Instant::now();
    let deadline = started + options.duration;
    // The simulated model is cheap: each client checks its answers as they come, against
    // its own engine. The real model is checked once the clients are done, on one engine.
    let inline = options.executor == ExecutorKind::Sim;
    let clients: Vec<_> = (0..options.clients)
        .map(|client| {
            let seed = options.seed.wrapping_mul(1000).wrapping_add(client as u64);
            let model = model.clone();
            let executor = options.executor;
            std::thread::spawn(move || -> Result<(Tally, Vec<Exchange>), String> {
                let mut engine = if inline { Some(library_engine(&model, executor)?) } else { None };
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut tally = Tally::default();
                let mut pending = Vec::new();
                while Instant::now() < deadline {
                    let (mut exchange, stream) = random_request(&mut rng);
                    send(addr, &mut exchange, stream)?;
                    match engine.as_mut() {
                        Some(engine) => tally.check(engine, &exchange)?,
                        None => pending.push(exchange),
                    }
                }
                Ok((tally, pending))
            })
        })
        .collect();
    let warm_up = options.duration / 4;
    std::thread::sleep(warm_up);
    let rss_warm = rss_kib(pid);
    let mut tally = Tally::default();
    let mut pending = Vec::new();
    for client in clients {
        let (client_tally, client_pending) = client.join().map_err(|_| "a client panicked")??;
        tally.add(client_tally);
        pending.extend(client_pending);
    }
    let elapsed = started.elapsed();

    let mut text = String::new();
    for _ in 0..600 {
        text = get(addr, "/metrics")?.1;
        if metric(&text, "num_requests_running") + metric(&text, "num_requests_waiting") == 0.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_end = rss_kib(pid);
    let finished = ["stop", "length", "abort", "error"].map(|reason| {
        text.lines()
            .filter(|l| l.contains("request_success_total{") && l.contains(&format!("\"{reason}\"")))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>()
    });
    if !pending.is_empty() {
        let mut engine = library_engine(&model, options.executor)?;
        for exchange in &pending {
            tally.check(&mut engine, exchange)?;
        }
    }
    let drift =
        if rss_warm == 0 { 0.0 } else { (rss_end as f64 - rss_warm as f64) / rss_warm as f64 * 100.0 };
    let executor = if options.executor == ExecutorKind::Sim { "sim" } else { "wgpu" };
    println!(
        "soak {executor}: {} clients for {:.0} s: {} requests ({} sequences, {} dropped mid-stream), {} checked against the library alone ({} tokens), {} mismatches",
        options.clients,
        elapsed.as_secs_f64(),
        tally.requests,
        tally.sequences,
        tally.dropped,
        tally.checked,
        tally.tokens_checked,
        tally.mismatches.len()
    );
    println!(
        "soak {executor}: finished stop {} + length {} + abort {} + error {} = {} for {} sequences sent; kv_cache_usage_perc {}, running {}, waiting {}",
        finished[0],
        finished[1],
        finished[2],
        finished[3],
        finished.iter().sum::<f64>(),
        tally.sequences,
        metric(&text, "kv_cache_usage_perc"),
        metric(&text, "num_requests_running"),
        metric(&text, "num_requests_waiting"),
    );
    println!(
        "soak {executor}: resident memory {rss_warm} KiB after warm-up ({:.0} s), {rss_end} KiB at the end: drift {drift:+.1}%",
        warm_up.as_secs_f64()
    );
    let mut failures = tally.mismatches;
    if finished.iter().sum::<f64>() != tally.sequences as f64 || finished[3] != 0.0 {
        failures.push("finished + aborted requests differ from the sequences sent, or some failed".into());
    }
    if metric(&text, "kv_cache_usage_perc") != 0.0 || metric(&text, "num_requests_running") != 0.0 {
        failures.push("the server still holds requests or KV blocks".into());
    }
    if options.duration >= Duration::from_secs(60) && drift.abs() > 10.0 {
        failures.push(format!("resident memory drifted {drift:+.1}% after warm-up"));
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

fn main() -> ExitCode {
    let result = options().and_then(|options| if options.skip { Ok(()) } else { run(&options) });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("soak failed: {message}");
            ExitCode::FAILURE
        }
    }
}
