//! LoRA adapters over HTTP, as vLLM serves them: a request names an adapter through `model`,
//! `/v1/models` lists the adapters with the base model as `parent`, and
//! `POST /v1/load_lora_adapter` / `POST /v1/unload_lora_adapter` change them at runtime
//! (behind the API key gate), with vLLM's answers: 200 and a plain-text `Success: ...`, 400
//! for a missing field or a name already loaded or an adapter that does not fit, 404 for a
//! path or name that does not exist; pagoda adds 409 for an unload while requests use it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ServerState;
use super::error::ApiError;
use super::routes::parse_body;
use crate::engine::{Engine, EngineError};

/// The adapters the server answers to, by name, with the path each was read from (a mirror of
/// the engine's registry, which checks again when a request is added).
#[derive(Debug, Default)]
pub struct ServedAdapters {
    enabled: bool,
    by_name: Mutex<BTreeMap<String, PathBuf>>,
}

impl ServedAdapters {
    /// The adapters `engine` has loaded (their path from `paths` where given, else the name).
    pub fn new(engine: &Engine, paths: &[(String, PathBuf)]) -> Self {
        let by_name = engine
            .loras()
            .into_iter()
            .map(|lora| {
                let path = paths.iter().find(|(name, _)| *name == lora.name).map(|(_, p)| p.clone());
                let path = path.unwrap_or_else(|| PathBuf::from(&lora.name));
                (lora.name, path)
            })
            .collect();
        Self { enabled: engine.lora_usage().max_loras > 0, by_name: Mutex::new(by_name) }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PathBuf>> {
        self.by_name.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `name` is a served adapter.
    pub fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// The served adapters and their paths, by name.
    pub fn list(&self) -> Vec<(String, PathBuf)> {
        self.lock().iter().map(|(name, path)| (name.clone(), path.clone())).collect()
    }
}

/// `POST /v1/load_lora_adapter`'s body (vLLM's other fields are ignored).
#[derive(Debug, Deserialize)]
struct LoadRequest {
    lora_name: Option<String>,
    lora_path: Option<String>,
}

/// `POST /v1/unload_lora_adapter`'s body.
#[derive(Debug, Deserialize)]
struct UnloadRequest {
    lora_name: Option<String>,
}

/// What the engine thread answered to an unload.
enum Unloaded {
    Done,
    InUse,
    Failed(EngineError),
}

/// `POST /v1/load_lora_adapter`: reads the adapter at `lora_path` and serves it as `lora_name`.
pub async fn load_lora_adapter(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: LoadRequest = parse_body(&state, body)?;
    let (Some(name), Some(path)) = (request.lora_name.filter(|n| !n.is_empty()), request.lora_path) else {
        return Err(ApiError::bad_request("Both 'lora_name' and 'lora_path' must be provided.", "lora_name"));
    };
    enabled(&state)?;
    if state.loras.contains(&name) || name == state.model_name {
        return Err(ApiError::bad_request(
            format!("The lora adapter '{name}' has already been loaded."),
            "lora_name",
        ));
    }
    let path = PathBuf::from(path);
    if !path.exists() {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("No adapter found for {}", path.display()),
            param: Some("lora_path".into()),
        });
    }
    let (engine_name, engine_path) = (name.clone(), path.clone());
    state
        .engine
        .call(move |engine| engine.load_lora(&engine_name, &engine_path).map(drop))
        .await?
        .map_err(|error| ApiError::bad_request(error.to_string(), "lora_path"))?;
    tracing::info!(adapter = %name, path = %path.display(), "loaded a LoRA adapter");
    let message = format!("Success: LoRA adapter '{name}' added successfully.");
    state.loras.lock().insert(name, path);
    Ok(message.into_response())
}

/// `POST /v1/unload_lora_adapter`: forgets adapter `lora_name` (409 while requests use it).
pub async fn unload_lora_adapter(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: UnloadRequest = parse_body(&state, body)?;
    let Some(name) = request.lora_name.filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request(
            "'lora_name' needs to be provided to unload a LoRA adapter.",
            "lora_name",
        ));
    };
    enabled(&state)?;
    if !state.loras.contains(&name) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The lora adapter '{name}' cannot be found."),
            param: Some("lora_name".into()),
        });
    }
    let engine_name = name.clone();
    let unloaded = state
        .engine
        .call(move |engine| {
            let usage = engine.lora_usage();
            if usage.running.iter().chain(&usage.waiting).any(|n| *n == engine_name) {
                return Unloaded::InUse;
            }
            match engine.unload_lora(&engine_name) {
                Ok(()) => Unloaded::Done,
                Err(error) => Unloaded::Failed(error),
            }
        })
        .await?;
    match unloaded {
        Unloaded::Done => {
            state.loras.lock().remove(&name);
            tracing::info!(adapter = %name, "unloaded a LoRA adapter");
            Ok(format!("Success: LoRA adapter '{name}' removed successfully.").into_response())
        }
        Unloaded::InUse => Err(ApiError {
            status: StatusCode::CONFLICT,
            message: format!("The lora adapter '{name}' is in use by requests still running or waiting."),
            param: Some("lora_name".into()),
        }),
        Unloaded::Failed(error) => Err(ApiError::from(error)),
    }
}

/// A 400 unless the server was started with `--enable-lora`.
fn enabled(state: &ServerState) -> Result<(), ApiError> {
    match state.loras.enabled {
        true => Ok(()),
        false => {
            Err(ApiError::bad_request("LoRA is not enabled on this server (--enable-lora)", "lora_name"))
        }
    }
}
