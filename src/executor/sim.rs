//! A deterministic simulated model for tests, the visualizer and scale studies.
//!
//! The next token is a hash of the request's whole token history (prompt + outputs) and of
//! nothing else, so every schedule — any batch mix, chunking, preemption or prefix hit —
//! must produce the same outputs. A cost model turns each step into simulated seconds.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::core::host_tier::StepTiming;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::executor::fault::FaultPlan;
use crate::executor::{ExecutorError, ModelExecutor, StepMasks};
use crate::ids::{RequestId, TokenId};
use crate::structured::TokenMask;

/// Simulated seconds per step: a fixed overhead, a cost per scheduled token and a cost per
/// KV token read by attention; host KV copies at a bandwidth plus a latency per step that
/// copies (loads before the forward pass, stores overlapping it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostModel {
    /// Seconds every non-empty step costs (launches, sync, sampling).
    pub step_overhead_s: f64,
    /// Seconds per scheduled token (weights and activations).
    pub per_token_s: f64,
    /// Seconds per KV token read (each scheduled request reads its whole context).
    pub per_kv_token_s: f64,
    /// KV bytes per token (every layer, K and V): a block's copy size is this times the
    /// block size.
    pub kv_bytes_per_token: u64,
    /// Host <-> device copy bandwidth, bytes per second.
    pub host_copy_bytes_per_s: f64,
    /// Seconds of latency per batch of host copies.
    pub host_copy_latency_s: f64,
    /// Host seconds per step outside the model (scheduling, output processing): exposed
    /// before each step in the serial loop, behind the step in flight with async scheduling.
    pub host_step_s: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        // KV of an 8B Llama (32 layers, 8 KV heads of 128, f16) over a PCIe link.
        Self {
            step_overhead_s: 4e-3,
            per_token_s: 50e-6,
            per_kv_token_s: 0.2e-6,
            kv_bytes_per_token: 2 * 32 * 8 * 128 * 2,
            host_copy_bytes_per_s: 25e9,
            host_copy_latency_s: 10e-6,
            // The engine's share of a step on an H200 (0.5 to 1 ms).
            host_step_s: 0.5e-3,
        }
    }
}

impl CostModel {
    /// Seconds one step takes; an empty step costs nothing.
    pub fn step_seconds(&self, num_scheduled_tokens: usize, num_kv_tokens_read: usize) -> f64 {
        if num_scheduled_tokens == 0 {
            return 0.0;
        }
        self.step_overhead_s
            + self.per_token_s * num_scheduled_tokens as f64
            + self.per_kv_token_s * num_kv_tokens_read as f64
    }

    /// Seconds to copy `bytes` between host and device in one batch; nothing costs nothing.
    pub fn copy_seconds(&self, bytes: u64) -> f64 {
        if bytes == 0 { 0.0 } else { self.host_copy_latency_s + bytes as f64 / self.host_copy_bytes_per_s }
    }
}

/// The simulated model's vocabulary, EOS, seed and cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// Tokens are drawn from `0..vocab_size`.
    pub vocab_size: u32,
    /// The EOS token (make `vocab_size` small for EOS to occur often).
    pub eos_token_id: Option<TokenId>,
    /// Seed of the token hash: another seed is another "model".
    pub seed: u64,
    /// Simulated time.
    pub cost: CostModel,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { vocab_size: 32_000, eos_token_id: Some(2), seed: 0, cost: CostModel::default() }
    }
}

/// A simulated-model configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimConfigError {
    /// `vocab_size` is 0.
    #[error("vocab_size must be at least 1")]
    EmptyVocab,
    /// The EOS token lies outside the vocabulary.
    #[error("eos_token_id {eos} is outside the vocabulary of {vocab_size} tokens")]
    EosOutsideVocab {
        /// The EOS id.
        eos: TokenId,
        /// The vocabulary size.
        vocab_size: u32,
    },
}

/// The next token after `history` for a model of `config`: a pure function of the whole
/// history.
pub fn next_token(config: &SimConfig, history: &[TokenId]) -> TokenId {
    let mut bytes = Vec::with_capacity(history.len() * 4);
    for token in history {
        bytes.extend_from_slice(&token.to_le_bytes());
    }
    (xxh3_64_with_seed(&bytes, config.seed) % u64::from(config.vocab_size)) as TokenId
}

/// The next token after `history` among the ids `mask` allows: [`next_token`] when allowed,
/// else the allowed id its hash picks. A pure function of history and mask.
pub fn next_allowed_token(config: &SimConfig, history: &[TokenId], mask: &TokenMask) -> TokenId {
    let token = next_token(config, history);
    if mask.allows(token) {
        return token;
    }
    let allowed: Vec<TokenId> = mask.ids().filter(|&id| id < config.vocab_size).collect();
    allowed.get(token as usize % allowed.len().max(1)).copied().unwrap_or(token)
}

#[derive(Debug)]
struct SimSequence {
    token_ids: Vec<TokenId>,
    num_computed_tokens: usize,
    /// Samples under a constraint's mask.
    constrained: bool,
}

/// The simulated executor: keeps each request's token history and computed length.
#[derive(Debug)]
pub struct SimExecutor {
    config: SimConfig,
    sequences: HashMap<RequestId, SimSequence>,
    elapsed_s: f64,
    last_step_s: f64,
    realtime: bool,
    faults: FaultPlan,
    kv_block_bytes: u64,
    last_timing: StepTiming,
}

impl SimExecutor {
    /// A simulated model.
    pub fn new(config: SimConfig) -> Result<Self, SimConfigError> {
        if config.vocab_size == 0 {
            return Err(SimConfigError::EmptyVocab);
        }
        if let Some(eos) = config.eos_token_id.filter(|&eos| eos >= config.vocab_size) {
            return Err(SimConfigError::EosOutsideVocab { eos, vocab_size: config.vocab_size });
        }
        Ok(Self {
            config,
            sequences: HashMap::new(),
            elapsed_s: 0.0,
            last_step_s: 0.0,
            realtime: false,
            faults: FaultPlan::default(),
            kv_block_bytes: 0,
            last_timing: StepTiming::default(),
        })
    }

    /// Makes every step also take its simulated time in wall-clock time (it sleeps).
    pub fn with_realtime(mut self, realtime: bool) -> Self {
        self.realtime = realtime;
        self
    }

    /// The same executor, failing the steps `faults` names (each after forgetting the
    /// requests the scheduler finished, before computing anything).
    pub fn with_faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// The same executor, pricing each host KV copy as `bytes` (the cache's
    /// `kv_block_bytes`).
    pub fn with_kv_block_bytes(mut self, bytes: u64) -> Self {
        self.kv_block_bytes = bytes;
        self
    }

    /// Its configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Simulated seconds of every step so far.
    pub fn elapsed_seconds(&self) -> f64 {
        self.elapsed_s
    }

    /// Simulated seconds of the last step.
    pub fn last_step_seconds(&self) -> f64 {
        self.last_step_s
    }

    /// Requests whose history it holds.
    pub fn num_sequences(&self) -> usize {
        self.sequences.len()
    }

    fn run_tokens(
        &mut self,
        request_id: RequestId,
        resumed: bool,
        num_computed_tokens: usize,
        (token_ids, num_scheduled): (&[TokenId], usize),
        num_spec: usize,
        masks: &mut StepMasks<'_>,
    ) -> Result<Vec<TokenId>, ExecutorError> {
        let invalid = |why: String| ExecutorError::InvalidBatch(format!("request {request_id}: {why}"));
        let sequence =
            self.sequences.get_mut(&request_id).ok_or_else(|| invalid("unknown request".into()))?;
        let known = if resumed { sequence.token_ids.len() } else { sequence.num_computed_tokens };
        if num_computed_tokens > known {
            return Err(invalid(format!(
                "computed tokens {num_computed_tokens} beyond the {known} it knows"
            )));
        }
        for (offset, &token) in token_ids.iter().enumerate() {
            let position = num_computed_tokens + offset;
            match sequence.token_ids.get(position) {
                Some(&known) if known != token => {
                    return Err(invalid(format!(
                        "token {token} at position {position}, history has {known}"
                    )));
                }
                Some(_) => {}
                None if position == sequence.token_ids.len() => sequence.token_ids.push(token),
                None => return Err(invalid(format!("gap in the history at position {position}"))),
            }
        }
        // Positions past the given ids are placeholders: tokens it sampled itself.
        let end = num_computed_tokens + num_scheduled;
        if end > sequence.token_ids.len() {
            return Err(invalid(format!("placeholder positions up to {end} beyond its history")));
        }
        sequence.num_computed_tokens = end;
        if sequence.num_computed_tokens < sequence.token_ids.len() {
            return Ok(Vec::new());
        }
        let masks = match sequence.constrained {
            true => Some(masks.get(request_id).ok_or(ExecutorError::MissingMask(request_id))?),
            false => None,
        };
        verify(&self.config, sequence, num_spec, masks).ok_or(ExecutorError::MissingMask(request_id))
    }
}

/// Verifies the last `num_spec` tokens of `sequence` (proposals; none in plain decode): each
/// is accepted while it is the token the model gives after the ones before it (under that
/// position's mask, for a constrained request); the first it does not give is replaced by
/// the model's token, and after all are accepted the model adds one more. The history keeps
/// the accepted tokens and the model's; returns those (`None` when a position it samples
/// at has no mask).
fn verify(
    config: &SimConfig,
    sequence: &mut SimSequence,
    num_spec: usize,
    masks: Option<&[TokenMask]>,
) -> Option<Vec<TokenId>> {
    let base = sequence.token_ids.len() - num_spec;
    let mut accepted = 0;
    let token = loop {
        let history = &sequence.token_ids[..base + accepted];
        let token = match masks {
            Some(masks) => next_allowed_token(config, history, masks.get(accepted)?),
            None => next_token(config, history),
        };
        if accepted == num_spec || token != sequence.token_ids[base + accepted] {
            break token;
        }
        accepted += 1;
    };
    sequence.token_ids.truncate(base + accepted);
    sequence.num_computed_tokens = base + accepted;
    sequence.token_ids.push(token);
    Some(sequence.token_ids[base..].to_vec())
}

impl ModelExecutor for SimExecutor {
    fn last_step_timing(&self) -> Option<StepTiming> {
        Some(self.last_timing)
    }

    fn supports_async_scheduling(&self) -> bool {
        true
    }

    fn execute(
        &mut self,
        scheduler_output: &SchedulerOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        for request_id in &scheduler_output.finished_req_ids {
            self.sequences.remove(request_id);
        }
        self.faults.next_step()?;
        let scheduled = |request_id: RequestId| {
            scheduler_output.num_scheduled_tokens.get(&request_id).copied().ok_or_else(|| {
                ExecutorError::InvalidBatch(format!("request {request_id} has no scheduled token count"))
            })
        };
        let mut output = ModelRunnerOutput::default();
        let mut num_kv_tokens_read = 0;
        for new in &scheduler_output.scheduled_new_reqs {
            let num_scheduled = scheduled(new.req_id)?;
            let start = new.num_computed_tokens;
            let end = start + num_scheduled;
            let tokens = new.prompt_token_ids.get(start..end).ok_or_else(|| {
                ExecutorError::InvalidBatch(format!(
                    "request {}: tokens {start}..{end} beyond the prompt",
                    new.req_id
                ))
            })?;
            let sequence = SimSequence {
                token_ids: new.prompt_token_ids.clone(),
                num_computed_tokens: start,
                constrained: new.sampling_params.structured_outputs.is_some(),
            };
            self.sequences.insert(new.req_id, sequence);
            let sampled = self.run_tokens(new.req_id, false, start, (tokens, num_scheduled), 0, masks)?;
            if !sampled.is_empty() {
                output.sampled_token_ids.insert(new.req_id, sampled);
            }
            num_kv_tokens_read += end;
        }
        for cached in &scheduler_output.scheduled_cached_reqs {
            let num_scheduled = scheduled(cached.req_id)?;
            let start = cached.num_computed_tokens;
            if cached.new_token_ids.len() > num_scheduled {
                return Err(ExecutorError::InvalidBatch(format!(
                    "request {}: {} token ids for {num_scheduled} scheduled tokens",
                    cached.req_id,
                    cached.new_token_ids.len()
                )));
            }
            let num_spec =
                scheduler_output.scheduled_spec_decode_tokens.get(&cached.req_id).map_or(0, Vec::len);
            let sampled = self.run_tokens(
                cached.req_id,
                cached.resumed_from_preemption,
                start,
                (&cached.new_token_ids, num_scheduled),
                num_spec,
                masks,
            )?;
            if !sampled.is_empty() {
                output.sampled_token_ids.insert(cached.req_id, sampled);
            }
            num_kv_tokens_read += start + num_scheduled;
        }
        let cost = &self.config.cost;
        let compute_tokens = scheduler_output.total_num_scheduled_tokens;
        let compute_s = cost.step_seconds(compute_tokens, num_kv_tokens_read);
        let transfers = &scheduler_output.kv_transfers;
        let load_bytes = transfers.loads.len() as u64 * self.kv_block_bytes;
        let store_bytes = transfers.stores.len() as u64 * self.kv_block_bytes;
        let (load_s, store_s) = (cost.copy_seconds(load_bytes), cost.copy_seconds(store_bytes));
        self.last_step_s = compute_s + load_s + (store_s - compute_s).max(0.0);
        self.last_timing =
            StepTiming { compute_tokens, compute_s, load_bytes, store_bytes, copy_s: load_s + store_s };
        self.elapsed_s += self.last_step_s;
        if self.realtime {
            std::thread::sleep(std::time::Duration::from_secs_f64(self.last_step_s));
        }
        Ok(output)
    }
}
