//! The engine's LoRA adapters: loaded and unloaded by name at runtime (vLLM's
//! `/v1/load_lora_adapter`), each given a lifetime-unique id, and the adapters the running and
//! waiting requests use (vLLM's `lora_requests_info`).

use std::collections::BTreeMap;
use std::path::Path;

use super::{Engine, EngineError};
use crate::core::lora::LoraRequest;
use crate::executor::lora::LoraConfig;

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
    pub fn get(&self, name: &str) -> Result<LoraRequest, EngineError> {
        self.by_name
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::Lora(format!("no LoRA adapter named {name:?} is loaded")))
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
    /// to requests as `name`; refused when LoRA is not enabled, the name is taken, or the
    /// adapter does not fit the model or the limits.
    pub fn load_lora(&mut self, name: &str, path: &Path) -> Result<LoraRequest, EngineError> {
        if self.loras.limits.is_none() {
            return Err(EngineError::Lora("LoRA is not enabled (--enable-lora)".into()));
        }
        if name.is_empty() || self.loras.by_name.contains_key(name) {
            return Err(EngineError::Lora(format!("a LoRA adapter named {name:?} is already loaded")));
        }
        let lora = LoraRequest { id: self.loras.next_id, name: name.to_owned() };
        self.executor.load_lora(lora.id, path).map_err(|e| EngineError::Lora(e.to_string()))?;
        self.loras.next_id += 1;
        self.loras.by_name.insert(name.to_owned(), lora.clone());
        Ok(lora)
    }

    /// Forgets adapter `name`; refused while a live request uses it.
    pub fn unload_lora(&mut self, name: &str) -> Result<(), EngineError> {
        let lora = self.loras.get(name)?;
        let usage = self.lora_usage();
        if usage.running.iter().chain(&usage.waiting).any(|n| n == name) {
            return Err(EngineError::Lora(format!("LoRA adapter {name:?} is in use by live requests")));
        }
        self.executor.unload_lora(lora.id).map_err(|e| EngineError::Lora(e.to_string()))?;
        self.loras.by_name.remove(name);
        Ok(())
    }

    /// The loaded adapters, by name.
    pub fn loras(&self) -> Vec<LoraRequest> {
        self.loras.by_name.values().cloned().collect()
    }

    /// Which adapters the running and waiting requests use.
    pub fn lora_usage(&self) -> LoraUsage {
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
