//! The engine's LoRA adapters: loaded and unloaded by name at runtime (vLLM's
//! `/v1/load_lora_adapter`), each given a lifetime-unique id, and the adapters the running and
//! waiting requests use (vLLM's `lora_requests_info`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Engine, EngineError};
use crate::core::lora::LoraRequest;
use crate::executor::ExecutorError;
use crate::executor::lora::LoraConfig;

/// Why a LoRA call was refused, one variant per cause so that callers (the server's status
/// codes, the C ABI's) tell them apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoraError {
    /// The engine was built without LoRA (`--enable-lora`, `EngineConfig::lora`).
    #[error("LoRA is not enabled (--enable-lora)")]
    NotEnabled,
    /// No adapter of this name is loaded.
    #[error("no LoRA adapter named {0:?} is loaded")]
    Unknown(String),
    /// An adapter's name is empty or already taken.
    #[error("a LoRA adapter named {0:?} is already loaded")]
    NameTaken(String),
    /// Nothing exists at the adapter's path.
    #[error("no LoRA adapter found at {}", .0.display())]
    NotFound(PathBuf),
    /// The adapter at `path` could not be read, or does not fit the model or the limits.
    #[error("LoRA adapter {name:?} at {}: {reason}", path.display())]
    Refused {
        /// The name it was to be loaded as.
        name: String,
        /// Where it was read from.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// Live requests still use the adapter.
    #[error("LoRA adapter {0:?} is in use by live requests")]
    InUse(String),
}

/// Adapters by name.
#[derive(Debug, Default)]
pub struct LoraRegistry {
    limits: Option<LoraConfig>,
    by_name: BTreeMap<String, LoraRequest>,
    next_id: u32,
}

impl LoraRegistry {
    /// An empty registry; `limits` is `None` when LoRA is not enabled.
    pub fn new(limits: Option<LoraConfig>) -> Self {
        Self { limits, by_name: BTreeMap::new(), next_id: 1 }
    }

    /// The adapter named `name`.
    pub fn get(&self, name: &str) -> Result<LoraRequest, LoraError> {
        if self.limits.is_none() {
            return Err(LoraError::NotEnabled);
        }
        self.by_name.get(name).cloned().ok_or_else(|| LoraError::Unknown(name.to_owned()))
    }
}

/// The adapters of the running and the waiting requests (names, each once, sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoraUsage {
    /// `--max-loras` (0 without LoRA).
    pub max_loras: usize,
    /// Adapters of running requests.
    pub running: Vec<String>,
    /// Adapters of waiting requests.
    pub waiting: Vec<String>,
}

impl Engine {
    /// Reads the adapter at `path` (a PEFT directory or a LoRA GGUF) and makes it available
    /// to requests as `name`; refused ([`LoraError`]) when LoRA is not enabled, the name is
    /// empty or taken, nothing is at `path`, or the adapter does not fit the model or the limits.
    pub fn load_lora(&mut self, name: &str, path: &Path) -> Result<LoraRequest, EngineError> {
        if self.loras.limits.is_none() {
            return Err(LoraError::NotEnabled.into());
        }
        if name.is_empty() || self.loras.by_name.contains_key(name) {
            return Err(LoraError::NameTaken(name.to_owned()).into());
        }
        if !path.exists() {
            return Err(LoraError::NotFound(path.to_path_buf()).into());
        }
        let lora = LoraRequest { id: self.loras.next_id, name: name.to_owned() };
        let (id, owned) = (lora.id, path.to_path_buf());
        self.steps
            .executor()
            .call(move |executor| executor.load_lora(id, &owned))
            .unwrap_or_else(|| Err(ExecutorError::DeviceLost("the executor thread stopped".into())))
            .map_err(|e| match e {
                ExecutorError::Config(reason) => {
                    LoraError::Refused { name: name.to_owned(), path: path.to_path_buf(), reason }.into()
                }
                other => EngineError::Executor(other),
            })?;
        self.loras.next_id += 1;
        self.loras.by_name.insert(name.to_owned(), lora.clone());
        Ok(lora)
    }

    /// Forgets adapter `name`; refused while a live request uses it.
    pub fn unload_lora(&mut self, name: &str) -> Result<(), EngineError> {
        let lora = self.loras.get(name)?;
        let usage = self.lora_usage();
        if usage.running.iter().chain(&usage.waiting).any(|n| n == name) {
            return Err(LoraError::InUse(name.to_owned()).into());
        }
        let id = lora.id;
        self.steps
            .executor()
            .call(move |executor| executor.unload_lora(id))
            .unwrap_or_else(|| Err(ExecutorError::DeviceLost("the executor thread stopped".into())))?;
        self.loras.by_name.remove(name);
        Ok(())
    }

    /// The loaded adapters, by name.
    pub fn loras(&self) -> Vec<LoraRequest> {
        self.loras.by_name.values().cloned().collect()
    }

    /// Which adapters the running and waiting requests use (nothing to look up without LoRA).
    pub fn lora_usage(&self) -> LoraUsage {
        if self.loras.limits.is_none() {
            return LoraUsage::default();
        }
        let names = |ids: &[crate::RequestId]| {
            let mut names: Vec<String> = ids
                .iter()
                .filter_map(|&id| self.scheduler.get_request(id)?.lora.as_ref().map(|l| l.name.clone()))
                .collect();
            names.sort();
            names.dedup();
            names
        };
        LoraUsage {
            max_loras: self.loras.limits.map_or(0, |l| l.max_loras),
            running: names(self.scheduler.running_ids()),
            waiting: names(&self.scheduler.waiting_ids()),
        }
    }
}

/// LoRA flags (vLLM's names).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoraArgs {
    /// Serve LoRA adapters (on with --lora-modules too).
    #[arg(long)]
    enable_lora: bool,
    /// LoRA adapters to load at start: NAME=PATH (a PEFT directory or a LoRA GGUF), or vLLM's
    /// JSON '{"name": NAME, "path": PATH}' (repeatable). `generate` and `chat` run their
    /// prompts with the first; `serve` answers to each name as a `model`.
    #[arg(long, visible_alias = "lora", value_name = "NAME=PATH", value_parser = parse_lora_module)]
    lora_modules: Vec<(String, std::path::PathBuf)>,
    /// Adapters on the GPU at once: the most distinct adapters in one step [default: 1].
    #[arg(long, value_name = "N")]
    max_loras: Option<usize>,
    /// Largest adapter rank [default: 16].
    #[arg(long, value_name = "R")]
    max_lora_rank: Option<usize>,
    /// Adapters kept in host memory, the least recently used re-read from disk [default:
    /// --max-loras].
    #[arg(long, value_name = "N")]
    max_cpu_loras: Option<usize>,
}

/// `NAME=PATH` or `{"name": NAME, "path": PATH}`.
fn parse_lora_module(text: &str) -> Result<(String, std::path::PathBuf), String> {
    if text.trim_start().starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str);
        return match (field("name"), field("path")) {
            (Some(name), Some(path)) if !name.is_empty() => Ok((name.to_owned(), path.into())),
            _ => Err("expected {\"name\": NAME, \"path\": PATH}".into()),
        };
    }
    match text.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_owned(), path.into())),
        _ => Err(format!("expected NAME=PATH, got {text:?}")),
    }
}

impl LoraArgs {
    /// The limits, when LoRA is on.
    pub fn config(&self) -> Option<LoraConfig> {
        if !self.enable_lora && self.lora_modules.is_empty() {
            return None;
        }
        let d = LoraConfig::default();
        let max_loras = self.max_loras.unwrap_or(d.max_loras);
        Some(LoraConfig {
            max_loras,
            max_lora_rank: self.max_lora_rank.unwrap_or(d.max_lora_rank),
            max_cpu_loras: self.max_cpu_loras.unwrap_or(max_loras),
        })
    }

    /// `--lora-modules`: `(name, path)`.
    pub fn modules(&self) -> &[(String, std::path::PathBuf)] {
        &self.lora_modules
    }

    /// Loads `--lora-modules` into `engine`; returns the first one's name.
    pub fn load(&self, engine: &mut Engine) -> Result<Option<String>, EngineError> {
        for (name, path) in &self.lora_modules {
            engine.load_lora(name, path)?;
        }
        Ok(self.lora_modules.first().map(|(name, _)| name.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_modules_parse_as_name_equals_path_or_vllm_json() {
        assert_eq!(parse_lora_module("sql=/a/b").unwrap(), ("sql".into(), "/a/b".into()));
        assert_eq!(
            parse_lora_module(r#"{"name": "sql", "path": "/a/b", "base_model_name": "x"}"#).unwrap(),
            ("sql".into(), "/a/b".into())
        );
        assert!(parse_lora_module("sql").is_err());
        assert!(parse_lora_module("=/a").is_err());
        assert!(parse_lora_module(r#"{"name": "sql"}"#).is_err());
    }
}
