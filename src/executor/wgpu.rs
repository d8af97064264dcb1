//! The real executor: keeps each request's token history and block table from the
//! scheduler's outputs, builds the varlen batch, runs the Llama forward pass on the GPU and
//! samples (greedy with the GPU's argmax; otherwise on the CPU from the logits rows).

use std::collections::HashMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{ExecutorError, ModelExecutor};
use crate::config::{CacheConfig, SchedulerConfig};
use crate::core::output::{ModelRunnerOutput, SchedulerOutput, TokenLogprobs};
use crate::gpu::{GpuContext, GpuError, KvCache, KvCacheShape};
use crate::model::ModelFiles;
use crate::model::llama::{ForwardBatch, LlamaError, LlamaModel, Workspace, WorkspaceLimits};
use crate::request::{RequestId, TokenId};
use crate::sampling::SamplingParams;

/// What the executor remembers about one request between steps.
#[derive(Debug)]
struct RequestState {
    /// Prompt and output tokens, the ones it sampled included (as vLLM's runner keeps them).
    tokens: Vec<TokenId>,
    prompt_len: usize,
    block_ids: Vec<u32>,
    params: SamplingParams,
    rng: ChaCha8Rng,
}

/// One request's part of this step.
struct Scheduled {
    req_id: RequestId,
    start: usize,
    len: usize,
    samples: bool,
}

/// Runs a Llama-family model on wgpu for the engine core.
pub struct WgpuExecutor {
    ctx: GpuContext,
    model: LlamaModel,
    workspace: Workspace,
    cache: KvCache,
    block_size: usize,
    num_gpu_blocks: usize,
    requests: HashMap<RequestId, RequestState>,
}

impl std::fmt::Debug for WgpuExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuExecutor")
            .field("num_gpu_blocks", &self.num_gpu_blocks)
            .field("block_size", &self.block_size)
            .field("requests", &self.requests.len())
            .finish()
    }
}

fn device(e: GpuError, what: &str) -> ExecutorError {
    ExecutorError::Device(format!("{what}: {e}"))
}

fn from_llama(e: LlamaError) -> ExecutorError {
    match e {
        LlamaError::InvalidBatch(m) => ExecutorError::InvalidBatch(m),
        other => ExecutorError::Device(other.to_string()),
    }
}

impl WgpuExecutor {
    /// Upload `files` to `ctx` and allocate the KV pools and the step workspace.
    ///
    /// The pools hold `cache.num_gpu_blocks` blocks, or as many as fit `cache.kv_cache_memory`
    /// bytes when that is set.
    pub fn new(
        ctx: GpuContext,
        files: &ModelFiles,
        cache: &CacheConfig,
        scheduler: &SchedulerConfig,
        progress: bool,
    ) -> Result<Self, ExecutorError> {
        let model = LlamaModel::load(&ctx, files, progress).map_err(from_llama)?;
        let c = model.config();
        let format = ctx.capabilities().kv_format(cache.kv_cache_dtype);
        let num_gpu_blocks = match cache.kv_cache_memory {
            Some(bytes) => {
                let per_block =
                    2 * c.num_hidden_layers * cache.block_size * c.kv_size() * format.elem_bytes();
                (bytes / per_block.max(1) as u64) as usize
            }
            None => cache.num_gpu_blocks,
        };
        if num_gpu_blocks < 2 {
            return Err(ExecutorError::InvalidBatch(format!(
                "a KV pool of {num_gpu_blocks} blocks holds nothing (block 0 is reserved); raise --num-gpu-blocks or --kv-cache-memory"
            )));
        }
        let shape = KvCacheShape {
            num_layers: c.num_hidden_layers,
            num_blocks: num_gpu_blocks,
            block_size: cache.block_size,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        let kv =
            ctx.kv_cache(shape, cache.kv_cache_dtype).map_err(|e| device(e, "allocating the KV cache"))?;
        let limits = WorkspaceLimits {
            max_tokens: scheduler.max_num_batched_tokens,
            max_seqs: scheduler.max_num_seqs,
            max_blocks_per_seq: scheduler.max_model_len.div_ceil(cache.block_size).min(num_gpu_blocks),
        };
        let workspace = Workspace::new(&ctx, c, limits).map_err(|e| {
            device(e, "allocating the step workspace (lower --max-num-batched-tokens or --max-num-seqs)")
        })?;
        Ok(Self {
            ctx,
            model,
            workspace,
            cache: kv,
            block_size: cache.block_size,
            num_gpu_blocks,
            requests: HashMap::new(),
        })
    }

    /// Blocks in the KV pools (the null block included): what the scheduler should use.
    pub fn num_gpu_blocks(&self) -> usize {
        self.num_gpu_blocks
    }

    /// The loaded model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// Record this step's requests in the per-request state and list them in batch order.
    fn schedule(&mut self, out: &SchedulerOutput) -> Result<Vec<Scheduled>, ExecutorError> {
        for id in &out.finished_req_ids {
            self.requests.remove(id);
        }
        let n_sched = |id: RequestId| {
            out.num_scheduled_tokens.get(&id).copied().ok_or_else(|| {
                ExecutorError::InvalidBatch(format!("request {id} has no scheduled token count"))
            })
        };
        let mut order = Vec::new();
        for r in &out.scheduled_new_reqs {
            let seed = r.sampling_params.seed.unwrap_or(r.req_id);
            self.requests.insert(
                r.req_id,
                RequestState {
                    tokens: r.prompt_token_ids.clone(),
                    prompt_len: r.prompt_token_ids.len(),
                    block_ids: r.block_ids.clone(),
                    params: r.sampling_params.clone(),
                    rng: ChaCha8Rng::seed_from_u64(seed),
                },
            );
            order.push((r.req_id, r.num_computed_tokens, n_sched(r.req_id)?));
        }
        for r in &out.scheduled_cached_reqs {
            let n = n_sched(r.req_id)?;
            let state = self.requests.get_mut(&r.req_id).ok_or_else(|| {
                ExecutorError::InvalidBatch(format!("request {} was never scheduled as new", r.req_id))
            })?;
            let blocks = r.new_block_ids.iter().copied();
            if r.resumed_from_preemption {
                state.block_ids = blocks.collect();
            } else {
                state.block_ids.extend(blocks);
            }
            if r.new_token_ids.len() != n && !r.new_token_ids.is_empty() {
                return Err(ExecutorError::InvalidBatch(format!(
                    "request {}: {} new token ids for {n} scheduled tokens",
                    r.req_id,
                    r.new_token_ids.len()
                )));
            }
            for (i, &tok) in r.new_token_ids.iter().enumerate() {
                let pos = r.num_computed_tokens + i;
                match pos.cmp(&state.tokens.len()) {
                    std::cmp::Ordering::Less => state.tokens[pos] = tok,
                    std::cmp::Ordering::Equal => state.tokens.push(tok),
                    std::cmp::Ordering::Greater => {
                        return Err(ExecutorError::InvalidBatch(format!(
                            "request {}: token at position {pos} leaves a gap after {}",
                            r.req_id,
                            state.tokens.len()
                        )));
                    }
                }
            }
            order.push((r.req_id, r.num_computed_tokens, n));
        }
        order
            .into_iter()
            .filter(|&(_, _, n)| n > 0)
            .map(|(req_id, start, len)| {
                let state = &self.requests[&req_id];
                if start + len > state.tokens.len() {
                    return Err(ExecutorError::InvalidBatch(format!(
                        "request {req_id}: {len} tokens from {start} but only {} are known",
                        state.tokens.len()
                    )));
                }
                if (start + len).div_ceil(self.block_size) > state.block_ids.len() {
                    return Err(ExecutorError::InvalidBatch(format!(
                        "request {req_id}: {} tokens need more than its {} blocks",
                        start + len,
                        state.block_ids.len()
                    )));
                }
                Ok(Scheduled { req_id, start, len, samples: start + len == state.tokens.len() })
            })
            .collect()
    }

    fn build_batch(&self, scheduled: &[Scheduled]) -> Result<ForwardBatch, ExecutorError> {
        let mb = self.workspace.limits().max_blocks_per_seq;
        let bs = self.block_size;
        let mut batch = ForwardBatch { query_start_loc: vec![0], ..Default::default() };
        for s in scheduled {
            let state = &self.requests[&s.req_id];
            if state.block_ids.len() > mb {
                return Err(ExecutorError::InvalidBatch(format!(
                    "request {} holds {} blocks, more than max_model_len allows ({mb})",
                    s.req_id,
                    state.block_ids.len()
                )));
            }
            for pos in s.start..s.start + s.len {
                batch.input_ids.push(state.tokens[pos]);
                batch.positions.push(pos as u32);
                batch.slot_mapping.push(state.block_ids[pos / bs] * bs as u32 + (pos % bs) as u32);
            }
            if s.samples {
                batch.logits_indices.push(batch.input_ids.len() as u32 - 1);
            }
            batch.query_start_loc.push(batch.input_ids.len() as u32);
            batch.seq_lens.push((s.start + s.len) as u32);
            batch.block_table.extend_from_slice(&state.block_ids);
            batch.block_table.resize(batch.block_table.len() + mb - state.block_ids.len(), 0);
        }
        Ok(batch)
    }
}

impl ModelExecutor for WgpuExecutor {
    fn execute(&mut self, scheduler_output: &SchedulerOutput) -> Result<ModelRunnerOutput, ExecutorError> {
        let scheduled = self.schedule(scheduler_output)?;
        if scheduled.is_empty() {
            return Ok(ModelRunnerOutput::default());
        }
        let batch = self.build_batch(&scheduled)?;
        let samplers: Vec<&Scheduled> = scheduled.iter().filter(|s| s.samples).collect();
        let needs_logits = samplers.iter().any(|s| {
            let p = &self.requests[&s.req_id].params;
            !p.is_greedy() || p.logprobs.is_some() || has_penalties(p)
        });
        let out = self
            .model
            .forward(&self.ctx, &self.workspace, &self.cache, &batch, 1, needs_logits)
            .map_err(from_llama)?;
        let vocab = self.model.config().vocab_size;
        let mut result = ModelRunnerOutput::default();
        for (row, s) in samplers.iter().enumerate() {
            let state = self
                .requests
                .get_mut(&s.req_id)
                .ok_or_else(|| ExecutorError::InvalidBatch(format!("request {} lost its state", s.req_id)))?;
            let logits_row = out.logits.as_ref().map(|l| &l[row * vocab..(row + 1) * vocab]);
            let token = match logits_row {
                Some(raw) if !state.params.is_greedy() || has_penalties(&state.params) => {
                    let mut logits = raw.to_vec();
                    apply_penalties(&mut logits, &state.tokens, state.prompt_len, &state.params);
                    sample(&logits, &state.params, &mut state.rng)
                }
                _ => out.top_ids[row * out.k],
            };
            if let (Some(n), Some(raw)) = (state.params.logprobs, logits_row) {
                result.logprobs.insert(s.req_id, vec![logprobs(raw, token, n)]);
            }
            state.tokens.push(token);
            result.sampled_token_ids.insert(s.req_id, vec![token]);
        }
        Ok(result)
    }
}

fn has_penalties(p: &SamplingParams) -> bool {
    p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0
}

/// vLLM's penalties: repetition over prompt and output, presence and frequency over output.
fn apply_penalties(logits: &mut [f32], tokens: &[TokenId], prompt_len: usize, p: &SamplingParams) {
    if !has_penalties(p) {
        return;
    }
    let mut counts: HashMap<TokenId, f32> = HashMap::new();
    for &t in &tokens[prompt_len.min(tokens.len())..] {
        *counts.entry(t).or_default() += 1.0;
    }
    if p.repetition_penalty != 1.0 {
        let mut seen: Vec<TokenId> = tokens.to_vec();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 { *l / p.repetition_penalty } else { *l * p.repetition_penalty };
            }
        }
    }
    for (t, c) in counts {
        if let Some(l) = logits.get_mut(t as usize) {
            *l -= p.frequency_penalty * c + p.presence_penalty;
        }
    }
}

/// Temperature, top-k, top-p and min-p sampling of one logits row.
fn sample(logits: &[f32], p: &SamplingParams, rng: &mut ChaCha8Rng) -> TokenId {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |b, (i, &l)| if l > b.1 { (i, l) } else { b })
            .0 as TokenId
    };
    if p.temperature <= 0.0 {
        return argmax();
    }
    let mut order: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if p.top_k > 0 {
        order.truncate(p.top_k as usize);
    }
    let Some(&best) = order.first() else { return argmax() };
    let max = logits[best] / p.temperature;
    let mut probs: Vec<f32> = order.iter().map(|&i| (logits[i] / p.temperature - max).exp()).collect();
    let total: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|q| *q /= total);
    let mut keep = probs.len();
    if p.top_p < 1.0 {
        let mut cum = 0.0;
        keep = probs
            .iter()
            .position(|&q| {
                cum += q;
                cum >= p.top_p
            })
            .map_or(probs.len(), |i| i + 1);
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p;
        keep = keep.min(probs.iter().position(|&q| q < floor).unwrap_or(probs.len()));
    }
    let kept = &probs[..keep.max(1)];
    let mut u = rng.random::<f32>() * kept.iter().sum::<f32>();
    for (j, &q) in kept.iter().enumerate() {
        if u < q {
            return order[j] as TokenId;
        }
        u -= q;
    }
    order[kept.len() - 1] as TokenId
}

/// The sampled token's log-probability and the `n` best, from raw logits.
fn logprobs(logits: &[f32], token: TokenId, n: usize) -> TokenLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_total = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    TokenLogprobs {
        logprob: logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| l - log_total),
        top: order.iter().take(n).map(|&i| (i as TokenId, logits[i] - log_total)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalties_follow_vllm() {
        let mut logits = vec![2.0, -2.0, 1.0];
        let p =
            SamplingParams { repetition_penalty: 2.0, frequency_penalty: 0.5, ..SamplingParams::greedy(4) };
        apply_penalties(&mut logits, &[0, 1, 1], 1, &p);
        assert_eq!(logits, vec![1.0, -5.0, 1.0]);
    }

    #[test]
    fn top_k_one_is_argmax_and_seeded_sampling_repeats() {
        let logits = vec![0.1, 3.0, 2.9, -1.0];
        let p = SamplingParams { temperature: 1.0, top_k: 1, ..SamplingParams::greedy(4) };
        assert_eq!(sample(&logits, &p, &mut ChaCha8Rng::seed_from_u64(1)), 1);
        let p = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplingParams::greedy(4) };
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..20).map(|_| sample(&logits, &p, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
    }

    #[test]
    fn logprobs_are_normalised() {
        let lp = logprobs(&[0.0, 0.0], 1, 2);
        assert!((lp.logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![0, 1]);
    }
}
