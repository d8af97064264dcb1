//! The wgpu executor's LoRA adapters: registered ones by id, up to `max_cpu_loras` kept in
//! host memory (the least recently used re-read from disk when needed again), up to
//! `max_loras` on the GPU (the least recently used slot replaced), and each step's per-row
//! slots.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ExecutorError;
use crate::core::lora::SlotLru;
use crate::gpu::{GpuContext, NO_LORA};
use crate::model::architecture::ModelConfig;
use crate::model::llama::LlamaModel;
use crate::model::lora::LoraAdapter;
use crate::model::lora::bank::LoraSlots;

/// LoRA serving limits (vLLM's `--max-loras`, `--max-lora-rank`, `--max-cpu-loras`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Adapters on the GPU at once: the most distinct adapters in one step.
    pub max_loras: usize,
    /// Largest rank an adapter may have.
    pub max_lora_rank: usize,
    /// Adapters kept in host memory (at least `max_loras`).
    pub max_cpu_loras: usize,
}

impl Default for LoraConfig {
    /// vLLM's defaults: 1 adapter on the GPU, rank up to 16.
    fn default() -> Self {
        Self { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 }
    }
}

/// The executor's adapters and their GPU slots.
#[derive(Debug)]
pub struct ExecutorLora {
    config: LoraConfig,
    slots: LoraSlots,
    lru: SlotLru,
    paths: HashMap<u32, PathBuf>,
    /// Host copies, most recently used last.
    host: Vec<(u32, LoraAdapter)>,
}

impl ExecutorLora {
    /// Empty slots for `model`, batches up to `max_tokens` rows.
    pub fn new(
        ctx: &GpuContext,
        model: &LlamaModel,
        config: LoraConfig,
        max_tokens: usize,
    ) -> Result<Self, ExecutorError> {
        if config.max_loras == 0 || config.max_lora_rank == 0 {
            return Err(ExecutorError::Config("--max-loras and --max-lora-rank must be at least 1".into()));
        }
        let slots = LoraSlots::new(
            ctx,
            model.config(),
            model.qk_interleaved(),
            config.max_loras,
            config.max_lora_rank,
            max_tokens,
        )
        .map_err(|e| ExecutorError::Config(format!("allocating {} LoRA slots: {e}", config.max_loras)))?;
        let config = LoraConfig { max_cpu_loras: config.max_cpu_loras.max(config.max_loras), ..config };
        Ok(Self {
            config,
            slots,
            lru: SlotLru::new(config.max_loras),
            paths: HashMap::new(),
            host: Vec::new(),
        })
    }

    /// The GPU slots.
    pub fn slots(&self) -> &LoraSlots {
        &self.slots
    }

    /// Reads and checks the adapter at `path` as `id` (kept in host memory).
    pub fn register(&mut self, id: u32, path: PathBuf, model: &ModelConfig) -> Result<(), ExecutorError> {
        let adapter = LoraAdapter::load(&path, model).map_err(|e| ExecutorError::Config(e.to_string()))?;
        adapter.check_rank(self.config.max_lora_rank).map_err(|e| ExecutorError::Config(e.to_string()))?;
        self.paths.insert(id, path);
        self.keep_in_host(id, adapter, &[]);
        Ok(())
    }

    /// Forgets adapter `id`: its host copy and its GPU slot.
    pub fn unregister(&mut self, ctx: &GpuContext, id: u32) -> Result<(), ExecutorError> {
        self.paths.remove(&id);
        self.host.retain(|(held, _)| *held != id);
        if let Some(slot) = self.lru.evict(id) {
            self.slots.clear(ctx, slot).map_err(|e| ExecutorError::Device(e.to_string()))?;
        }
        Ok(())
    }

    /// The per-token slot rows of a step whose sequences are `seqs` (adapter id, tokens),
    /// loading into GPU slots the adapters that are not resident.
    pub fn rows(
        &mut self,
        ctx: &GpuContext,
        model: &ModelConfig,
        seqs: &[(Option<u32>, usize)],
    ) -> Result<Vec<u32>, ExecutorError> {
        let mut ids: Vec<u32> = seqs.iter().filter_map(|&(id, _)| id).collect();
        ids.sort_unstable();
        ids.dedup();
        let placements = self.lru.place(&ids).ok_or_else(|| {
            ExecutorError::InvalidBatch(format!(
                "{} adapters in one step, above --max-loras {}",
                ids.len(),
                self.config.max_loras
            ))
        })?;
        for (&id, placement) in ids.iter().zip(&placements) {
            if placement.load {
                self.host_copy(id, &ids, model)?;
                let adapter = &self.host.last().expect("just kept").1;
                self.slots
                    .load(ctx, placement.slot, adapter, model)
                    .map_err(|e| ExecutorError::Config(e.to_string()))?;
            }
        }
        let slot_of = |id: Option<u32>| match id {
            Some(id) => placements[ids.binary_search(&id).expect("placed")].slot as u32,
            None => NO_LORA,
        };
        Ok(seqs.iter().flat_map(|&(id, n)| std::iter::repeat_n(slot_of(id), n)).collect())
    }

    /// Makes the host copy of `id` (re-read from its path when it was dropped) the most
    /// recently used one, last in the list.
    fn host_copy(&mut self, id: u32, in_use: &[u32], model: &ModelConfig) -> Result<(), ExecutorError> {
        let adapter = match self.host.iter().position(|(held, _)| *held == id) {
            Some(i) => self.host.remove(i).1,
            None => {
                let path = self
                    .paths
                    .get(&id)
                    .ok_or_else(|| ExecutorError::InvalidBatch(format!("LoRA adapter {id} is not loaded")))?;
                LoraAdapter::load(path, model).map_err(|e| ExecutorError::Config(e.to_string()))?
            }
        };
        self.keep_in_host(id, adapter, in_use);
        Ok(())
    }

    /// Keeps `adapter` as the most recently used host copy, dropping the least recently used
    /// ones (not `in_use`) above `max_cpu_loras`.
    fn keep_in_host(&mut self, id: u32, adapter: LoraAdapter, in_use: &[u32]) {
        self.host.retain(|(held, _)| *held != id);
        self.host.push((id, adapter));
        while self.host.len() > self.config.max_cpu_loras {
            match self.host.iter().position(|(held, _)| !in_use.contains(held) && *held != id) {
                Some(i) => drop(self.host.remove(i)),
                None => break,
            }
        }
    }
}
