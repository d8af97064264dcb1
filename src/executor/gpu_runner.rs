//! The real executor: keeps each request's token history and block table from the
//! scheduler's outputs, builds the varlen batch, runs the Llama forward pass on the GPU and
//! samples with [`crate::sampling`]: greedy requests from the GPU's top-k candidates (the
//! argmax, plus one candidate per token `min_tokens` may mask), every other request from its
//! full logits row. A request that asks for prompt logprobs also has the rows of its prompt
//! positions scored while it prefills (the LM head on them after the step, a bounded group of
//! rows at a time); they are gathered chunk by chunk and handed back whole with its first
//! token.

use super::lora::{ExecutorLora, LoraConfig};
use crate::model::llama::LoraRows;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::Instant;

use super::draft::{DraftModel, DraftSeq};
use super::fault::{FaultKind, FaultPlan};
use super::host_kv::HostKv;
use super::{ExecutorError, ModelExecutor, StepMasks, StepPipeline};
use crate::core::cache_config::{CacheConfig, KvCacheDtype};
use crate::core::host_tier::StepTiming;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::core::scheduler_config::SchedulerConfig;
use crate::gpu::{
    GpuContext, GpuCounters, GpuError, KernelTimes, KvCache, KvCacheShape, KvPrecision, linear_warm_up_rows,
};
use crate::ids::{RequestId, TokenId};
use crate::model::ModelFiles;
use crate::model::llama::{ForwardBatch, ForwardOutput, LlamaError, LlamaModel, Workspace, WorkspaceLimits};
use crate::sampling::{
    PromptLogprobs, SampledToken, SamplingContext, SamplingParams, prompt_token_logprobs, sample_candidates,
    sample_logits,
};
use crate::structured::TokenMask;

/// The most top-k candidates a greedy request takes from the GPU. One that needs more (a
/// `min_tokens` masking many stop ids) samples from its full logits row instead: each candidate
/// is a scan of the whole vocabulary, and lavapipe ends an invocation's loops past 65,535
/// iterations, about 480 such scans of Gemma 3's 262,144 entries.
const MAX_GPU_CANDIDATES: usize = 64;

mod pipeline;

/// What the executor remembers about one request between steps.
#[derive(Debug)]
struct RequestState {
    /// Prompt and output tokens, the ones it sampled included (as vLLM's runner keeps them).
    tokens: Vec<TokenId>,
    prompt_len: usize,
    block_ids: Vec<u32>,
    params: SamplingParams,
    /// The key of its draws: `params.seed`, else its request id.
    seed: u64,
    /// Its prompt logprobs, when it asked for them.
    prompt_logprobs: Option<PromptLogprobsState>,
    /// Proposed tokens at the end of `tokens` this step verifies (speculative decoding).
    num_spec: usize,
    /// Its LoRA adapter's id.
    lora: Option<u32>,
}

/// A request's prompt logprobs while its prompt is computed.
#[derive(Debug)]
struct PromptLogprobsState {
    /// Top log-probabilities per position.
    top_n: usize,
    /// One entry per prompt position gathered so far, in order (the first is `None`).
    entries: PromptLogprobs,
    /// True once handed back: a request preempted later recomputes its prompt without
    /// emitting them twice.
    sent: bool,
}

impl RequestState {
    /// The sampler's view of this request before the token after its first `num_tokens`.
    fn sampling_context<'a>(
        &'a self,
        eos_token_id: Option<TokenId>,
        mask: Option<&'a TokenMask>,
        num_tokens: usize,
    ) -> SamplingContext<'a> {
        SamplingContext {
            params: &self.params,
            prompt_token_ids: &self.tokens[..self.prompt_len],
            output_token_ids: &self.tokens[self.prompt_len..num_tokens],
            eos_token_id,
            seed: self.seed,
            mask,
        }
    }

    /// True when its next token needs the full logits row (anything but plain greedy: a bias,
    /// a penalty or a constraint may lift a token past every GPU top-k candidate or rule them
    /// all out; or more candidates than [`MAX_GPU_CANDIDATES`]).
    fn needs_logits(&self) -> bool {
        !self.params.is_greedy()
            || self.params.adjusts_logits()
            || self.params.logprobs.is_some()
            || self.params.structured_outputs.is_some()
            || self.greedy_candidates() > MAX_GPU_CANDIDATES
    }

    /// The positions among `start..start + len` whose logits give prompt logprobs not gathered
    /// yet (position `p` gives prompt token `p + 1`'s). An error where positions before
    /// them are missing (its prefix came from elsewhere: the scheduler gives such requests no
    /// prefix-cache hits).
    fn prompt_rows(
        &self,
        req_id: RequestId,
        start: usize,
        len: usize,
    ) -> Result<Range<usize>, ExecutorError> {
        let Some(state) = self.prompt_logprobs.as_ref().filter(|state| !state.sent) else {
            return Ok(0..0);
        };
        let next = state.entries.len() - 1;
        let rows = start.max(next)..(start + len).min(self.prompt_len.saturating_sub(1));
        if start > next && !rows.is_empty() {
            return Err(ExecutorError::InvalidBatch(format!(
                "request {req_id} asks for prompt logprobs but computes from position {start}, past the {next} it has"
            )));
        }
        Ok(rows.start..rows.end.max(rows.start))
    }

    /// GPU candidates a greedy pick needs: the argmax, plus each token `min_tokens` masks
    /// now (at the first position it samples this step: the most masked one).
    fn greedy_candidates(&self) -> usize {
        let masking = self.tokens.len() - self.num_spec - self.prompt_len < self.params.min_tokens;
        1 + if masking { 1 + self.params.stop_token_ids.len() } else { 0 }
    }
}

/// One request's part of this step.
struct Scheduled {
    req_id: RequestId,
    start: usize,
    len: usize,
    samples: bool,
    /// Proposed tokens it verifies: its last `num_spec` positions are sampled too.
    num_spec: usize,
    /// Positions whose logits rows give prompt logprobs (before its sampled row, if any).
    prompt_rows: Range<usize>,
}

/// The prompt positions a step scores for prompt logprobs: their rows in the batch, and for
/// each, its request, the prompt token it predicts and how many top logprobs it takes.
#[derive(Debug, Default)]
struct ScoredRows {
    rows: Vec<u32>,
    targets: Vec<(RequestId, TokenId, usize)>,
}

/// Runs a Llama-family model on wgpu for the engine core.
pub struct WgpuExecutor {
    ctx: GpuContext,
    model: LlamaModel,
    workspace: Workspace,
    cache: KvCache,
    block_size: usize,
    num_gpu_blocks: usize,
    eos_token_id: Option<TokenId>,
    requests: HashMap<RequestId, RequestState>,
    faults: FaultPlan,
    /// Host memory for the host KV tier, when it is on.
    host: Option<HostKv>,
    /// What the last step's forward pass and host copies took.
    last_timing: Option<StepTiming>,
    /// LoRA adapters, when serving them.
    lora: Option<ExecutorLora>,
    /// The draft model and how many tokens it proposes (draft-model speculation).
    draft: Option<(DraftModel, usize)>,
    max_model_len: usize,
    /// The steps launched ahead, where it pipelines them (see [`pipeline`]).
    pipeline: Option<pipeline::GpuPipeline>,
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
    match e {
        GpuError::DeviceLost(reason) => ExecutorError::DeviceLost(format!("{what}: {reason}")),
        other => ExecutorError::Device(format!("{what}: {other}")),
    }
}

/// The GPU's KV precision for the cache configuration's dtype.
fn kv_precision(dtype: KvCacheDtype) -> KvPrecision {
    match dtype {
        KvCacheDtype::Auto => KvPrecision::Auto,
        KvCacheDtype::F16 => KvPrecision::F16,
        KvCacheDtype::F32 => KvPrecision::F32,
    }
}

fn from_llama(e: LlamaError) -> ExecutorError {
    match e {
        LlamaError::InvalidBatch(m) => ExecutorError::InvalidBatch(m),
        LlamaError::Gpu(GpuError::DeviceLost(reason)) => ExecutorError::DeviceLost(reason),
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
        Self::with_lora(ctx, files, cache, scheduler, progress, None)
    }

    /// [`Self::new`], serving LoRA adapters within `lora`'s limits when it is set.
    pub fn with_lora(
        ctx: GpuContext,
        files: &ModelFiles,
        cache: &CacheConfig,
        scheduler: &SchedulerConfig,
        progress: bool,
        lora: Option<LoraConfig>,
    ) -> Result<Self, ExecutorError> {
        let model = match lora {
            Some(_) => LlamaModel::load_for_lora(&ctx, files, scheduler.max_model_len, progress),
            None => LlamaModel::load_for_context(&ctx, files, scheduler.max_model_len, progress),
        }
        .map_err(from_llama)?;
        let spec = scheduler.speculative_config.as_ref();
        let draft_files = match spec.and_then(|spec| spec.draft_model_path()) {
            Some(path) => Some(DraftModel::open(path, files.config.vocab_size)?),
            None => None,
        };
        let c = model.config();
        let precision = kv_precision(cache.kv_cache_dtype);
        let format = ctx.capabilities().kv_format(precision);
        let num_gpu_blocks = match cache.kv_cache_memory {
            Some(bytes) => {
                // A block holds the draft model's KV of its tokens too.
                let layer_kv = |c: &crate::model::ModelConfig| c.num_hidden_layers * c.kv_size();
                let per_token = layer_kv(c) + draft_files.as_ref().map_or(0, |d| layer_kv(&d.config));
                let per_block = 2 * per_token * cache.block_size * format.elem_bytes();
                (bytes / per_block.max(1) as u64) as usize
            }
            None => cache.num_gpu_blocks,
        };
        if num_gpu_blocks < 2 {
            return Err(ExecutorError::Config(format!(
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
        let kv = ctx.kv_cache(shape, precision).map_err(|e| {
            device(e, "allocating the KV cache (lower --num-gpu-blocks or --kv-cache-memory)")
        })?;
        // The tables as the scheduler sizes them: the pool's blocks, the model's window.
        let block_table =
            CacheConfig { num_gpu_blocks, sliding_window: c.uniform_sliding_window(), ..cache.clone() };
        // A logits row a sequence, and one for each proposal speculative decoding verifies.
        let rows_per_seq =
            1 + scheduler.speculative_config.as_ref().map_or(0, |spec| spec.num_speculative_tokens);
        let limits = WorkspaceLimits {
            max_tokens: scheduler.max_num_batched_tokens,
            max_seqs: scheduler.max_num_seqs,
            max_logits_rows: (scheduler.max_num_seqs * rows_per_seq).min(scheduler.max_num_batched_tokens),
            max_blocks_per_seq: block_table.max_blocks_per_seq(scheduler.max_model_len),
        };
        let workspace = Workspace::new(&ctx, &model, limits).map_err(|e| {
            device(e, "allocating the step workspace (lower --max-num-batched-tokens or --max-num-seqs)")
        })?;
        let lora = lora.map(|l| ExecutorLora::new(&ctx, &model, l, limits.max_tokens)).transpose()?;
        let draft = match (draft_files, spec) {
            (Some(files), Some(spec)) => {
                let draft = DraftModel::load(
                    &ctx,
                    &files,
                    shape,
                    precision,
                    limits,
                    scheduler.max_model_len,
                    progress,
                )?;
                Some((draft, spec.num_speculative_tokens))
            }
            _ => None,
        };
        let executor = Self {
            lora,
            draft,
            max_model_len: scheduler.max_model_len,
            ctx,
            model,
            workspace,
            cache: kv,
            block_size: cache.block_size,
            num_gpu_blocks,
            eos_token_id: files.eos_token_id(),
            requests: HashMap::new(),
            faults: FaultPlan::default(),
            host: None,
            last_timing: None,
            pipeline: None,
        };
        let pipelined = pipeline::GpuPipeline::fits(&executor);
        let whole = executor.model.whole_step_tokens().unwrap_or(0);
        let executor = Self {
            host: (cache.kv_offloading_size > 0.0).then(|| HostKv::new(executor.cache.block_bytes())),
            pipeline: pipelined
                .then(|| pipeline::GpuPipeline::new(&executor.ctx, limits, whole))
                .transpose()?,
            ..executor
        };
        executor.warm_up()?;
        Ok(executor)
    }

    /// Builds every pipeline a step uses before the first request arrives, so its time to
    /// first token does not include shader compilation: a throwaway step for each row tile
    /// of the linear kernels (a single decode row, then the smallest prefill of each tile),
    /// sampling every row it may so that the LM head takes the same tiles; its keys and
    /// values go to the null block, which no sequence reads.
    fn warm_up(&self) -> Result<(), ExecutorError> {
        let mb = self.workspace.limits().max_blocks_per_seq;
        let (max_tokens, max_seqs) = (self.workspace.limits().max_tokens, self.workspace.limits().max_seqs);
        let rows = linear_warm_up_rows(self.ctx.capabilities());
        for tokens in rows.into_iter().filter(|&tokens| tokens <= max_tokens) {
            let batch = ForwardBatch {
                input_ids: vec![0; tokens],
                positions: (0..tokens as u32).collect(),
                slot_mapping: (0..tokens).map(|pos| (pos % self.block_size) as u32).collect(),
                query_start_loc: vec![0, tokens as u32],
                seq_lens: vec![tokens as u32],
                block_table: vec![0; mb],
                logits_indices: (tokens.saturating_sub(max_seqs) as u32..tokens as u32).collect(),
            };
            self.model
                .forward(&self.ctx, &self.workspace, &self.cache, &batch, 1, false)
                .map_err(from_llama)?;
        }
        self.warm_up_pipeline()
    }

    /// The same executor, made to fail for real at the steps `faults` names (counting the
    /// `execute` calls with work to do): a transient fault makes the step's submit invalid
    /// ([`GpuContext::fail_next_submit`]), a lost device destroys the device
    /// ([`GpuContext::lose_device`]) before the step runs.
    pub fn with_faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// Blocks in the KV pools (the null block included): what the scheduler should use.
    pub fn num_gpu_blocks(&self) -> usize {
        self.num_gpu_blocks
    }

    /// Bytes of one KV block over every layer, K and V, in the cache's dtype: the size of
    /// a host tier block (`CacheConfig::kv_block_bytes`).
    pub fn kv_block_bytes(&self) -> u64 {
        self.cache.block_bytes()
    }

    /// Makes the next step that stores blocks to the host tier fail those stores for real
    /// (their command buffer is invalid), for testing the fall back to recompute; false
    /// without a tier.
    pub fn fail_next_host_store(&mut self) -> bool {
        self.host.as_mut().map(HostKv::fail_next_store).is_some()
    }

    /// The device it runs on.
    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// The loaded model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// Updates the persistent per-request states from this step's scheduler output (new
    /// requests, appended tokens and blocks, resumed tables; vLLM's `_update_states`) and
    /// lists the step's requests in batch order.
    fn update_states(&mut self, out: &SchedulerOutput) -> Result<Vec<Scheduled>, ExecutorError> {
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
            self.requests.insert(
                r.req_id,
                RequestState {
                    tokens: r.prompt_token_ids.clone(),
                    prompt_len: r.prompt_token_ids.len(),
                    block_ids: r.block_ids.clone(),
                    params: r.sampling_params.clone(),
                    seed: r.sampling_params.seed.unwrap_or(r.req_id),
                    prompt_logprobs: r.sampling_params.prompt_logprobs.map(|top_n| PromptLogprobsState {
                        top_n,
                        entries: vec![None],
                        sent: false,
                    }),
                    num_spec: 0,
                    lora: r.lora_id,
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
                state.block_ids.truncate(state.block_ids.len().saturating_sub(r.num_freed_blocks));
                state.block_ids.extend(blocks);
            }
            // Fewer ids than tokens: the rest are placeholders, tokens it sampled itself.
            if r.new_token_ids.len() > n {
                return Err(ExecutorError::Config(format!(
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
                        return Err(ExecutorError::Config(format!(
                            "request {}: token at position {pos} leaves a gap after {}",
                            r.req_id,
                            state.tokens.len()
                        )));
                    }
                }
            }
            state.num_spec = out.scheduled_spec_decode_tokens.get(&r.req_id).map_or(0, Vec::len);
            order.push((r.req_id, r.num_computed_tokens, n));
        }
        order
            .into_iter()
            .filter(|&(_, _, n)| n > 0)
            .map(|(req_id, start, len)| {
                let state = &self.requests[&req_id];
                if start + len > state.tokens.len() {
                    return Err(ExecutorError::Config(format!(
                        "request {req_id}: {len} tokens from {start} but only {} are known",
                        state.tokens.len()
                    )));
                }
                if (start + len).div_ceil(self.block_size) > state.block_ids.len() {
                    return Err(ExecutorError::Config(format!(
                        "request {req_id}: {} tokens need more than its {} blocks",
                        start + len,
                        state.block_ids.len()
                    )));
                }
                let prompt_rows = state.prompt_rows(req_id, start, len)?;
                let samples = start + len == state.tokens.len();
                if state.num_spec >= len {
                    return Err(ExecutorError::InvalidBatch(format!(
                        "request {req_id}: {} proposed tokens among {len} scheduled ones leave no known token",
                        state.num_spec
                    )));
                }
                Ok(Scheduled { req_id, start, len, samples, num_spec: state.num_spec, prompt_rows })
            })
            .collect()
    }

    /// The step's varlen batch, and the prompt positions it scores (see [`ScoredRows`]).
    fn build_batch(&self, scheduled: &[Scheduled]) -> Result<(ForwardBatch, ScoredRows), ExecutorError> {
        let mb = self.workspace.limits().max_blocks_per_seq;
        let bs = self.block_size;
        let mut batch = ForwardBatch { query_start_loc: vec![0], ..Default::default() };
        let mut scored = ScoredRows::default();
        for s in scheduled {
            let state = &self.requests[&s.req_id];
            if state.block_ids.len() > mb {
                return Err(ExecutorError::Config(format!(
                    "request {} holds {} blocks, more than its block table's {mb} (the scheduler keeps every request within max_model_len's blocks)",
                    s.req_id,
                    state.block_ids.len()
                )));
            }
            let first = batch.input_ids.len();
            for pos in s.start..s.start + s.len {
                batch.input_ids.push(state.tokens[pos]);
                batch.positions.push(pos as u32);
                batch.slot_mapping.push(state.block_ids[pos / bs] * bs as u32 + (pos % bs) as u32);
            }
            if let Some(prompt) = &state.prompt_logprobs {
                for pos in s.prompt_rows.clone() {
                    scored.rows.push((first + pos - s.start) as u32);
                    scored.targets.push((s.req_id, state.tokens[pos + 1], prompt.top_n));
                }
            }
            if s.samples {
                let end = batch.input_ids.len() as u32;
                batch.logits_indices.extend(end - 1 - s.num_spec as u32..end);
            }
            batch.query_start_loc.push(batch.input_ids.len() as u32);
            batch.seq_lens.push((s.start + s.len) as u32);
            batch.block_table.extend_from_slice(&state.block_ids);
            batch.block_table.resize(batch.block_table.len() + mb - state.block_ids.len(), 0);
        }
        Ok((batch, scored))
    }

    /// The prompt logprobs of `scored`'s positions, from the step just run, appended to their
    /// requests in order.
    fn gather_prompt_logprobs(&mut self, scored: &ScoredRows) -> Result<(), ExecutorError> {
        let mut entries = Vec::with_capacity(scored.rows.len());
        let mut targets = scored.targets.iter();
        self.model
            .score_rows(&self.ctx, &self.workspace, &scored.rows, |logits| {
                if let Some(&(req_id, token_id, top_n)) = targets.next() {
                    entries.push((req_id, prompt_token_logprobs(logits, token_id, top_n)));
                }
            })
            .map_err(from_llama)?;
        for (req_id, entry) in entries {
            if let Some(prompt) =
                self.requests.get_mut(&req_id).and_then(|state| state.prompt_logprobs.as_mut())
            {
                prompt.entries.push(Some(entry));
            }
        }
        Ok(())
    }
}

impl WgpuExecutor {
    /// Draft-model speculation after a step: the draft computes the step's tokens too, then
    /// proposes what follows each sampling request's last token — as many as
    /// `num_speculative_tokens`, `max_model_len`, the request's `max_tokens` and the blocks
    /// its table holds (the scheduler's lookahead slots) leave room for.
    fn draft(
        &self,
        batch: &ForwardBatch,
        scheduled: &[Scheduled],
    ) -> Result<HashMap<RequestId, Vec<TokenId>>, ExecutorError> {
        let Some((draft, k)) = &self.draft else {
            return Ok(HashMap::new());
        };
        draft.follow(&self.ctx, batch)?;
        let mut ids = Vec::new();
        let mut seqs = Vec::new();
        for s in scheduled.iter().filter(|s| s.samples) {
            let state = &self.requests[&s.req_id];
            let position = state.tokens.len() - 1;
            let room_in_model = self.max_model_len.saturating_sub(state.tokens.len());
            let num_output = state.tokens.len() - state.prompt_len;
            let room_in_output = state.params.max_tokens.saturating_sub(num_output + 1);
            let room_in_table = (state.block_ids.len() * self.block_size).saturating_sub(position);
            let num_proposals = (*k).min(room_in_model).min(room_in_output).min(room_in_table);
            if num_proposals > 0 {
                ids.push(s.req_id);
                let token = state.tokens[position];
                seqs.push(DraftSeq { token, position, num_proposals, block_ids: &state.block_ids });
            }
        }
        let proposals = draft.propose(&self.ctx, &seqs)?;
        Ok(ids.into_iter().zip(proposals).collect())
    }
}

impl ModelExecutor for WgpuExecutor {
    fn load_lora(&mut self, id: u32, path: &std::path::Path) -> Result<(), ExecutorError> {
        let lora = self
            .lora
            .as_mut()
            .ok_or_else(|| ExecutorError::Config("LoRA is not enabled (--enable-lora)".into()))?;
        lora.register(id, path.to_owned(), self.model.config())
    }

    fn unload_lora(&mut self, id: u32) -> Result<(), ExecutorError> {
        let lora = self
            .lora
            .as_mut()
            .ok_or_else(|| ExecutorError::Config("LoRA is not enabled (--enable-lora)".into()))?;
        lora.unregister(&self.ctx, id)
    }

    fn execute(
        &mut self,
        scheduler_output: &SchedulerOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        let (scheduled, timing, result) = self.prepare_step(scheduler_output)?;
        if scheduled.is_empty() {
            self.last_timing = Some(timing);
            return Ok(result);
        }
        let forward_started = Instant::now();
        self.inject_fault();
        let (batch, scored) = self.build_batch(&scheduled)?;
        let (top_k, needs_logits) = self.head_readback(&scheduled);
        let lora_rows = self.lora_rows(&scheduled)?;
        let out = match self.lora.as_ref().zip(lora_rows.as_deref()) {
            Some((lora, rows)) => {
                let lora = LoraRows { slots: lora.slots(), rows };
                self.model.forward_with_lora(
                    &self.ctx,
                    &self.workspace,
                    &self.cache,
                    &batch,
                    lora,
                    top_k,
                    needs_logits,
                )
            }
            None => self.model.forward(&self.ctx, &self.workspace, &self.cache, &batch, top_k, needs_logits),
        }
        .map_err(from_llama)?;
        let forwarded = Forwarded { scheduled, batch, scored, timing, started: forward_started, result };
        self.finish_forward(forwarded, out, masks)
    }

    fn computes_prompt_logprobs(&self) -> bool {
        true
    }

    fn supports_async_scheduling(&self) -> bool {
        true
    }

    fn pipeline(&mut self) -> Option<&mut dyn StepPipeline> {
        match self.pipeline.is_some() {
            true => Some(self),
            false => None,
        }
    }

    fn last_step_timing(&self) -> Option<StepTiming> {
        self.last_timing
    }

    fn device_counters(&self) -> Option<GpuCounters> {
        Some(self.ctx.counters())
    }

    fn kernel_times(&self) -> Option<KernelTimes> {
        self.ctx.kernel_times()
    }
}

/// A step's forward pass as recorded: what sampling after it needs.
struct Forwarded {
    scheduled: Vec<Scheduled>,
    batch: ForwardBatch,
    scored: ScoredRows,
    timing: StepTiming,
    /// When its forward pass began.
    started: Instant,
    /// Its output so far (the failed KV transfers).
    result: ModelRunnerOutput,
}

impl WgpuExecutor {
    /// A step's host KV copies run and the request states updated from it: the requests it
    /// runs in batch order (not those whose blocks failed to load), what the copies took, and
    /// its output so far.
    fn prepare_step(
        &mut self,
        scheduler_output: &SchedulerOutput,
    ) -> Result<(Vec<Scheduled>, StepTiming, ModelRunnerOutput), ExecutorError> {
        self.last_timing = None;
        let transfers = &scheduler_output.kv_transfers;
        let copies = match &mut self.host {
            Some(host) => {
                host.run(&self.ctx, &self.cache, transfers).map_err(|e| device(e, "host KV copies"))?
            }
            None if transfers.is_empty() => Default::default(),
            None => return Err(ExecutorError::HostTierUnsupported),
        };
        let mut scheduled = self.update_states(scheduler_output)?;
        // A request whose blocks did not load is not run: the scheduler recomputes them.
        let unloaded: HashSet<u32> = copies.failed.loads.iter().map(|copy| copy.block_id).collect();
        scheduled.retain(|s| !self.requests[&s.req_id].block_ids.iter().any(|id| unloaded.contains(id)));
        let result = ModelRunnerOutput { failed_kv_transfers: copies.failed, ..Default::default() };
        Ok((scheduled, copies.timing, result))
    }

    /// Makes the step about to be submitted fail as the fault plan says.
    fn inject_fault(&mut self) {
        match self.faults.next_fault() {
            Some(FaultKind::Transient) => self.ctx.fail_next_submit(),
            Some(FaultKind::DeviceLost) => self.ctx.lose_device(),
            None => {}
        }
    }

    /// Each token row's LoRA slot in `scheduled` (adapters not on the GPU loaded into
    /// slots), where the executor serves adapters.
    fn lora_rows(&mut self, scheduled: &[Scheduled]) -> Result<Option<Vec<u32>>, ExecutorError> {
        let Some(lora) = &mut self.lora else {
            return Ok(None);
        };
        let seqs: Vec<_> = scheduled.iter().map(|s| (self.requests[&s.req_id].lora, s.len)).collect();
        lora.rows(&self.ctx, self.model.config(), &seqs).map(Some)
    }

    /// The head's readback for `scheduled`: how many top-k candidates a row, and whether the
    /// full logits rows too (some sampling request needs them).
    fn head_readback(&self, scheduled: &[Scheduled]) -> (usize, bool) {
        let samplers: Vec<&RequestState> =
            scheduled.iter().filter(|s| s.samples).map(|s| &self.requests[&s.req_id]).collect();
        let needs_logits = samplers.iter().any(|r| r.needs_logits());
        let vocab = self.model.config().vocab_size;
        let top_k = samplers
            .iter()
            .filter(|r| !r.needs_logits())
            .map(|r| r.greedy_candidates())
            .max()
            .unwrap_or(1)
            .min(vocab);
        (top_k, needs_logits)
    }

    /// After a step's forward pass `out`: its prompt logprobs gathered, each sampling request
    /// sampled (its tokens through the one it sampled), and the draft's proposals.
    fn finish_forward(
        &mut self,
        forwarded: Forwarded,
        out: ForwardOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        let Forwarded { scheduled, batch, scored, mut timing, started: forward_started, result } = forwarded;
        let vocab = self.model.config().vocab_size;
        if !scored.rows.is_empty() {
            self.gather_prompt_logprobs(&scored)?;
        }
        timing.compute_tokens = batch.input_ids.len();
        timing.compute_s = forward_started.elapsed().as_secs_f64();
        self.last_timing = Some(timing);
        let mut result = result;
        // Each sampling request's rows: its proposals' (speculative decoding), then its last.
        let mut row = 0;
        for s in scheduled.iter().filter(|s| s.samples) {
            let state = self
                .requests
                .get_mut(&s.req_id)
                .ok_or_else(|| ExecutorError::InvalidBatch(format!("request {} lost its state", s.req_id)))?;
            let request_masks = match state.params.structured_outputs {
                Some(_) => Some(masks.get(s.req_id).ok_or(ExecutorError::MissingMask(s.req_id))?),
                None => None,
            };
            // Position `base + i` samples after the proposals before it; a proposal is accepted
            // while it is the token sampled there (the sample plain decode would draw).
            let base = state.tokens.len() - s.num_spec;
            let mut sampled = Vec::with_capacity(s.num_spec + 1);
            let mut token_logprobs = Vec::new();
            for i in 0..=s.num_spec {
                // Position `i`'s mask follows the proposals before it (all accepted to get here).
                let mask = match request_masks {
                    Some(all) => Some(all.get(i).ok_or(ExecutorError::MissingMask(s.req_id))?),
                    None => None,
                };
                let ctx = state.sampling_context(self.eos_token_id, mask, base + i);
                let row = row + i;
                let SampledToken { token_id, logprobs } = match &out.logits {
                    Some(logits) if state.needs_logits() => {
                        sample_logits(&logits[row * vocab..(row + 1) * vocab], &ctx)
                    }
                    _ => {
                        let ids = &out.top_ids[row * out.k..(row + 1) * out.k];
                        let values = &out.top_values[row * out.k..(row + 1) * out.k];
                        sample_candidates(
                            ids.iter().copied().zip(values.iter().copied()).collect(),
                            None,
                            &ctx,
                        )
                    }
                };
                sampled.push(token_id);
                token_logprobs.extend(logprobs);
                if i == s.num_spec || state.tokens[base + i] != token_id {
                    break;
                }
            }
            row += s.num_spec + 1;
            if !token_logprobs.is_empty() {
                result.logprobs.insert(s.req_id, token_logprobs);
            }
            if let Some(prompt) = state.prompt_logprobs.as_mut().filter(|prompt| !prompt.sent) {
                if prompt.entries.len() != state.prompt_len {
                    return Err(ExecutorError::InvalidBatch(format!(
                        "request {} finished its prompt with {} of its {} prompt logprobs",
                        s.req_id,
                        prompt.entries.len(),
                        state.prompt_len
                    )));
                }
                prompt.sent = true;
                result.prompt_logprobs.insert(s.req_id, std::mem::take(&mut prompt.entries));
            }
            state.tokens.truncate(base);
            state.tokens.extend_from_slice(&sampled);
            state.num_spec = 0;
            result.sampled_token_ids.insert(s.req_id, sampled);
        }
        if self.draft.is_some() {
            result.draft_token_ids = self.draft(&batch, &scheduled)?;
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A greedy request right after its prompt, `min_tokens` masking `stops` stop ids.
    fn masking(stops: u32) -> RequestState {
        let params = SamplingParams {
            min_tokens: 4,
            stop_token_ids: (10..10 + stops).collect(),
            ..SamplingParams::greedy(8)
        };
        RequestState {
            tokens: vec![1, 2, 3],
            prompt_len: 3,
            block_ids: vec![0],
            params,
            seed: 0,
            prompt_logprobs: None,
            num_spec: 0,
            lora: None,
        }
    }

    #[test]
    fn greedy_picks_past_the_candidate_cap_read_the_full_row() {
        let few = masking(MAX_GPU_CANDIDATES as u32 - 2);
        assert_eq!(few.greedy_candidates(), MAX_GPU_CANDIDATES);
        assert!(!few.needs_logits());
        let many = masking(1024);
        assert_eq!(many.greedy_candidates(), 1026);
        assert!(many.needs_logits());
    }

    #[test]
    fn a_greedy_pick_with_a_logit_bias_reads_the_full_row() {
        let mut biased = masking(0);
        biased.params.logit_bias.insert(5, -100.0);
        assert!(biased.needs_logits());
    }
}
