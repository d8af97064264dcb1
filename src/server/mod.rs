//! The OpenAI-compatible HTTP server (feature `server`): `/v1/completions`,
//! `/v1/chat/completions` (JSON or server-sent events), `/v1/models`, `/health`, and
//! `/metrics` in the Prometheus text format.
//!
//! Handlers talk to an [`AsyncEngine`]; each request gets its own output stream, so a
//! client that disconnects drops its stream and the engine aborts the request and frees
//! its KV blocks. A full waiting queue or a lost device answers 503, bad JSON or
//! parameters 400, a body over the limit 413 ([`limits::ServerLimits`]), all with an
//! OpenAI-style error body; `/health` answers 503 once the device is lost.

pub mod error;
pub mod limits;
pub mod openai;
pub mod prometheus;
mod routes;
mod streaming;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::engine::Engine;
use crate::engine::handle::AsyncEngine;
use crate::model::Tokenizer;
use limits::ServerLimits;

/// Everything the handlers share.
#[derive(Debug)]
pub struct ServerState {
    engine: AsyncEngine,
    tokenizer: Arc<Tokenizer>,
    model_name: String,
    max_model_len: usize,
    limits: ServerLimits,
    created: u64,
    next_id: AtomicU64,
}

impl ServerState {
    /// Moves `engine` onto its own thread and serves it as `model_name`.
    pub fn new(engine: Engine, model_name: impl Into<String>) -> std::io::Result<Self> {
        let tokenizer = Arc::clone(engine.tokenizer());
        let max_model_len = engine.scheduler().config().max_model_len;
        Ok(Self {
            engine: AsyncEngine::spawn(engine)?,
            tokenizer,
            model_name: model_name.into(),
            max_model_len,
            limits: ServerLimits::default(),
            created: unix_seconds(),
            next_id: AtomicU64::new(0),
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

    /// A fresh response id with `prefix`.
    fn next_response_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// The server's routes over `state`.
pub fn router(state: Arc<ServerState>) -> Router {
    let max_body_bytes = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/completions", post(routes::completions))
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/models", get(routes::models))
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
