//! The engine: prompts in, text out.
//!
//! [`Engine`] owns the scheduler, the executor and the tokenizer. `add_request` turns a
//! prompt into a waiting request; each `step` schedules one batch, runs it, appends the
//! sampled tokens, detokenizes them incrementally, applies stop strings, and returns one
//! [`RequestOutput`] per request that moved. `generate` runs a batch of prompts to the end.
//! For async code, [`handle::AsyncEngine`] runs an engine on its own thread and gives each
//! request a stream.

pub mod args;
pub mod detokenizer;
pub mod engine_config;
#[cfg(feature = "server")]
pub mod handle;
pub mod lora;
pub mod metrics;
pub mod output;
pub mod overlap;
pub mod perplexity;
pub mod step_loop;
pub mod stop;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use self::detokenizer::IncrementalDetokenizer;
pub use self::engine_config::{EngineBuilder, EngineConfig, ExecutorKind};
use self::metrics::EngineMetrics;
pub use self::output::{CompletionOutput, RequestOutput};
use self::step_loop::{StepLoop, StepMaskMap};
use self::stop::StopStrings;
use crate::core::output::EngineCoreOutput;
use crate::core::output::SchedulerOutput;
use crate::core::request::{FinishReason, Request, RequestStatus};
use crate::core::scheduler::{AddRequestError, Scheduler, SchedulerConfigError};
use crate::executor::fault::FaultPlan;
use crate::executor::gpu_runner::WgpuExecutor;
use crate::executor::sim::{CostModel, SimConfig, SimConfigError, SimExecutor};
use crate::executor::{ExecutorError, ModelExecutor};
use crate::gpu::{GpuContext, GpuError};
use crate::ids::{RequestId, TokenId};
use crate::model::chat::{ChatError, TemplateKwargs};
use crate::model::tokenizer::TokenizerError;
use crate::model::{ChatMessage, ChatTemplate, ModelError, ModelFiles, Tokenizer, resolve_model_path};
use crate::sampling::{SamplingParams, SamplingParamsError};
use crate::structured::{ConstraintError, ConstraintState, Grammars, TokenMask};
use crate::workload::report::{Latencies, Latency};

/// What a request starts from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Plain text, tokenized with special tokens parsed (BOS added when the model wants it).
    Text(String),
    /// Token ids, used as given.
    TokenIds(Vec<TokenId>),
    /// A conversation, rendered with the model's chat template and an assistant turn opened.
    Chat(Vec<ChatMessage>),
    /// A conversation with tool definitions (OpenAI's `tools`), which the chat template
    /// receives as its `tools` variable, or as pagoda's tool prompt where it renders none.
    ChatWithTools {
        /// The conversation.
        messages: Vec<ChatMessage>,
        /// The tool definitions.
        tools: Vec<serde_json::Value>,
    },
    /// A conversation with tool definitions when there are some, and extra variables for its
    /// chat template (vLLM's `chat_template_kwargs`, e.g. `enable_thinking`).
    ChatWithKwargs {
        /// The conversation.
        messages: Vec<ChatMessage>,
        /// The tool definitions, if any.
        tools: Option<Vec<serde_json::Value>>,
        /// The template's extra variables.
        kwargs: TemplateKwargs,
    },
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<Vec<TokenId>> for Prompt {
    fn from(ids: Vec<TokenId>) -> Self {
        Self::TokenIds(ids)
    }
}

impl From<Vec<ChatMessage>> for Prompt {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Self::Chat(messages)
    }
}

/// Why the engine refused or failed something.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameters: {0}")]
    InvalidParams(#[from] SamplingParamsError),
    /// The structured-output constraint does not compile.
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
    /// The scheduler refused the request (empty, too long, larger than the KV cache).
    #[error(transparent)]
    Rejected(#[from] AddRequestError),
    /// A prompt token id is outside the vocabulary.
    #[error("prompt token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfVocab {
        /// The id.
        id: TokenId,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The request asks for prompt logprobs and the executor computes no logits (the
    /// simulated executor).
    #[error(
        "prompt_logprobs is not served by this engine's executor (the simulated executor computes no logits)"
    )]
    PromptLogprobsUnsupported,
    /// A `logit_bias` token id is outside the vocabulary.
    #[error("logit_bias token id {id} is outside the vocabulary of {vocab_size}")]
    BiasOutOfVocab {
        /// The id.
        id: TokenId,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// Tokenizing or detokenizing failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The chat template is missing or failed.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// The model could not be opened.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The scheduler or cache configuration is invalid.
    #[error("invalid engine configuration: {0}")]
    Config(#[from] SchedulerConfigError),
    /// The executor could not be built.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The executor failed a step: every live request was finished with an error (their
    /// last outputs are here) and its blocks freed. After a lost device the engine refuses
    /// all further work; after any other failure it goes on serving new requests.
    #[error("a step failed ({source}); {} live requests ended with an error", outputs.len())]
    StepFailed {
        /// What the executor reported.
        source: ExecutorError,
        /// The last output of every request that was live, finish reason `error`.
        outputs: Vec<RequestOutput>,
    },
    /// The device was lost at an earlier step; the engine can do nothing more.
    #[error("the engine stopped: {0}")]
    DeviceLost(String),
    /// An unknown LoRA adapter name, an adapter refused, or LoRA not enabled.
    #[error(transparent)]
    Lora(#[from] lora::LoraError),
    /// The GPU could not be set up.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The simulated executor's configuration is invalid.
    #[error(transparent)]
    Sim(#[from] SimConfigError),
    /// Too many requests are waiting.
    #[error("the server is overloaded: {waiting} requests are already waiting (limit {limit}); retry later")]
    Overloaded {
        /// Requests waiting now.
        waiting: usize,
        /// The configured limit.
        limit: usize,
    },
    /// No live request has this id.
    #[error("no live request has id {0}")]
    UnknownRequest(RequestId),
    /// The engine thread is gone.
    #[error("the engine has stopped")]
    Stopped,
}

/// The engine's per-request state: text, stops and timing.
#[derive(Debug)]
struct RequestState {
    num_prompt_tokens: usize,
    num_output_tokens: usize,
    min_tokens: usize,
    include_stop_str_in_output: bool,
    detokenizer: IncrementalDetokenizer,
    stop_strings: StopStrings,
    arrival: Instant,
    /// Where its output stands in its structured-output constraint, if it has one.
    constraint: Option<ConstraintState>,
    /// Why its constraint failed; it ends with an error at its next output.
    constraint_error: Option<ConstraintError>,
    /// The name of its LoRA adapter, for the per-adapter metrics.
    lora: Option<String>,
}

/// The text side of the model: tokenizer, chat template and stop tokens.
#[derive(Debug)]
struct TextModel {
    tokenizer: Arc<Tokenizer>,
    chat_template: Option<Arc<ChatTemplate>>,
    eos_token_id: Option<TokenId>,
    extra_eos_token_ids: Vec<TokenId>,
    grammars: Grammars,
}

/// An LLM inference engine: a scheduler, an executor and a tokenizer.
pub struct Engine {
    scheduler: Scheduler,
    /// The executor on a thread of its own, and the steps in flight on it (one ahead with
    /// the scheduler's `async_scheduling`, where the executor runs such steps).
    steps: StepLoop,
    text: TextModel,
    requests: HashMap<RequestId, RequestState>,
    next_request_id: RequestId,
    seeds: ChaCha8Rng,
    max_waiting_requests: Option<usize>,
    metrics: EngineMetrics,
    /// Time to first token and inter-token latency, on the engine's clock.
    latencies: Latencies,
    /// Zero of the engine's clock.
    started: Instant,
    device_lost: Option<String>,
    /// The LoRA adapters requests may name.
    loras: lora::LoraRegistry,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scheduler", &self.scheduler)
            .field("requests", &self.requests.len())
            .field("next_request_id", &self.next_request_id)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// A builder over the default configuration.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    /// Opens the model (`config.model`: a path, or a Hub id taken from the Hugging Face cache
    /// or downloaded into it; else the default model) and builds the executor
    /// `config.executor` names. With the wgpu executor the KV pool size is the one the GPU
    /// allocated (from `--kv-cache-memory` when set).
    pub fn new(mut config: EngineConfig) -> Result<Self, EngineError> {
        let path = resolve_model_path(config.model.as_deref(), config.show_progress)?;
        let model = ModelFiles::open(&path)?;
        fit_to_model(&mut config, &model);
        let executor: Box<dyn ModelExecutor + Send> = match config.executor {
            ExecutorKind::Sim => {
                if config.cache.kv_block_bytes == 0 {
                    // The model's KV in f16: what one block would take on a device.
                    let c = &model.config;
                    let bytes = 2 * c.num_hidden_layers * config.cache.block_size * c.kv_size() * 2;
                    config.cache.kv_block_bytes = bytes as u64;
                }
                Box::new(
                    SimExecutor::new(SimConfig {
                        vocab_size: model.tokenizer.vocab_size() as u32,
                        eos_token_id: model.tokenizer.eos_token_id(),
                        seed: config.seed,
                        cost: CostModel::default(),
                    })?
                    .with_realtime(config.sim_realtime)
                    .with_faults(FaultPlan::new(config.sim_faults.iter().copied()))
                    .with_kv_block_bytes(config.cache.kv_block_bytes),
                )
            }
            ExecutorKind::Wgpu => {
                let context = GpuContext::new(&engine_config::gpu_options_from_env(&config.gpu)?)?;
                let executor = WgpuExecutor::with_lora(
                    context,
                    &model,
                    &config.cache,
                    &config.scheduler,
                    config.show_progress,
                    config.lora,
                )?;
                config.cache.num_gpu_blocks = executor.num_gpu_blocks();
                config.cache.kv_block_bytes = executor.kv_block_bytes();
                Box::new(executor)
            }
        };
        Self::with_executor(config, model, executor)
    }

    /// An engine over `model` (its tokenizer, chat template and stop tokens) that runs
    /// steps on `executor`. `max_model_len` is capped at the model's context length.
    pub fn with_executor(
        mut config: EngineConfig,
        model: ModelFiles,
        executor: Box<dyn ModelExecutor + Send>,
    ) -> Result<Self, EngineError> {
        fit_to_model(&mut config, &model);
        let mut scheduler = Scheduler::new(config.scheduler, config.cache)?;
        if let Some(lora) = &config.lora {
            scheduler.set_max_loras(lora.max_loras);
        }
        let lora_limits = config.lora;
        let eos_token_id = model.eos_token_id();
        let extra_eos_token_ids: Vec<TokenId> =
            model.config.eos_token_ids.iter().copied().filter(|&id| Some(id) != eos_token_id).collect();
        let tokenizer = Arc::new(model.tokenizer);
        Ok(Self {
            steps: StepLoop::new(executor, scheduler.async_scheduling()),
            scheduler,
            text: TextModel {
                grammars: Grammars::new(tokenizer.clone(), eos_token_id, extra_eos_token_ids.clone()),
                tokenizer,
                chat_template: model.chat_template.map(Arc::new),
                eos_token_id,
                extra_eos_token_ids,
            },
            requests: HashMap::new(),
            next_request_id: 0,
            seeds: ChaCha8Rng::seed_from_u64(config.seed),
            max_waiting_requests: config.max_waiting_requests,
            metrics: EngineMetrics::default(),
            latencies: Latencies::default(),
            started: Instant::now(),
            device_lost: None,
            loras: lora::LoraRegistry::new(lora_limits),
        })
    }

    /// The model's chat template, if it has one.
    pub fn chat_template(&self) -> Option<&Arc<ChatTemplate>> {
        self.text.chat_template.as_ref()
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.text.tokenizer
    }

    /// The scheduler, for its stats, snapshots and events.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The device layer's counters when the executor runs on a GPU (buffers and bind groups
    /// created, steps, dispatches, host time per step).
    pub fn device_counters(&self) -> Option<crate::gpu::GpuCounters> {
        // After a step, its snapshot: asking the executor would wait for the step in flight.
        let steps = &self.steps;
        steps
            .last_counters()
            .or_else(|| steps.executor().call(|executor| executor.device_counters()).flatten())
    }

    /// Device time per kernel variant when the engine's device times its kernels
    /// ([`crate::gpu::GpuOptions::profile_kernels`]).
    pub fn kernel_times(&self) -> Option<crate::gpu::KernelTimes> {
        self.steps.executor().call(|executor| executor.kernel_times()).flatten()
    }

    /// Everything measured so far, with the scheduler's current stats.
    pub fn metrics(&self) -> EngineMetrics {
        EngineMetrics {
            scheduler: self.scheduler.stats(),
            host_overlap: self.steps.host_overlap(),
            ..self.metrics.clone()
        }
    }

    /// True when it schedules one step ahead of the executor (async scheduling).
    pub fn async_scheduling(&self) -> bool {
        self.steps.async_scheduling()
    }

    /// Forgets every cached block hash; refused (false) while any block is in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.scheduler.reset_prefix_cache()
    }

    /// Why the engine stopped for good (its device was lost), if it did.
    pub fn device_lost(&self) -> Option<&str> {
        self.device_lost.as_deref()
    }

    /// True while some request is waiting or running.
    pub fn has_unfinished_requests(&self) -> bool {
        self.scheduler.has_unfinished_requests()
    }

    /// The token ids a prompt becomes.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<TokenId>, EngineError> {
        let tokenizer = &self.text.tokenizer;
        match prompt {
            Prompt::TokenIds(ids) => {
                self.check_token_ids(ids)?;
                Ok(ids.clone())
            }
            Prompt::Text(text) => Ok(tokenizer.encode_prompt(text)?),
            Prompt::Chat(messages) => self.encode_chat(messages, None, true),
            Prompt::ChatWithTools { messages, tools } => {
                self.encode_chat(messages, Some(tools.as_slice()), true)
            }
            Prompt::ChatWithKwargs { messages, tools, kwargs } => {
                let template = self.text.chat_template.as_deref();
                encode_chat(&self.text.tokenizer, template, messages, tools.as_deref(), kwargs, true)
            }
        }
    }

    /// [`encode_chat`] with this engine's tokenizer and chat template.
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<Vec<TokenId>, EngineError> {
        let template = self.text.chat_template.as_deref();
        encode_chat(
            &self.text.tokenizer,
            template,
            messages,
            tools,
            &TemplateKwargs::new(),
            add_generation_prompt,
        )
    }

    /// Every id must be in the vocabulary.
    fn check_token_ids(&self, ids: &[TokenId]) -> Result<(), EngineError> {
        match self.outside_vocab(ids.iter().copied()) {
            Some((id, vocab_size)) => Err(EngineError::TokenOutOfVocab { id, vocab_size }),
            None => Ok(()),
        }
    }

    /// The first of `ids` outside the vocabulary, with the vocabulary's size.
    fn outside_vocab(&self, mut ids: impl Iterator<Item = TokenId>) -> Option<(TokenId, usize)> {
        let vocab_size = self.text.tokenizer.vocab_size();
        ids.find(|&id| id as usize >= vocab_size).map(|id| (id, vocab_size))
    }

    /// Queues a request; its outputs come from [`Engine::step`].
    pub fn add_request(
        &mut self,
        prompt: impl Into<Prompt>,
        params: SamplingParams,
    ) -> Result<RequestId, EngineError> {
        let prompt_token_ids = self.encode_prompt(&prompt.into())?;
        self.add_tokens_request(prompt_token_ids, params)
    }

    /// Queues a request whose prompt is already tokenized (ids are checked against the vocabulary).
    pub fn add_tokens_request(
        &mut self,
        prompt_token_ids: Vec<TokenId>,
        params: SamplingParams,
    ) -> Result<RequestId, EngineError> {
        self.add_tokens_request_with_lora(prompt_token_ids, params, None)
    }

    /// [`Self::add_tokens_request`] run with the LoRA adapter named `lora` (loaded with
    /// [`Self::load_lora`]); `None` runs the base model.
    pub fn add_tokens_request_with_lora(
        &mut self,
        prompt_token_ids: Vec<TokenId>,
        mut params: SamplingParams,
        lora: Option<&str>,
    ) -> Result<RequestId, EngineError> {
        if let Some(reason) = &self.device_lost {
            return Err(EngineError::DeviceLost(reason.clone()));
        }
        let lora = lora.map(|name| self.loras.get(name)).transpose()?;
        params.validate()?;
        if params.prompt_logprobs.is_some() && !self.steps.executor().computes_prompt_logprobs() {
            return Err(EngineError::PromptLogprobsUnsupported);
        }
        self.check_token_ids(&prompt_token_ids)?;
        if let Some((id, vocab_size)) = self.outside_vocab(params.logit_bias.keys().copied()) {
            return Err(EngineError::BiasOutOfVocab { id, vocab_size });
        }
        if let Some(limit) = self.max_waiting_requests {
            let waiting = self.scheduler.num_waiting();
            if waiting >= limit {
                return Err(EngineError::Overloaded { waiting, limit });
            }
        }
        if params.seed.is_none() {
            params.seed = Some(self.seeds.next_u64());
        }
        if !params.ignore_eos {
            params.stop_token_ids.extend(&self.text.extra_eos_token_ids);
        }
        let constraint = match &params.structured_outputs {
            Some(constraint) => Some(self.text.grammars.compile(constraint)?),
            None => None,
        };
        let state = RequestState {
            num_prompt_tokens: prompt_token_ids.len(),
            num_output_tokens: 0,
            min_tokens: params.min_tokens,
            include_stop_str_in_output: params.include_stop_str_in_output,
            detokenizer: IncrementalDetokenizer::new(params.skip_special_tokens),
            stop_strings: StopStrings::new(params.stop.clone(), params.include_stop_str_in_output),
            arrival: Instant::now(),
            constraint,
            constraint_error: None,
            lora: lora.as_ref().map(|lora| lora.name.clone()),
        };
        let request_id = self.next_request_id;
        let mut request =
            Request::new(request_id, prompt_token_ids, params, self.text.eos_token_id, request_id as f64);
        request.lora = lora;
        self.scheduler.add_request(request)?;
        self.next_request_id += 1;
        self.requests.insert(request_id, state);
        self.latencies.arrive(request_id, self.clock_s(Instant::now()));
        Ok(request_id)
    }

    /// Ends a live request; returns its last output (finish reason `abort`, with any text
    /// still held back) or `None` if it is not live.
    pub fn abort(&mut self, request_id: RequestId) -> Option<RequestOutput> {
        self.finish_with(request_id, RequestStatus::FinishedAborted)
    }

    /// Ends every live request with an error (after a failed step); returns their last outputs.
    pub fn fail_all(&mut self) -> Vec<RequestOutput> {
        let mut ids: Vec<RequestId> = self.requests.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.finish_with(id, RequestStatus::FinishedError)).collect()
    }

    /// Runs one scheduler step and returns an output for every request that produced
    /// text or tokens or finished. With async scheduling the next step is scheduled and
    /// handed to the executor before this one's outputs are taken, so the executor runs it
    /// while they are processed (a request that stops may have one more token computed; it
    /// is dropped). When the executor fails the step, every live request ends with an error
    /// ([`EngineError::StepFailed`] carries their last outputs); a lost device also stops the
    /// engine for good ([`Engine::device_lost`]).
    pub fn step(&mut self) -> Result<Vec<RequestOutput>, EngineError> {
        if let Some(reason) = &self.device_lost {
            return Err(EngineError::DeviceLost(reason.clone()));
        }
        let requests = &mut self.requests;
        let stepped = self
            .steps
            .step(&mut self.scheduler, |scheduler, scheduled| step_masks(scheduler, requests, scheduled));
        let core_outputs = match stepped {
            Ok(outputs) => outputs,
            Err(source) => return Err(self.fail_step(source)),
        };
        let now = Instant::now();
        let mut outputs = Vec::with_capacity(core_outputs.len());
        for core_output in core_outputs {
            if let Some(output) = self.process(core_output, now)? {
                outputs.push(output);
            }
        }
        self.steps.processed();
        Ok(outputs)
    }

    /// After the executor failed a step (undone by the step loop with every step in flight):
    /// ends every live request with an error.
    fn fail_step(&mut self, source: ExecutorError) -> EngineError {
        tracing::error!(error = %source, "engine step failed; failing every live request");
        let outputs = self.fail_all();
        if source.is_device_lost() {
            self.device_lost = Some(source.to_string());
        }
        EngineError::StepFailed { source, outputs }
    }

    /// Runs `prompts` to completion with the same parameters; completions come back in
    /// prompt order.
    pub fn generate(
        &mut self,
        prompts: impl IntoIterator<Item = impl Into<Prompt>>,
        params: &SamplingParams,
    ) -> Result<Vec<CompletionOutput>, EngineError> {
        self.generate_with_lora(prompts, params, None)
    }

    /// [`Self::generate`] with the LoRA adapter named `lora` ([`Self::load_lora`]).
    pub fn generate_with_lora(
        &mut self,
        prompts: impl IntoIterator<Item = impl Into<Prompt>>,
        params: &SamplingParams,
        lora: Option<&str>,
    ) -> Result<Vec<CompletionOutput>, EngineError> {
        let mut completions = Vec::new();
        let mut index_of = HashMap::new();
        for prompt in prompts {
            let prompt_token_ids = self.encode_prompt(&prompt.into())?;
            let request_id =
                self.add_tokens_request_with_lora(prompt_token_ids.clone(), params.clone(), lora)?;
            index_of.insert(request_id, completions.len());
            completions.push(CompletionOutput::new(request_id, prompt_token_ids));
        }
        let mut remaining = completions.len();
        while remaining > 0 {
            for output in self.step()? {
                if let Some(&index) = index_of.get(&output.request_id) {
                    completions[index].extend(&output);
                    remaining -= usize::from(output.finished());
                }
            }
        }
        Ok(completions)
    }

    /// Seconds on the engine's clock at `instant`.
    fn clock_s(&self, instant: Instant) -> f64 {
        (instant - self.started).as_secs_f64()
    }

    /// Turns one scheduler output into a request output (text, stops, metrics).
    fn process(
        &mut self,
        mut core_output: EngineCoreOutput,
        now: Instant,
    ) -> Result<Option<RequestOutput>, EngineError> {
        let request_id = core_output.request_id;
        let Some(state) = self.requests.get_mut(&request_id) else {
            return Ok(None);
        };
        if let Some(error) = state.constraint_error.take() {
            tracing::warn!(request_id, %error, "ending a request whose constraint failed");
            return Ok(self.finish_with(request_id, RequestStatus::FinishedError));
        }
        let tokens = &core_output.new_token_ids;
        let num_tokens = tokens.len();
        let stopped_by_token = core_output.finish_reason == Some(FinishReason::Stop);
        // Token by token, as plain decode would see them: a stop string found before the last
        // of several tokens (accepted speculative ones) ends the request there.
        let mut emitted = String::new();
        let mut kept = tokens.len();
        for (index, &token) in tokens.iter().enumerate() {
            state.num_output_tokens += 1;
            let hidden = index + 1 == tokens.len() && stopped_by_token && !state.include_stop_str_in_output;
            let text =
                if hidden { String::new() } else { state.detokenizer.push(&self.text.tokenizer, token)? };
            let check_stops = state.num_output_tokens >= state.min_tokens;
            emitted.push_str(&state.stop_strings.append(&text, check_stops));
            if state.stop_strings.is_stopped() {
                kept = index + 1;
                break;
            }
        }
        core_output.new_token_ids.truncate(kept);
        core_output.new_logprobs.truncate(kept);
        match self.latencies.record(request_id, kept, (now - self.started).as_secs_f64()) {
            Some(Latency::FirstToken(seconds)) => {
                self.metrics.record_prompt(state.lora.as_deref(), state.num_prompt_tokens as u64);
                self.metrics.time_to_first_token.observe(seconds);
            }
            Some(Latency::InterToken(seconds)) => self.metrics.inter_token_latency.observe(seconds),
            None => {}
        }
        self.metrics.record_generation(state.lora.as_deref(), kept as u64);

        let check_stops = state.num_output_tokens >= state.min_tokens;
        let mut finish_reason = core_output.finish_reason;
        let cut_short = kept < num_tokens;
        if finish_reason.is_some() && !state.stop_strings.is_stopped() {
            emitted.push_str(&state.stop_strings.append(&state.detokenizer.flush(), check_stops));
            emitted.push_str(&state.stop_strings.finish());
        }
        if state.stop_strings.is_stopped() && (finish_reason.is_none() || cut_short) {
            if finish_reason.is_none() {
                self.scheduler
                    .finish_requests([request_id], RequestStatus::FinishedStopped)
                    .expect("FinishedStopped is a finished status");
            }
            finish_reason = Some(FinishReason::Stop);
        }
        let output = RequestOutput {
            request_id,
            new_token_ids: core_output.new_token_ids,
            new_text: emitted,
            new_logprobs: core_output.new_logprobs,
            prompt_logprobs: core_output.prompt_logprobs,
            finish_reason,
            num_prompt_tokens: state.num_prompt_tokens,
            num_output_tokens: state.num_output_tokens,
            num_cached_tokens: core_output.num_cached_tokens,
        };
        if let Some(reason) = finish_reason {
            self.finish_metrics(request_id, reason, now);
        }
        Ok(Some(output))
    }

    /// Finishes a live request with `status` from outside the scheduler's own stops.
    fn finish_with(&mut self, request_id: RequestId, status: RequestStatus) -> Option<RequestOutput> {
        let reason = status.finish_reason()?;
        let num_cached_tokens = self.scheduler.get_request(request_id).map_or(0, |r| r.num_cached_tokens);
        let state = self.requests.get_mut(&request_id)?;
        self.scheduler.finish_requests([request_id], status).ok()?;
        let check_stops = state.num_output_tokens >= state.min_tokens;
        let mut new_text = state.stop_strings.append(&state.detokenizer.flush(), check_stops);
        new_text.push_str(&state.stop_strings.finish());
        let output = RequestOutput {
            request_id,
            new_token_ids: Vec::new(),
            new_text,
            new_logprobs: Vec::new(),
            prompt_logprobs: None,
            finish_reason: Some(reason),
            num_prompt_tokens: state.num_prompt_tokens,
            num_output_tokens: state.num_output_tokens,
            num_cached_tokens,
        };
        self.finish_metrics(request_id, reason, Instant::now());
        Some(output)
    }

    /// Forgets a finished request and records its end.
    fn finish_metrics(&mut self, request_id: RequestId, reason: FinishReason, now: Instant) {
        self.latencies.finish(request_id);
        if let Some(state) = self.requests.remove(&request_id) {
            self.metrics.record_finish(state.lora.as_deref(), reason);
            self.metrics.e2e_request_latency.observe((now - state.arrival).as_secs_f64());
        }
    }
}

/// The masks of the constrained requests that sample in step `scheduled` (none when no
/// request is constrained).
fn step_masks(
    scheduler: &Scheduler,
    requests: &mut HashMap<RequestId, RequestState>,
    scheduled: &SchedulerOutput,
) -> StepMaskMap {
    let samplers = constrained_samplers(scheduler, requests, scheduled);
    if samplers.is_empty() { HashMap::new() } else { constraint_masks(requests, samplers) }
}

/// A constrained request that samples this step: the output tokens its constraint has not
/// consumed yet, and the proposals the step verifies.
type ConstrainedSampler = (RequestId, Vec<TokenId>, Vec<TokenId>);

/// The constrained requests that sample in step `scheduled`, with the output tokens their
/// constraint has not consumed yet and the proposed tokens verified after them.
fn constrained_samplers(
    scheduler: &Scheduler,
    requests: &HashMap<RequestId, RequestState>,
    scheduled: &SchedulerOutput,
) -> Vec<ConstrainedSampler> {
    let mut samplers = Vec::new();
    for &id in scheduled.num_scheduled_tokens.keys() {
        let Some(consumed) = requests.get(&id).and_then(|s| s.constraint.as_ref()).map(|c| c.consumed())
        else {
            continue;
        };
        let samples = |r: &&Request| r.num_computed_tokens == r.num_tokens_with_spec();
        if let Some(request) = scheduler.get_request(id).filter(samples) {
            let new_tokens = request.output_token_ids.get(consumed..).unwrap_or_default().to_vec();
            let proposals = scheduled.scheduled_spec_decode_tokens.get(&id).cloned().unwrap_or_default();
            samplers.push((id, new_tokens, proposals));
        }
    }
    samplers
}

/// The masks of `samplers` (request, output tokens its constraint has not consumed,
/// proposals): each constraint follows its new tokens, then gives the mask of each position
/// the step samples at ([`crate::structured::ConstraintState::masks_along`]). A constraint
/// that fails moves its error into its request, which ends with it after this step
/// (whatever the executor samples under the empty mask it gets is dropped).
fn constraint_masks(
    requests: &mut HashMap<RequestId, RequestState>,
    samplers: Vec<ConstrainedSampler>,
) -> HashMap<RequestId, Vec<TokenMask>> {
    let mut masks = HashMap::with_capacity(samplers.len());
    for (id, new_tokens, proposals) in samplers {
        let Some(state) = requests.get_mut(&id) else { continue };
        let Some(constraint) = state.constraint.as_mut() else { continue };
        match constraint.follow(&new_tokens).and_then(|()| constraint.masks_along(&proposals)) {
            Ok(request_masks) => {
                masks.insert(id, request_masks);
            }
            Err(error) => {
                state.constraint_error = Some(error);
                masks.insert(id, vec![TokenMask::from_ids([])]);
            }
        }
    }
    masks
}

/// Caps `max_model_len` at the model's context length and tells the cache how the model's
/// layers attend: a window every layer slides, or sliding layers beside full ones.
pub(crate) fn fit_to_model(config: &mut EngineConfig, model: &ModelFiles) {
    config.scheduler.max_model_len = model.config.cap_model_len(config.scheduler.max_model_len);
    let windows = &model.config.layer_windows;
    config.cache.sliding_window = model.config.uniform_sliding_window();
    config.cache.full_layers_beside_sliding =
        windows.iter().any(Option::is_some) && windows.iter().any(Option::is_none);
}

/// The token ids of `messages` (and `tools`, when given) rendered by `template` with the extra
/// variables `kwargs`, what it does not support polyfilled ([`ChatTemplate::render_with_tools`]),
/// control tokens parsed;
/// `add_generation_prompt` ends them with the assistant's header.
pub fn encode_chat(
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    kwargs: &TemplateKwargs,
    add_generation_prompt: bool,
) -> Result<Vec<TokenId>, EngineError> {
    let template = template.ok_or(ChatError::NoTemplate)?;
    let text = template.render_with_kwargs(messages, tools, kwargs, add_generation_prompt)?;
    Ok(tokenizer.encode(&text, true)?)
}
