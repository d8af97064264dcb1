//! `pagoda`: generate, chat, serve, bench and info from the command line.

use std::io::{BufRead, IsTerminal, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand};
use pagoda::TokenId;
use pagoda::dtype::DType;
use pagoda::engine::args::{EngineArgs, GpuArgs};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::sim::SimConfig;
use pagoda::gpu::{GpuContext, resident_bytes};
use pagoda::model::chat::TemplateKwargs;
use pagoda::model::footprint::Footprint;
use pagoda::model::moe::RouterRule;
use pagoda::model::random::{RandomShape, write_random_model};
use pagoda::model::reasoning::{ReasoningParser, Split, Thinking};
use pagoda::model::weights::WeightFile;
use pagoda::model::{ModelFiles, default_model_path, resolve_model_path};
#[cfg(feature = "server")]
use pagoda::server::limits::ServerLimits;
#[cfg(feature = "server")]
use pagoda::server::prometheus::MetricsPrefix;
use pagoda::structured::Constraint;
use pagoda::workload::wall::run_engine_workload;
use pagoda::workload::{BuiltinWorkload, WorkloadReport, run_workload};
use pagoda::{ChatMessage, CompletionOutput, Engine, EngineConfig, ExecutorKind, Prompt, SamplingParams};
use tracing_subscriber::EnvFilter;

/// A portable LLM inference engine: paged KV cache, prefix caching and a token-budget
/// scheduler on WGSL compute shaders (Vulkan, Metal, DX12).
#[derive(Debug, Parser)]
#[command(name = "pagoda", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Complete prompts and print the results.
    Generate(GenerateArgs),
    /// Chat interactively with the model (chat template, streamed replies).
    Chat(ChatArgs),
    /// Serve an OpenAI-compatible HTTP API.
    #[cfg(feature = "server")]
    Serve(ServeArgs),
    /// Run a workload and report throughput and latencies.
    Bench(BenchArgs),
    /// Measure a text file's perplexity as llama.cpp's llama-perplexity does.
    Perplexity(PerplexityArgs),
    /// Show the GPU adapter, its features and limits, and the model.
    Info(InfoArgs),
    /// Write a random-weight Llama model of a real shape as GGUF (for benchmarks).
    RandomModel(RandomModelArgs),
    /// Download a model from the Hugging Face Hub into its cache (no engine started).
    Pull(PullArgs),
    /// List the models in the Hugging Face cache: id, quant, size, family, whether pagoda runs it.
    Models,
    /// Remove a model from the Hugging Face cache.
    Rm(RmArgs),
    /// Watch the KV block pool live.
    #[cfg(feature = "viz")]
    Viz(pagoda::viz::VizArgs),
}

/// The engine configuration `engine` describes over the library's defaults, seeding unseeded
/// requests from `seed`.
fn engine_config(engine: &EngineArgs, seed: u64) -> anyhow::Result<EngineConfig> {
    let base =
        EngineConfig { seed, show_progress: std::io::stderr().is_terminal(), ..EngineConfig::default() };
    Ok(engine.apply(base)?)
}

/// Outside a desktop session (no `XDG_RUNTIME_DIR`: ssh, containers, CI), Mesa's Vulkan
/// device-selection layer still tries to reach a Wayland compositor, and libwayland prints
/// `error: XDG_RUNTIME_DIR is invalid ...` twice before any answer. No compositor can be
/// reached there, so the layer is switched off through its documented variable (unless
/// the user set it); wgpu picks the adapter itself.
fn quiet_headless_vulkan() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() && std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: the first thing `main` does, before any other thread exists.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

/// Sampling flags (vLLM's names and defaults).
#[derive(Debug, Clone, Args)]
struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Tokens to generate before EOS may end the output.
    #[arg(long, default_value_t = 0)]
    min_tokens: usize,
    /// Softmax temperature; 0 is greedy.
    #[arg(long, default_value_t = 1.0)]
    temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: i32,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Drop tokens below min_p times the most likely one's probability.
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Seed: the same seed repeats the same output.
    #[arg(long)]
    seed: Option<u64>,
    /// Penalize tokens seen in prompt or output (1: off).
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// Penalize tokens already generated, once.
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// Penalize tokens already generated, per occurrence.
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// A string that ends the output (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Add BIAS (-100 to 100; -100 bans the token) to token ID's logit (repeatable).
    #[arg(long, value_name = "ID=BIAS", value_parser = parse_logit_bias)]
    logit_bias: Vec<(TokenId, f32)>,
    /// Keep generating past EOS.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    constraint: ConstraintArgs,
}

/// `--logit-bias`'s `ID=BIAS`.
fn parse_logit_bias(arg: &str) -> Result<(TokenId, f32), String> {
    let (id, bias) = arg.split_once('=').ok_or("expected ID=BIAS, e.g. 42=-100")?;
    let id = id.trim().parse().map_err(|_| format!("{id:?} is not a token id"))?;
    let bias = bias.trim().parse().map_err(|_| format!("{bias:?} is not a number"))?;
    Ok((id, bias))
}

/// Structured-output flags: at most one constraint on the output.
#[derive(Debug, Clone, Args)]
#[group(multiple = false)]
struct ConstraintArgs {
    /// Output JSON valid under the JSON Schema in this file.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<PathBuf>,
    /// Output any JSON object.
    #[arg(long)]
    json_object: bool,
    /// Output text matching this regular expression.
    #[arg(long, value_name = "REGEX")]
    regex: Option<String>,
    /// Output exactly one of these comma-separated strings.
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    choice: Option<Vec<String>>,
    /// Output a sentence of the Lark (or GBNF) grammar in this file.
    #[arg(long, value_name = "FILE")]
    grammar: Option<PathBuf>,
}

impl ConstraintArgs {
    /// The constraint the flags ask for, reading the schema or grammar file.
    fn constraint(&self) -> anyhow::Result<Option<Constraint>> {
        let read =
            |path: &PathBuf| std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()));
        if let Some(path) = &self.json_schema {
            let schema = serde_json::from_str(&read(path)?)
                .map_err(|e| anyhow!("{}: not a JSON schema: {e}", path.display()))?;
            return Ok(Some(Constraint::JsonSchema(schema)));
        }
        if let Some(path) = &self.grammar {
            return Ok(Some(Constraint::Grammar(read(path)?)));
        }
        Ok(match (&self.regex, &self.choice) {
            (Some(regex), _) => Some(Constraint::Regex(regex.clone())),
            (_, Some(choice)) => Some(Constraint::Choice(choice.clone())),
            _ => self.json_object.then_some(Constraint::JsonObject),
        })
    }
}

impl SamplingArgs {
    fn params(&self) -> anyhow::Result<SamplingParams> {
        Ok(SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            max_tokens: self.max_tokens,
            min_tokens: self.min_tokens,
            stop: self.stop.clone(),
            logit_bias: self.logit_bias.iter().copied().collect(),
            ignore_eos: self.ignore_eos,
            structured_outputs: self.constraint.constraint()?,
            ..SamplingParams::default()
        })
    }
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct GenerateArgs {
    /// Prompts to complete.
    prompts: Vec<String>,
    /// A file with one JSON string (a prompt) per line.
    #[arg(long)]
    prompts_file: Option<PathBuf>,
    /// Apply the chat template to each prompt as a single user message.
    #[arg(long)]
    chat: bool,
    /// Print one JSON object per prompt: prompt_token_ids, token_ids, text, finish_reason
    /// (and prompt_logprobs with --prompt-logprobs).
    #[arg(long)]
    json: bool,
    /// With --json, each prompt token's logprob and rank and the N most likely tokens at its
    /// position (null for the first token), as `prompt_logprobs`.
    #[arg(long, value_name = "N", requires = "json")]
    prompt_logprobs: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct ChatArgs {
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// Split each reply into reasoning (shown dimmed) and answer: qwen3, deepseek_r1 or
    /// gpt_oss (vLLM's names; openai_gptoss too).
    #[arg(long, value_name = "PARSER")]
    reasoning_parser: Option<ReasoningParser>,
    /// With --reasoning-parser, show only the answers.
    #[arg(long, requires = "reasoning_parser")]
    hide_reasoning: bool,
    /// Extra variables for the chat template as a JSON object, e.g. '{"enable_thinking": false}'.
    #[arg(long, value_name = "JSON", value_parser = parse_template_kwargs)]
    chat_template_kwargs: Option<TemplateKwargs>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

#[cfg(feature = "server")]
#[derive(Debug, Args)]
struct ServeArgs {
    /// The model, as `--model` takes it (`pagoda serve Qwen/Qwen3-8B`, as `vllm serve` does).
    #[arg(value_name = "MODEL", conflicts_with = "model")]
    model_arg: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model name clients pass [default: the Hub id as given, else the model file or
    /// directory name].
    #[arg(long)]
    served_model_name: Option<String>,
    /// Answer 503 while this many requests are waiting.
    #[arg(long, default_value_t = 1024)]
    max_waiting_requests: usize,
    /// Seed for requests that bring none.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Metric names' prefix: `vllm` names every metric exactly as vLLM does.
    #[arg(long, value_enum, default_value_t = MetricsPrefix::Pagoda)]
    metrics_prefix: MetricsPrefix,
    /// Publish KV-cache events: vLLM's KVEventsConfig as JSON, e.g.
    /// '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"}'.
    #[arg(long, value_parser = parse_kv_events_config)]
    kv_events_config: Option<pagoda::server::kv_events::KvEventsConfig>,
    /// Seconds a SIGTERM waits for requests in flight before aborting them.
    #[arg(long, default_value_t = 25)]
    shutdown_timeout: u64,
    /// Split chat replies into `reasoning_content` and `content`: qwen3, deepseek_r1 or
    /// gpt_oss (vLLM's names; openai_gptoss too).
    #[arg(long, value_name = "PARSER")]
    reasoning_parser: Option<ReasoningParser>,
    /// Requests to /v1/*, /tokenize and /detokenize must send `Authorization: Bearer KEY`
    /// (env PAGODA_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    limits: LimitsArgs,
}

/// What one request may ask of `pagoda serve` (`ServerLimits`).
#[cfg(feature = "server")]
#[derive(Debug, Args)]
#[command(next_help_heading = "Request limits")]
struct LimitsArgs {
    /// Largest request body in bytes; a larger one answers 413.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_body_bytes)]
    max_request_body_bytes: usize,
    /// Most sequences (prompts × n) one request may start.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_sequences)]
    max_sequences_per_request: usize,
    /// Most tokens (sequences × max_tokens) one request may ask to generate.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_requested_tokens)]
    max_tokens_per_request: usize,
    /// Most stop strings one request may give.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_stop_strings)]
    max_stop_strings: usize,
    /// Longest stop string, in bytes.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_stop_string_bytes)]
    max_stop_string_bytes: usize,
    /// Most stop token ids one request may give.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_stop_token_ids)]
    max_stop_token_ids: usize,
    /// Most logit_bias entries one request may give.
    #[arg(long, default_value_t = ServerLimits::DEFAULT.max_logit_bias)]
    max_logit_bias: usize,
}

#[cfg(feature = "server")]
impl LimitsArgs {
    fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_body_bytes: self.max_request_body_bytes,
            max_sequences: self.max_sequences_per_request,
            max_requested_tokens: self.max_tokens_per_request,
            max_stop_strings: self.max_stop_strings,
            max_stop_string_bytes: self.max_stop_string_bytes,
            max_stop_token_ids: self.max_stop_token_ids,
            max_logit_bias: self.max_logit_bias,
        }
    }
}

/// `--kv-events-config`'s JSON, checked.
#[cfg(feature = "server")]
fn parse_kv_events_config(json: &str) -> Result<pagoda::server::kv_events::KvEventsConfig, String> {
    pagoda::server::kv_events::KvEventsConfig::parse(json).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// random, shared-prefix, memory-pressure, long-prompt, input-grounded or
    /// multi-turn-chat.
    #[arg(long, default_value = "random")]
    workload: BuiltinWorkload,
    /// Requests in the workload; a comma list runs the workload once per count on the same
    /// engine (one report each).
    #[arg(long, default_value = "200", value_delimiter = ',', num_args = 1..)]
    num_requests: Vec<usize>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Make every prompt this many tokens (cut, or repeated from its start) [default: as drawn].
    #[arg(long)]
    input_len: Option<NonZeroUsize>,
    /// Make every request generate this many tokens [default: as drawn].
    #[arg(long)]
    output_len: Option<NonZeroUsize>,
    /// Sample every request at this temperature, each from its own seeded stream (the GPU
    /// executor samples on the host then); 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Time every kernel on the device with timestamp queries and report each variant's
    /// device time (each dispatch then runs in a compute pass of its own, which costs the
    /// host a little: compare host times with it off).
    #[arg(long)]
    profile_kernels: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
struct PerplexityArgs {
    /// The text file (read whole; one trailing newline dropped, as llama-perplexity's -f does).
    file: PathBuf,
    /// Tokens a chunk: each chunk's second half is scored given its first.
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx_size: usize,
    /// Score at most this many chunks [default: all].
    #[arg(long)]
    chunks: Option<usize>,
    /// Print one JSON object instead of llama-perplexity's lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
struct RandomModelArgs {
    /// smollm2-135m, llama-3.2-1b, llama-2-7b, qwen3-30b-a3b (128 experts, 8 a token) or
    /// qwen3-30b-a3b-dense (its active parameters as one dense MLP).
    #[arg(long)]
    shape: String,
    /// Fewer decoder layers than the shape has (a smaller file of the same widths).
    #[arg(long)]
    layers: Option<usize>,
    /// Type of the matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_k, q5_k,
    /// q6_k, q2_k, q3_k, iq4_xs or mxfp4.
    #[arg(long, value_parser = parse_weight_dtype)]
    dtype: DType,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The GGUF file to write.
    #[arg(long)]
    out: PathBuf,
}

fn parse_weight_dtype(name: &str) -> Result<DType, String> {
    let types = pagoda::gpu::shader::WEIGHT_DTYPES;
    types.iter().copied().find(|d| d.name() == name.to_ascii_lowercase()).ok_or_else(|| {
        let names: Vec<&str> = types.iter().map(|d| d.name()).collect();
        format!("unknown weight type `{name}` ({})", names.join(", "))
    })
}

fn random_model(args: RandomModelArgs) -> anyhow::Result<()> {
    let mut shape = *RandomShape::named(&args.shape)?;
    if let Some(layers) = args.layers {
        anyhow::ensure!(
            (1..=shape.layers).contains(&layers),
            "--layers: 1 to {} for {}",
            shape.layers,
            shape.name
        );
        shape.layers = layers;
    }
    let bytes = write_random_model(&args.out, &shape, args.dtype, args.seed)?;
    println!(
        "{}: {} ({} layers) in {}, {} matrix parameters, {} active a token, {:.2} GB",
        args.out.display(),
        shape.name,
        shape.layers,
        args.dtype.name(),
        shape.matrix_params(),
        shape.active_params(),
        bytes as f64 / 1e9
    );
    Ok(())
}

#[derive(Debug, Args)]
struct PullArgs {
    /// ORG/NAME, ORG/NAME:QUANT or ORG/NAME/FILE.gguf, with an optional @REVISION.
    id: String,
}

#[derive(Debug, Args)]
struct RmArgs {
    /// ORG/NAME (the whole repository), ORG/NAME:QUANT or ORG/NAME/FILE.gguf (that file), with
    /// an optional @REVISION (that snapshot only).
    id: String,
}

fn hub_settings() -> pagoda::hub::HubSettings {
    let style = match std::io::stderr().is_terminal() {
        true => pagoda::hub::ProgressStyle::Bar,
        false => pagoda::hub::ProgressStyle::Lines,
    };
    pagoda::hub::HubSettings::from_env(style)
}

fn pull(args: PullArgs) -> anyhow::Result<()> {
    let id = pagoda::hub::HubId::parse(&args.id)?;
    let fetched = pagoda::hub::fetch(&id, &hub_settings(), pagoda::hub::Freshness::Latest)?;
    println!("{}", fetched.path.display());
    Ok(())
}

fn models() -> anyhow::Result<()> {
    let settings = hub_settings();
    let models = pagoda::model::source::cached_models(&settings.cache_dir);
    println!("{:<48} {:<10} {:>10}  {:<12} RUNS", "ID", "QUANT", "SIZE", "FAMILY");
    for m in &models {
        let runs = match &m.unsupported {
            None => "yes".to_owned(),
            Some(why) => format!("no: {why}"),
        };
        let size = format!("{:.1} MiB", m.bytes as f64 / (1024.0 * 1024.0));
        let family = m.family.as_deref().unwrap_or("-");
        println!("{:<48} {:<10} {size:>10}  {family:<12} {runs}", m.id, m.quant);
    }
    if models.is_empty() {
        println!("(no models in {})", settings.cache_dir.display());
    }
    Ok(())
}

fn rm(args: RmArgs) -> anyhow::Result<()> {
    let id = pagoda::hub::HubId::parse(&args.id)?;
    let settings = hub_settings();
    let freed = pagoda::hub::inventory::remove(&settings.cache_dir, &id)?;
    println!("removed {id} ({:.1} MiB freed)", freed as f64 / (1024.0 * 1024.0));
    Ok(())
}

#[derive(Debug, Args)]
struct InfoArgs {
    /// A GGUF file, an HF model directory or a Hub id [default: the default model, if present].
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    gpu: GpuArgs,
}

fn main() -> ExitCode {
    quiet_headless_vulkan();
    let cli = Cli::parse();
    #[cfg(feature = "server")]
    let default_level = if matches!(cli.command, Command::Serve(_)) { "info" } else { "warn" };
    #[cfg(not(feature = "server"))]
    let default_level = "warn";
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            // Downloads from the Hub log their progress where no bar is drawn.
            EnvFilter::new(format!("{default_level},pagoda::hub=info"))
        }))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Generate(args) => generate(args),
        Command::Chat(args) => chat(args),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench(args),
        Command::Perplexity(args) => perplexity(args),
        Command::Info(args) => info(args),
        Command::RandomModel(args) => random_model(args),
        Command::Pull(args) => pull(args),
        Command::Models => models(),
        Command::Rm(args) => rm(args),
        #[cfg(feature = "viz")]
        Command::Viz(args) => pagoda::viz::run(&args).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let mut texts = args.prompts.clone();
    if let Some(path) = &args.prompts_file {
        let file = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        for (number, line) in file.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
            let prompt: String = serde_json::from_str(line)
                .map_err(|e| anyhow!("{}:{}: not a JSON string: {e}", path.display(), number + 1))?;
            texts.push(prompt);
        }
    }
    if texts.is_empty() {
        anyhow::bail!("no prompts: pass them as arguments or with --prompts-file");
    }
    let prompts: Vec<Prompt> = texts
        .iter()
        .map(|text| match args.chat {
            true => Prompt::Chat(vec![ChatMessage::new("user", text.as_str())]),
            false => Prompt::Text(text.clone()),
        })
        .collect();
    let params = SamplingParams { prompt_logprobs: args.prompt_logprobs, ..args.sampling.params()? };
    let mut engine = Engine::new(engine_config(&args.engine, args.sampling.seed.unwrap_or(0))?)?;
    let lora = args.engine.lora.load(&mut engine)?;
    let started = std::time::Instant::now();
    let completions = engine.generate_with_lora(prompts, &params, lora.as_deref())?;
    let seconds = started.elapsed().as_secs_f64();
    let prompt_tokens: usize = completions.iter().map(|c| c.prompt_token_ids.len()).sum();
    let output_tokens: usize = completions.iter().map(|c| c.token_ids.len()).sum();
    eprintln!(
        "{} prompt(s): {prompt_tokens} prompt and {output_tokens} generated tokens in {seconds:.2} s \
         ({:.1} generated tok/s)",
        completions.len(),
        output_tokens as f64 / seconds.max(1e-9)
    );
    let mut stdout = std::io::stdout().lock();
    for (text, completion) in texts.iter().zip(&completions) {
        let written = if args.json {
            writeln!(stdout, "{}", completion_json(completion))
        } else if completions.len() == 1 {
            writeln!(stdout, "{}", completion.text)
        } else {
            writeln!(stdout, "### {text}\n{}\n", completion.text)
        };
        written?;
    }
    Ok(())
}

fn perplexity(args: PerplexityArgs) -> anyhow::Result<()> {
    use pagoda::engine::perplexity::PerplexityOptions;
    let mut text =
        std::fs::read_to_string(&args.file).map_err(|e| anyhow!("{}: {e}", args.file.display()))?;
    if text.ends_with('\n') {
        text.pop();
    }
    let options = PerplexityOptions { ctx_size: args.ctx_size, max_chunks: args.chunks };
    let mut engine = Engine::new(engine_config(&args.engine, 0)?)?;
    let started = std::time::Instant::now();
    let mut stderr = std::io::stderr().lock();
    let result = pagoda::engine::perplexity::perplexity(&mut engine, &text, &options, |done, total, ppl| {
        // llama-perplexity's running figures, then the count of chunks done.
        let _ = write!(stderr, "[{done}]{ppl:.4},");
        if done == total {
            let _ = writeln!(stderr);
        }
        let _ = stderr.flush();
    })?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "file": args.file.display().to_string(),
                "num_tokens": result.num_tokens,
                "ctx_size": result.ctx_size,
                "chunks": result.running_ppl.len(),
                "num_scored": result.num_scored,
                "mean_nll": result.mean_nll,
                "ppl": result.ppl,
                "ppl_error": result.ppl_error,
                "running_ppl": result.running_ppl,
                "seconds": seconds,
            })
        );
    } else {
        println!(
            "{} tokens, {} chunks of {}, {} scored in {seconds:.2} s",
            result.num_tokens,
            result.running_ppl.len(),
            result.ctx_size,
            result.num_scored
        );
        println!("Final estimate: PPL = {:.4} +/- {:.5}", result.ppl, result.ppl_error);
    }
    Ok(())
}

/// The `--json` line of one completion.
fn completion_json(completion: &CompletionOutput) -> serde_json::Value {
    let mut line = serde_json::json!({
        "prompt_token_ids": completion.prompt_token_ids,
        "token_ids": completion.token_ids,
        "text": completion.text,
        "finish_reason": completion.finish_reason,
    });
    if let Some(prompt_logprobs) = &completion.prompt_logprobs {
        line["prompt_logprobs"] = serde_json::json!(prompt_logprobs);
    }
    line
}

fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let mut params = args.sampling.params()?;
    let kwargs = args.chat_template_kwargs.clone().unwrap_or_default();
    let thinking = Thinking::from_template_kwargs(&kwargs);
    if args.reasoning_parser.is_some_and(ReasoningParser::needs_special_tokens) {
        params.skip_special_tokens = false;
    }
    let mut engine = Engine::new(engine_config(&args.engine, args.sampling.seed.unwrap_or(0))?)?;
    let lora = args.engine.lora.load(&mut engine)?;
    let mut history: Vec<ChatMessage> =
        args.system.iter().map(|s| ChatMessage::new("system", s.as_str())).collect();
    eprintln!("Chatting with the model; an empty line or end of input quits, /reset starts over.");
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    // Reasoning is dimmed on a terminal (SGR 2), and written as it is elsewhere.
    let (dim, normal) = if stdout.is_terminal() { ("\x1b[2m", "\x1b[0m") } else { ("", "") };
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            return Ok(());
        }
        if line.trim() == "/reset" {
            history.retain(|message| message.role == "system");
            continue;
        }
        history.push(ChatMessage::new("user", line.trim_end()));
        let prompt =
            Prompt::ChatWithKwargs { messages: history.clone(), tools: None, kwargs: kwargs.clone() };
        let prompt_ids = engine.encode_prompt(&prompt)?;
        let id = engine.add_tokens_request_with_lora(prompt_ids, params.clone(), lora.as_deref())?;
        let mut split = args.reasoning_parser.map(|parser| parser.stream(thinking));
        let mut reply = Split::default();
        let mut finished = false;
        while !finished {
            for output in engine.step()? {
                if output.request_id != id {
                    continue;
                }
                finished = output.finished();
                let piece = match &mut split {
                    Some(stream) => {
                        let mut piece = stream.push(&output.new_text);
                        if finished {
                            piece.append(stream.finish());
                        }
                        piece
                    }
                    None => Split { reasoning: String::new(), content: output.new_text.clone() },
                };
                if !args.hide_reasoning && !piece.reasoning.is_empty() {
                    print!("{dim}{}{normal}", piece.reasoning);
                }
                print!("{}", piece.content);
                stdout.flush()?;
                reply.append(piece);
            }
        }
        println!();
        let mut message = ChatMessage::new("assistant", reply.content);
        message.reasoning_content = (!reply.reasoning.is_empty()).then_some(reply.reasoning);
        history.push(message);
    }
}

/// `--chat-template-kwargs`: a JSON object.
fn parse_template_kwargs(text: &str) -> Result<TemplateKwargs, String> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(kwargs)) => Ok(kwargs),
        Ok(_) => Err("expected a JSON object".into()),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(feature = "server")]
fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = engine_config(&args.engine, args.seed)?;
    config.max_waiting_requests = Some(args.max_waiting_requests);
    if let Some(model) = &args.model_arg {
        config.model = Some(model.clone());
    }
    let model_path = resolve_model_path(config.model.as_deref(), config.show_progress)?;
    // vLLM's default: the Hub id as given; for a path, its file or directory name.
    let model_name = args.served_model_name.clone().unwrap_or_else(|| match &config.model {
        Some(given) if !given.exists() => given.to_string_lossy().into_owned(),
        _ => {
            model_path.file_stem().map_or_else(|| "pagoda".into(), |stem| stem.to_string_lossy().into_owned())
        }
    });
    config.model = Some(model_path);
    let engine = Engine::new(config)?;
    let options = pagoda::server::ServerOptions {
        api_key: args
            .api_key
            .clone()
            .or_else(|| std::env::var("PAGODA_API_KEY").ok())
            .filter(|key| !key.is_empty()),
        metrics_prefix: args.metrics_prefix,
        kv_events: args.kv_events_config.clone().unwrap_or_default(),
        reasoning_parser: args.reasoning_parser,
        lora_modules: args.engine.lora.modules().to_vec(),
    };
    let shutdown_timeout = std::time::Duration::from_secs(args.shutdown_timeout);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let state = std::sync::Arc::new(
            pagoda::server::ServerState::with_options(engine, model_name.clone(), options)
                .await?
                .with_limits(args.limits.limits()),
        );
        let address = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| anyhow!("cannot listen on {address}: {e}"))?;
        tracing::info!(%address, model = %model_name, "serving the OpenAI API");
        let (drained, stop) = tokio::sync::oneshot::channel();
        let draining = std::sync::Arc::clone(&state);
        tokio::spawn(async move {
            termination().await;
            tracing::info!(
                timeout_s = shutdown_timeout.as_secs(),
                "draining: no new requests; finishing those in flight"
            );
            let aborted = draining.drain(shutdown_timeout).await;
            tracing::info!(aborted, "drained; shutting down");
            let _ = drained.send(());
        });
        let engine_state = std::sync::Arc::clone(&state);
        let shutdown = async move {
            tokio::select! {
                _ = stop => {}
                () = engine_state.engine().stopped() => {}
            }
        };
        pagoda::server::serve(listener, pagoda::server::router(std::sync::Arc::clone(&state)), shutdown)
            .await?;
        state.close_kv_events().await;
        match state.engine().device_lost() {
            Some(reason) => Err(anyhow!("the engine stopped: {reason}")),
            None => Ok(()),
        }
    })
}

/// Resolves on SIGTERM or Ctrl-C.
#[cfg(feature = "server")]
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch for SIGTERM; only Ctrl-C drains");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let mut config = engine_config(&args.engine, args.seed)?;
    config.gpu.profile_kernels = args.profile_kernels;
    let workload = |num_requests: usize, vocab_size: u32| {
        args.workload
            .generate(num_requests, vocab_size, args.seed)
            .with_lengths(args.input_len.map(NonZeroUsize::get), args.output_len.map(NonZeroUsize::get))
            .with_temperature(args.temperature)
    };
    let mut engine = match config.executor {
        ExecutorKind::Sim => None,
        ExecutorKind::Wgpu => Some(Engine::new(config.clone())?),
    };
    for &num_requests in &args.num_requests {
        let report = match &mut engine {
            None => {
                let sim = SimConfig { seed: args.seed, ..SimConfig::default() };
                run_workload(
                    &workload(num_requests, sim.vocab_size),
                    config.scheduler.clone(),
                    config.cache.clone(),
                    sim,
                )?
            }
            Some(engine) => {
                let vocab_size = engine.tokenizer().vocab_size() as u32;
                run_engine_workload(engine, &workload(num_requests, vocab_size))?
            }
        };
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_report(&report);
        }
    }
    Ok(())
}

fn print_report(report: &WorkloadReport) {
    let ms = |seconds: f64| format!("{:.2} ms", seconds * 1e3);
    let rows = [
        ("workload", report.workload.clone()),
        (
            "requests (finished / rejected)",
            format!("{} ({} / {})", report.num_requests, report.num_finished, report.num_rejected),
        ),
        ("steps", report.num_steps.to_string()),
        ("duration", format!("{:.2} s", report.duration_s)),
        ("prompt / output tokens", format!("{} / {}", report.prompt_tokens, report.output_tokens)),
        ("output throughput", format!("{:.1} tok/s", report.output_throughput)),
        ("total throughput", format!("{:.1} tok/s", report.total_throughput)),
        ("request throughput", format!("{:.2} req/s", report.request_throughput)),
        ("TTFT p50 / p99", format!("{} / {}", ms(report.ttft_p50_s), ms(report.ttft_p99_s))),
        (
            "ITL mean / p50 / p99",
            format!("{} / {} / {}", ms(report.itl_mean_s), ms(report.itl_p50_s), ms(report.itl_p99_s)),
        ),
        ("TPOT mean", ms(report.tpot_mean_s)),
        ("preemptions", report.num_preemptions.to_string()),
        ("recomputed tokens", report.num_recomputed_tokens.to_string()),
        ("prefix cache hit rate", format!("{:.1} %", report.prefix_cache_hit_rate * 100.0)),
        ("peak KV cache usage", format!("{:.1} %", report.peak_kv_cache_usage * 100.0)),
    ];
    for (name, value) in rows {
        println!("{name:<32} {value}");
    }
    if let Some(o) = &report.host_overlap {
        let mode = if o.async_scheduling { "on" } else { "off" };
        println!("{:<32} {mode}", "async scheduling");
        println!(
            "{:<32} {:.0} us / {:.0} us",
            "host per step hidden / exposed", o.hidden_us_per_step, o.exposed_us_per_step
        );
    }
    if let Some(seconds) = report.ttft_p50_returning_s {
        println!("{:<32} {}", "TTFT p50 returning", ms(seconds));
    }
    if let Some(h) = &report.host_tier {
        let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
        println!("{:<32} {} / {} blocks", "host KV tier used / size", h.num_used_blocks, h.num_blocks);
        println!(
            "{:<32} {} / {} / {} blocks",
            "host hits / loads / stores", h.num_hit_blocks, h.num_loaded_blocks, h.num_stored_blocks
        );
        println!(
            "{:<32} {:.1} / {:.1} MiB, {:.2} ms",
            "host loaded / stored, copy time",
            mib(h.load_bytes),
            mib(h.store_bytes),
            h.copy_seconds * 1e3
        );
        if h.copy_seconds > 0.0 {
            let gb_per_s = (h.load_bytes + h.store_bytes) as f64 / h.copy_seconds / 1e9;
            println!("{:<32} {gb_per_s:.2} GB/s", "host copy bandwidth");
        }
    }
    if let Some(spec) = &report.spec_decoding {
        let per_pos: Vec<String> =
            spec.acceptance_rate_per_pos.iter().map(|rate| format!("{rate:.2}")).collect();
        println!(
            "{:<32} {:.1} % ({} of {} proposed tokens, {} drafts)",
            "spec decode acceptance rate",
            spec.acceptance_rate * 100.0,
            spec.num_accepted_tokens,
            spec.num_draft_tokens,
            spec.num_drafts
        );
        println!("{:<32} {:.2}", "spec decode mean accepted length", spec.mean_acceptance_length);
        println!("{:<32} {}", "spec decode acceptance per pos", per_pos.join(" "));
        println!(
            "{:<32} {:.2}",
            "tokens per step",
            report.output_tokens as f64 / report.num_steps.max(1) as f64
        );
    }
    if let Some(d) = &report.device {
        println!(
            "{:<32} {:.0} us / {:.0} us",
            "host time per step mean / p50", d.host_us_per_step, d.host_us_p50
        );
        println!(
            "{:<32} {:.0} us / {:.0} us",
            "device idle per step mean / p50", d.idle_us_per_step, d.idle_us_p50
        );
        println!(
            "{:<32} {:.1} / {:.1}",
            "dispatches / command buffers", d.dispatches_per_step, d.command_buffers_per_step
        );
        println!(
            "{:<32} {} / {} / {}",
            "created pipelines/buffers/groups", d.pipelines_created, d.buffers_created, d.bind_groups_created
        );
    }
    if !report.kernels.is_empty() {
        let steps = report.num_steps.max(1) as f64;
        let device_ms: f64 = report.kernels.iter().map(|k| k.device_ms).sum();
        println!("{:<32} {:.2} ms", "kernel device time per step", device_ms / steps);
        println!("\n{:>6} {:>10} {:>10} {:>9}  kernel", "share", "device ms", "dispatches", "mean us");
        for k in &report.kernels {
            println!(
                "{:>5.1}% {:>10.2} {:>10} {:>9.1}  {}",
                k.share * 100.0,
                k.device_ms,
                k.dispatches,
                k.mean_us,
                k.kernel
            );
        }
    }
}

fn info(args: InfoArgs) -> anyhow::Result<()> {
    match GpuContext::new(&gpu_options_from_env(&args.gpu.options()?)?) {
        Ok(context) => {
            let capabilities = context.capabilities();
            println!("{}\n{}", capabilities.device_summary(), capabilities.variant_summary());
        }
        Err(error) => println!("gpu: unavailable ({error})"),
    }
    let path = match args.model {
        Some(path) => resolve_model_path(Some(&path), std::io::stderr().is_terminal())?,
        None => match default_model_path() {
            Ok(path) => path,
            Err(error) => {
                println!("model: none ({error})");
                return Ok(());
            }
        },
    };
    let model = ModelFiles::open(&path)?;
    let c = &model.config;
    println!(
        "model: {}\n  architecture {}, {} layers, hidden {}, intermediate {}, {} heads, {} KV heads, head dim {}\n  \
         vocab {}, context {}, rope theta {}, tied embeddings {}, chat template {}",
        path.display(),
        c.architecture,
        c.num_hidden_layers,
        c.hidden_size,
        c.intermediate_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.vocab_size,
        c.max_position_embeddings,
        c.rope_theta,
        c.tie_word_embeddings,
        if model.chat_template.is_some() { "yes" } else { "no" },
    );
    print_attention(c);
    print_footprint(&model)?;
    if let Some(template) = &model.chat_template {
        println!(
            "  chat template {}; tool calls in the {:?} format",
            template.capabilities(),
            template.tool_format()
        );
    }
    print_weight_types(&model.weights);
    Ok(())
}

/// What a model's attention adds to plain causal attention (sliding windows per layer, sinks,
/// rotary scaling), when it adds anything.
fn print_attention(c: &pagoda::model::ModelConfig) {
    let sliding: Vec<String> =
        c.layer_windows.iter().enumerate().filter_map(|(l, w)| w.map(|w| format!("{l}:{w}"))).collect();
    let mut parts = Vec::new();
    if !sliding.is_empty() {
        parts.push(format!("sliding windows (layer:keys) {}", sliding.join(" ")));
    }
    if c.attention_sinks {
        parts.push("attention sinks".to_string());
    }
    if let Some(scaling) = &c.rope_scaling {
        let name = match scaling {
            pagoda::model::RopeScaling::Linear { .. } => "linear",
            pagoda::model::RopeScaling::Llama3 { .. } => "llama3",
            pagoda::model::RopeScaling::LongRope { .. } => "longrope",
            pagoda::model::RopeScaling::Yarn { .. } => "yarn",
        };
        parts.push(format!("rope scaling {name}"));
    }
    if let Some(limit) = c.swiglu_limit {
        parts.push(format!("clamped SwiGLU (limit {limit}) with biased experts"));
    }
    if !parts.is_empty() {
        println!("  attention and MLP: {}", parts.join(", "));
    }
}

/// A mixture of experts' experts and router, and every model's parameters and weight bytes, in
/// all and read a decoded token.
fn print_footprint(model: &ModelFiles) -> anyhow::Result<()> {
    let c = &model.config;
    if let Some(moe) = &c.moe {
        let rule = match moe.rule {
            RouterRule::SoftmaxTopK { renormalize: true } => "softmax, top-k, renormalised",
            RouterRule::SoftmaxTopK { renormalize: false } => "softmax, top-k",
            RouterRule::TopKSoftmax => "top-k, softmax",
        };
        let shared = moe
            .shared_expert_intermediate_size
            .map_or(String::new(), |ff| format!(", a shared expert of intermediate {ff}"));
        let layers = c.moe_layers.iter().filter(|&&e| e).count();
        let dense = match c.num_hidden_layers - layers {
            0 => String::new(),
            n => format!(" ({n} dense layers of intermediate {})", c.intermediate_size),
        };
        println!(
            "  experts: {} a layer on {layers} of {} layers{dense}, {} a token ({rule}), expert intermediate {}{shared}",
            moe.num_experts, c.num_hidden_layers, moe.experts_per_token, moe.expert_intermediate_size
        );
    }
    let k = c.moe.map_or(0, |moe| moe.experts_per_token);
    let f = Footprint::of(&model.llama_weights()?, k);
    let (m, mib) = (|n: u64| n as f64 / 1e6, |b: u64| b as f64 / (1024.0 * 1024.0));
    println!(
        "  parameters {:.2} M, {:.2} M active a token; weights read a decoded token {:.1} MiB of {:.1} MiB",
        m(f.parameters),
        m(f.active_parameters),
        mib(f.bytes_per_token),
        mib(f.bytes)
    );
    Ok(())
}

/// The stored weight types with their tensor counts, bytes in the file and bytes on the GPU
/// (weights stay in their stored type there, rows padded to whole 16-byte units).
fn print_weight_types(weights: &WeightFile) {
    let mut by_type: std::collections::BTreeMap<&str, (usize, u64, u64)> = Default::default();
    for tensor in weights.tensors() {
        let cols = tensor.shape.last().copied().unwrap_or(1).max(1);
        let rows = tensor.num_elements() / cols;
        let entry = by_type.entry(tensor.dtype.name()).or_default();
        entry.0 += 1;
        entry.1 += tensor.data.len() as u64;
        entry.2 += resident_bytes(tensor.dtype, rows, cols);
    }
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let (count, file, gpu) = by_type.values().fold((0, 0, 0), |a, v| (a.0 + v.0, a.1 + v.1, a.2 + v.2));
    println!("  weights: {count} tensors, {:.1} MiB in the file, {:.1} MiB on the GPU", mib(file), mib(gpu));
    for (name, (count, file, gpu)) in by_type {
        println!("    {name:<7} {count:>4} tensors {:>9.1} MiB file {:>9.1} MiB GPU", mib(file), mib(gpu));
    }
}

#[cfg(test)]
mod tests {
    use super::parse_logit_bias;

    #[test]
    fn logit_bias_flags_are_id_equals_bias() {
        assert_eq!(parse_logit_bias("42=-100"), Ok((42, -100.0)));
        assert_eq!(parse_logit_bias(" 7 = 2.5 "), Ok((7, 2.5)));
        for bad in ["42", "x=1", "42=y", "-1=1"] {
            assert!(parse_logit_bias(bad).is_err(), "{bad}");
        }
    }
}
