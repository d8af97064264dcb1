//! The OpenAI-compatible HTTP server (feature `server`): `/v1/completions`,
//! `/v1/chat/completions` (JSON or server-sent events), `/v1/models`, vLLM's `/tokenize` and
//! `/detokenize`, `/health`, and `/metrics` in the Prometheus text format; LoRA adapters named
//! by `model` and vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` ([`lora`]). With a reasoning
//! parser ([`ServerOptions::reasoning_parser`]), chat replies carry the model's reasoning in
//! `reasoning_content` (and `reasoning`) apart from `content`.
//!
//! Handlers talk to an [`AsyncEngine`]; each request gets its own output stream, so a
//! client that disconnects drops its stream and the engine aborts the request and frees
//! its KV blocks. A full waiting queue or a lost device answers 503, bad JSON or
//! parameters 400, a body over the limit 413 ([`limits::ServerLimits`]), all with an
//! OpenAI-style error body; `/health` answers 503 once the device is lost.
//!
//! For routers in front of many replicas (llm-d, the Gateway API Inference Extension):
//! vLLM's metric names ([`prometheus::MetricsPrefix::Vllm`]), vLLM's KV-cache events over
//! ZeroMQ ([`kv_events`]), an API key on `/v1/*` and the tokenizer routes, and a graceful
//! drain ([`ServerState::drain`]): new requests get 503 and `/health` turns unhealthy while
//! the requests in flight finish.

mod echo;
pub mod error;
mod gate;
pub mod kv_events;
pub mod limits;
pub mod lora;
pub mod openai;
pub mod prometheus;
mod responses;
mod routes;
mod streaming;
pub mod tokenize;
pub mod tools;
pub mod unknown_fields;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

use self::kv_events::{KvEventPublisher, KvEventsConfig, KvEventsConfigError, KvEventsError, PublisherKind};
use self::prometheus::{CacheInfo, MetricsPrefix};
use self::tools::ToolFormat;
use crate::engine::Engine;
use crate::engine::handle::AsyncEngine;
use crate::model::reasoning::ReasoningParser;
use crate::model::{ChatTemplate, Tokenizer};
use limits::ServerLimits;

/// How the server presents itself besides the OpenAI API.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The key `/v1/*`, `/tokenize` and `/detokenize` requests must bring as
    /// `Authorization: Bearer <key>`; `None` leaves them open. `/health` and `/metrics` are
    /// always open.
    pub api_key: Option<String>,
    /// The prefix of the metric names.
    pub metrics_prefix: MetricsPrefix,
    /// KV-cache event publishing (off by default).
    pub kv_events: KvEventsConfig,
    /// Splits chat replies into `reasoning_content` and `content` (vLLM's
    /// `--reasoning-parser`); `None` leaves replies whole.
    pub reasoning_parser: Option<ReasoningParser>,
    /// LoRA adapters to load before serving, `(name, path)` (`--lora-modules`); the engine
    /// must have LoRA enabled.
    pub lora_modules: Vec<(String, std::path::PathBuf)>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The engine thread could not be started.
    #[error("cannot start the engine thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// The KV event configuration is invalid.
    #[error(transparent)]
    KvEventsConfig(#[from] KvEventsConfigError),
    /// The KV event sockets could not be set up.
    #[error(transparent)]
    KvEvents(#[from] KvEventsError),
    /// A `--lora-modules` adapter could not be loaded.
    #[error("cannot load LoRA adapter {name:?}: {error}")]
    Lora {
        /// The adapter's name.
        name: String,
        /// Why.
        error: crate::engine::EngineError,
    },
}

/// Everything the handlers share.
#[derive(Debug)]
pub struct ServerState {
    engine: AsyncEngine,
    tokenizer: Arc<Tokenizer>,
    chat_template: Option<Arc<ChatTemplate>>,
    model_name: String,
    max_model_len: usize,
    limits: ServerLimits,
    created: u64,
    next_id: AtomicU64,
    api_key: Option<String>,
    metrics_prefix: MetricsPrefix,
    cache_info: CacheInfo,
    kv_events: Option<KvEventPublisher>,
    draining: AtomicBool,
    admitting: AtomicUsize,
    /// How the model writes tool calls.
    tool_format: ToolFormat,
    /// How chat replies are split into reasoning and answer, if they are.
    reasoning_parser: Option<ReasoningParser>,
    /// The LoRA adapters requests may name as `model`.
    loras: lora::ServedAdapters,
}

impl ServerState {
    /// Moves `engine` onto its own thread and serves it as `model_name`, with the default
    /// options.
    pub fn new(engine: Engine, model_name: impl Into<String>) -> std::io::Result<Self> {
        Self::build(engine, model_name.into(), ServerOptions::default(), None)
    }

    /// Like [`ServerState::new`] with `options`; starts the KV event publisher when they
    /// ask for one (so it must run inside a Tokio runtime).
    pub async fn with_options(
        mut engine: Engine,
        model_name: impl Into<String>,
        options: ServerOptions,
    ) -> Result<Self, ServerError> {
        for (name, path) in &options.lora_modules {
            engine.load_lora(name, path).map_err(|error| ServerError::Lora { name: name.clone(), error })?;
        }
        let publisher = match options.kv_events.kind()? {
            PublisherKind::Zmq => {
                let block_size = engine.scheduler().kv_cache_manager().block_size();
                let publisher = KvEventPublisher::start(&options.kv_events, block_size).await?;
                tracing::info!(
                    endpoint = publisher.endpoint(),
                    replay = publisher.replay_endpoint(),
                    "publishing KV cache events"
                );
                Some(publisher)
            }
            PublisherKind::Off | PublisherKind::Null => None,
        };
        Ok(Self::build(engine, model_name.into(), options, publisher)?)
    }

    fn build(
        engine: Engine,
        model_name: String,
        options: ServerOptions,
        publisher: Option<KvEventPublisher>,
    ) -> std::io::Result<Self> {
        let tokenizer = Arc::clone(engine.tokenizer());
        let chat_template = engine.chat_template().cloned();
        let tool_format = chat_template.as_deref().map_or(ToolFormat::Hermes, ChatTemplate::tool_format);
        if let Some(template) = &chat_template {
            let capabilities = template.capabilities();
            tracing::info!(%capabilities, ?tool_format, "chat template");
        }
        let max_model_len = engine.scheduler().config().max_model_len;
        let loras = lora::ServedAdapters::new(&engine, &options.lora_modules);
        let kv = engine.scheduler().kv_cache_manager();
        let cache_info = CacheInfo {
            block_size: kv.block_size(),
            num_gpu_blocks: kv.pool().num_blocks(),
            enable_prefix_caching: kv.enable_caching(),
        };
        let engine = match &publisher {
            Some(publisher) => AsyncEngine::spawn_with_cache_events(engine, publisher.sink())?,
            None => AsyncEngine::spawn(engine)?,
        };
        Ok(Self {
            engine,
            tokenizer,
            chat_template,
            model_name,
            max_model_len,
            limits: ServerLimits::default(),
            created: unix_seconds(),
            next_id: AtomicU64::new(0),
            api_key: options.api_key,
            metrics_prefix: options.metrics_prefix,
            cache_info,
            kv_events: publisher,
            draining: AtomicBool::new(false),
            admitting: AtomicUsize::new(0),
            tool_format,
            reasoning_parser: options.reasoning_parser,
            loras,
        })
    }

    /// The same state with other request limits.
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// What one request may ask for.
    pub fn limits(&self) -> &ServerLimits {
        &self.limits
    }

    /// The engine behind the server.
    pub fn engine(&self) -> &AsyncEngine {
        &self.engine
    }

    /// The name clients pass as `model`.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The KV event PUB endpoint (with its bound port), when events are published.
    pub fn kv_events_endpoint(&self) -> Option<String> {
        self.kv_events.as_ref().map(|publisher| publisher.endpoint().to_owned())
    }

    /// The KV event replay endpoint (with its bound port), when there is one.
    pub fn kv_events_replay_endpoint(&self) -> Option<String> {
        self.kv_events.as_ref().and_then(|publisher| publisher.replay_endpoint().map(str::to_owned))
    }

    /// True once a drain has begun: the gated routes answer 503 and `/health` is unhealthy.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Requests in flight: those being admitted and those the engine has not finished.
    pub fn num_in_flight(&self) -> usize {
        self.admitting.load(Ordering::SeqCst) + self.engine.num_live_requests()
    }

    /// Stops admitting (new gated requests get 503, `/health` 503), waits until the
    /// requests in flight finish or `timeout` passes, then aborts what is left (and what a
    /// handler admitted just before the drain adds later), whose streams end with an error
    /// chunk. Returns how many requests were live at the deadline.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.draining.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.num_in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let left = self.engine.num_live_requests();
        if left > 0 {
            tracing::warn!(requests = left, "shutdown deadline passed; aborting the requests in flight");
        }
        while self.num_in_flight() > 0 {
            if self.engine.num_live_requests() > 0 {
                self.engine.abort_all();
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
        left
    }

    /// Waits until the KV events of every step so far are sent (or dropped); call it after
    /// [`AsyncEngine::call`], which returns once the engine handed over what came before.
    pub async fn flush_kv_events(&self) {
        if let Some(publisher) = &self.kv_events {
            publisher.flush().await;
        }
    }

    /// Sends the KV events still queued and closes the event sockets.
    pub async fn close_kv_events(&self) {
        if let Some(publisher) = &self.kv_events {
            publisher.close().await;
        }
    }

    /// A fresh response id with `prefix`.
    fn next_response_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// How often a drain looks at the requests in flight.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// The server's routes over `state`: `/v1/*`, `/tokenize`, `/detokenize` and `/tokenizer_info`
/// behind the API key and the drain gate.
pub fn router(state: Arc<ServerState>) -> Router {
    let max_body_bytes = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/completions", post(routes::completions))
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/models", get(routes::models))
        .route("/v1/load_lora_adapter", post(lora::load_lora_adapter))
        .route("/v1/unload_lora_adapter", post(lora::unload_lora_adapter))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/tokenizer_info", get(tokenize::tokenizer_info))
        .route_layer(from_fn_with_state(Arc::clone(&state), gate::gate))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Serves `router` on `listener` until the process ends or `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// Seconds since the Unix epoch.
fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}
