//! The unified token-budget scheduler: running requests first, then waiting ones, chunked
//! prefill, whole-prompt admission, and RECOMPUTE preemption (vLLM V1 semantics).

use crate::core::lora::StepLoras;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::core::block_hash::extend_block_hashes;
use crate::core::cache_config::CacheConfig;
use crate::core::events::{CacheEvent, EventLog, KvEvent};
use crate::core::host_tier::{HostTier, HostTierError, HostTierStats, LoadPlan, StepTiming};
use crate::core::id_map::IdMap;
use crate::core::kv_cache_manager::{CacheConfigError, ComputedBlocks, KvCacheManager};
use crate::core::metrics::SchedulerStats;
use crate::core::output::{
    CachedRequestData, EngineCoreOutput, ModelRunnerOutput, NewRequestData, SchedulerOutput,
};
use crate::core::request::{Request, RequestStatus};
use crate::core::request_queue::{PriorityKey, WaitingQueue};
use crate::core::scheduler_config::{InvalidBlockPolicy, SchedulerConfig, SchedulingPolicy};
use crate::core::snapshot::KvSnapshot;
use crate::core::spec_decode::{NgramIndex, NgramProposer, SpeculativeConfigError};
use crate::ids::{BlockHash, BlockId, RequestId};

/// A configuration the scheduler cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    /// The cache configuration is invalid.
    #[error(transparent)]
    Cache(#[from] CacheConfigError),
    /// The host KV tier cannot be set up.
    #[error(transparent)]
    HostTier(#[from] HostTierError),
    /// `max_num_batched_tokens` is 0.
    #[error("max_num_batched_tokens must be at least 1")]
    ZeroTokenBudget,
    /// `max_num_seqs` is 0.
    #[error("max_num_seqs must be at least 1")]
    ZeroMaxNumSeqs,
    /// `max_model_len` is 0.
    #[error("max_model_len must be at least 1")]
    ZeroMaxModelLen,
    /// The speculative configuration is invalid.
    #[error(transparent)]
    Speculative(#[from] SpeculativeConfigError),
    /// Without chunked prefill a prompt of `max_model_len` tokens could never be scheduled.
    #[error(
        "with chunked prefill disabled, max_num_batched_tokens ({budget}) must be at least max_model_len ({max_model_len})"
    )]
    BudgetBelowModelLen {
        /// `max_num_batched_tokens`.
        budget: usize,
        /// `max_model_len`.
        max_model_len: usize,
    },
}

/// Why a request was refused at `add_request`; it concerns that request alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddRequestError {
    /// The prompt has no tokens.
    #[error("request {0}: the prompt is empty")]
    EmptyPrompt(RequestId),
    /// The prompt is longer than `max_model_len`.
    #[error(
        "request {request_id}: the prompt has {prompt_len} tokens, more than max_model_len ({max_model_len})"
    )]
    PromptTooLong {
        /// The request.
        request_id: RequestId,
        /// Its prompt length.
        prompt_len: usize,
        /// The limit.
        max_model_len: usize,
    },
    /// The prompt needs more KV blocks than the whole pool has.
    #[error(
        "request {request_id}: the prompt needs {blocks_needed} KV blocks but the cache has only {usable_blocks}{why}; raise --num-gpu-blocks or --kv-cache-memory"
    )]
    PromptExceedsKvCache {
        /// The request.
        request_id: RequestId,
        /// Blocks its prompt needs.
        blocks_needed: usize,
        /// Blocks the pool can ever give.
        usable_blocks: usize,
        /// Why every block must fit, where the model's layers say so (empty otherwise).
        why: &'static str,
    },
    /// `max_tokens` is 0.
    #[error("request {0}: max_tokens must be at least 1")]
    ZeroMaxTokens(RequestId),
    /// A live request already has this id.
    #[error("request {0}: a request with this id is already in the scheduler")]
    DuplicateId(RequestId),
}

/// `finish_requests` was given a status that is not a finished one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a finished status")]
pub struct NotFinishedStatus(pub RequestStatus);

const PREEMPTION_WARNING_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct PreemptionWarning {
    last_logged: Option<Instant>,
    suppressed: u64,
}

struct ScheduledRunning {
    request_id: RequestId,
    num_tokens: usize,
    new_block_ids: Vec<BlockId>,
}

/// The engine-core scheduler.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    kv: KvCacheManager,
    requests: IdMap<Request>,
    waiting: WaitingQueue,
    running: Vec<RequestId>,
    finished_req_ids: HashSet<RequestId>,
    computed_before_preemption: IdMap<usize>,
    pending_outputs: Vec<EngineCoreOutput>,
    stats: SchedulerStats,
    events: EventLog,
    preemption_warning: PreemptionWarning,
    host: Option<HostTier>,
    proposer: Option<NgramProposer>,
    /// Slots past a decoding request's new tokens that its step's draft model writes
    /// (`num_speculative_tokens` under draft-model speculation, else 0).
    draft_lookahead: usize,
    /// Per request, its n-grams so far (n-gram speculation).
    ngram_indexes: IdMap<NgramIndex>,
    /// Per request, blocks freed off the end of its table (rejected proposals') that the
    /// executor has not heard of yet.
    freed_tail_blocks: IdMap<usize>,
    /// Most distinct LoRA adapters in one step (`--max-loras`); `None` without LoRA.
    max_loras: Option<usize>,
    /// Schedules one step ahead with output placeholders (the config's `async_scheduling`,
    /// off with speculative decoding).
    async_scheduling: bool,
}

impl Scheduler {
    /// A scheduler over a fresh KV cache.
    pub fn new(config: SchedulerConfig, cache_config: CacheConfig) -> Result<Self, SchedulerConfigError> {
        if config.max_num_batched_tokens == 0 {
            return Err(SchedulerConfigError::ZeroTokenBudget);
        }
        if config.max_num_seqs == 0 {
            return Err(SchedulerConfigError::ZeroMaxNumSeqs);
        }
        if config.max_model_len == 0 {
            return Err(SchedulerConfigError::ZeroMaxModelLen);
        }
        if !config.enable_chunked_prefill && config.max_num_batched_tokens < config.max_model_len {
            return Err(SchedulerConfigError::BudgetBelowModelLen {
                budget: config.max_num_batched_tokens,
                max_model_len: config.max_model_len,
            });
        }
        let spec = config.speculative_config.clone().map(|spec| spec.validated()).transpose()?;
        let proposer = spec.as_ref().and_then(NgramProposer::from_config);
        let draft_lookahead = spec
            .as_ref()
            .filter(|spec| spec.draft_model_path().is_some())
            .map_or(0, |spec| spec.num_speculative_tokens);
        let events = EventLog::default();
        let mut kv = KvCacheManager::new(&cache_config, events.clone())?;
        let host = host_tier(&cache_config, &mut kv)?;
        Ok(Self {
            async_scheduling: config.async_scheduling && proposer.is_none(),
            proposer,
            draft_lookahead,
            ngram_indexes: IdMap::default(),
            freed_tail_blocks: IdMap::default(),
            waiting: WaitingQueue::new(config.policy),
            config,
            kv,
            requests: IdMap::default(),
            running: Vec::new(),
            finished_req_ids: HashSet::new(),
            computed_before_preemption: IdMap::default(),
            pending_outputs: Vec::new(),
            stats: SchedulerStats::default(),
            events,
            preemption_warning: PreemptionWarning::default(),
            host,
            max_loras: None,
        })
    }

    /// Holds steps to at most `max_loras` distinct LoRA adapters (vLLM's `--max-loras`): a
    /// waiting request of another adapter waits while the running ones hold that many, and
    /// the requests behind it may go first.
    pub fn set_max_loras(&mut self, max_loras: usize) {
        self.max_loras = Some(max_loras);
    }

    /// The scheduler's configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// True when it schedules one step ahead: a step may be scheduled before the outputs
    /// of the one in flight are known (`async_scheduling`, not with speculative decoding).
    pub fn async_scheduling(&self) -> bool {
        self.async_scheduling
    }

    /// Queues a request; refuses it (alone) when it can never run.
    pub fn add_request(&mut self, mut request: Request) -> Result<(), AddRequestError> {
        let request_id = request.request_id;
        let prompt_len = request.prompt_token_ids.len();
        if prompt_len == 0 {
            return Err(AddRequestError::EmptyPrompt(request_id));
        }
        if prompt_len > self.config.max_model_len {
            return Err(AddRequestError::PromptTooLong {
                request_id,
                prompt_len,
                max_model_len: self.config.max_model_len,
            });
        }
        let chunk =
            if self.config.enable_chunked_prefill { self.config.max_num_batched_tokens } else { prompt_len };
        let blocks_needed = self.kv.max_blocks_held(prompt_len, chunk);
        let usable_blocks = self.kv.pool().num_usable_blocks();
        if blocks_needed > usable_blocks {
            let why = self.kv.why_every_block_stays();
            return Err(AddRequestError::PromptExceedsKvCache {
                request_id,
                blocks_needed,
                usable_blocks,
                why,
            });
        }
        if request.sampling_params.max_tokens == 0 {
            return Err(AddRequestError::ZeroMaxTokens(request_id));
        }
        if self.requests.contains_key(&request_id) {
            return Err(AddRequestError::DuplicateId(request_id));
        }
        request.status = RequestStatus::Waiting;
        request.num_computed_tokens = 0;
        request.block_hashes.clear();
        if self.kv.enable_caching() {
            extend_block_hashes(&mut request, self.kv.block_size());
        }
        self.waiting.push_back(&request);
        self.requests.insert(request_id, request);
        Ok(())
    }

    /// Plans one step: which requests compute how many tokens, under the token budget.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut output = SchedulerOutput {
            finished_req_ids: std::mem::take(&mut self.finished_req_ids),
            ..SchedulerOutput::default()
        };
        let mut budget = self.config.max_num_batched_tokens;
        let scheduled_running = self.schedule_running(&mut budget, &mut output);
        if output.preempted_req_ids.is_empty() {
            self.schedule_waiting(&mut budget, &mut output);
        }
        let mut cached_reqs =
            Vec::with_capacity(scheduled_running.len() + output.scheduled_cached_reqs.len());
        for scheduled in scheduled_running {
            let request = self.requests.get_mut(&scheduled.request_id).expect("running requests are live");
            let start = request.num_computed_tokens;
            let end = start + scheduled.num_tokens;
            // Proposals cut by the budget are dropped (vLLM trims them the same way).
            request.spec_token_ids.truncate(end.saturating_sub(request.num_tokens()));
            if !request.spec_token_ids.is_empty() {
                output
                    .scheduled_spec_decode_tokens
                    .insert(scheduled.request_id, request.spec_token_ids.clone());
            }
            // Positions past the known tokens are placeholders: the executor sampled them.
            let known_end = end.min(request.num_tokens_with_spec());
            cached_reqs.push(CachedRequestData {
                req_id: scheduled.request_id,
                resumed_from_preemption: false,
                new_token_ids: request.tokens_with_spec(start..known_end),
                new_block_ids: scheduled.new_block_ids,
                num_freed_blocks: self.freed_tail_blocks.remove(&scheduled.request_id).unwrap_or(0),
                num_computed_tokens: start,
            });
            output.num_scheduled_tokens.insert(scheduled.request_id, scheduled.num_tokens);
        }
        cached_reqs.append(&mut output.scheduled_cached_reqs);
        output.scheduled_cached_reqs = cached_reqs;
        output.total_num_scheduled_tokens = self.config.max_num_batched_tokens - budget;
        if let Some(host) = &mut self.host {
            host.store_reclaimed(self.kv.take_reclaimed());
            output.kv_transfers = host.take_transfers();
        }
        for (id, &num_tokens) in &output.num_scheduled_tokens {
            if let Some(request) = self.requests.get_mut(id) {
                request.num_computed_tokens += num_tokens;
                // A step that computes every token so far samples the next one: with async
                // scheduling, the request holds a placeholder for it until it comes back.
                let samples = request.num_computed_tokens
                    == request.num_tokens_with_spec() + request.num_output_placeholders;
                if self.async_scheduling && samples {
                    request.num_output_placeholders += 1;
                    output.placeholder_req_ids.insert(*id);
                }
            }
        }
        self.stats.num_steps += 1;
        self.refresh_gauges();
        let step = self.stats.num_steps;
        let (num_running, num_waiting) = (self.running.len(), self.waiting.len());
        let num_scheduled_tokens = output.total_num_scheduled_tokens;
        self.events.emit(|| KvEvent::Step { step, num_scheduled_tokens, num_running, num_waiting });
        output
    }

    /// Appends the sampled tokens, applies every stop condition, frees finished requests,
    /// and returns one output per request that produced tokens or finished.
    pub fn update_from_output(
        &mut self,
        scheduler_output: &SchedulerOutput,
        model_runner_output: &ModelRunnerOutput,
    ) -> Vec<EngineCoreOutput> {
        let mut outputs = std::mem::take(&mut self.pending_outputs);
        let mut stopped = Vec::new();
        // Proposals per request at this batch size (the speculative config's schedule).
        let batch_size = self.running.len();
        let proposals_per_request =
            self.config.speculative_config.as_ref().map_or(0, |c| c.num_speculative_tokens_at(batch_size));
        let scheduled = scheduler_output
            .scheduled_cached_reqs
            .iter()
            .map(|data| (data.req_id, data.num_computed_tokens))
            .chain(
                scheduler_output
                    .scheduled_new_reqs
                    .iter()
                    .map(|data| (data.req_id, data.num_computed_tokens)),
            );
        for (request_id, start) in scheduled {
            let Some(sampled) = model_runner_output.sampled_token_ids.get(&request_id) else {
                continue;
            };
            let Some(request) = self.requests.get_mut(&request_id) else {
                continue;
            };
            if scheduler_output.placeholder_req_ids.contains(&request_id) {
                if request.num_stale_outputs > 0 {
                    // Computed before the request was reset: dropped, never appended.
                    request.num_stale_outputs -= 1;
                    continue;
                }
                request.num_output_placeholders = request.num_output_placeholders.saturating_sub(1);
            }
            // The sample follows the step's last scheduled token; it is the request's next
            // token only while its known tokens still end there (a request preempted while
            // the step ran keeps it, as in vLLM).
            let num_spec = scheduler_output.scheduled_spec_decode_tokens.get(&request_id).map_or(0, Vec::len);
            let num_scheduled = scheduler_output.num_scheduled_tokens.get(&request_id).copied().unwrap_or(0);
            let in_place = start + num_scheduled == request.num_tokens() + num_spec;
            let status_before = request.status;
            if let Some(proposed) = scheduler_output.scheduled_spec_decode_tokens.get(&request_id) {
                // Only the accepted proposals stay computed: the rest roll back.
                let num_accepted = sampled.len().saturating_sub(1).min(proposed.len());
                request.num_computed_tokens =
                    request.num_computed_tokens.saturating_sub(proposed.len() - num_accepted);
                request.num_rejected_tokens = proposed.len() - num_accepted;
                request.spec_token_ids.clear();
                if !sampled.is_empty() {
                    self.stats.spec_decoding.record(proposed.len(), num_accepted);
                }
            }
            let live = matches!(status_before, RequestStatus::Running | RequestStatus::Preempted);
            if sampled.is_empty() || !live || !in_place {
                continue;
            }
            let logprobs = model_runner_output.logprobs.get(&request_id);
            let mut new_token_ids = Vec::with_capacity(sampled.len());
            let mut new_logprobs = Vec::new();
            for (index, &token) in sampled.iter().enumerate() {
                request.output_token_ids.push(token);
                new_token_ids.push(token);
                if let Some(logprob) = logprobs.and_then(|all| all.get(index)) {
                    new_logprobs.push(logprob.clone());
                }
                if let Some(status) = stop_status(request, self.config.max_model_len) {
                    request.status = status;
                    if status == RequestStatus::FinishedStopped && request.eos_token_id != Some(token) {
                        request.stop_token = Some(token);
                    }
                    break;
                }
            }
            if self.kv.enable_caching() {
                extend_block_hashes(request, self.kv.block_size());
                // Accepted proposals may have filled blocks that no later step would cache;
                // placeholders' positions are not real tokens yet.
                if status_before == RequestStatus::Running {
                    let num_real =
                        request.num_computed_tokens.saturating_sub(request.num_output_placeholders);
                    self.kv.cache_blocks(request, num_real);
                }
            }
            self.stats.num_generated_tokens += new_token_ids.len() as u64;
            let finish_reason = request.status.finish_reason();
            if finish_reason.is_some() {
                if status_before == RequestStatus::Preempted {
                    self.waiting.remove(request);
                }
                stopped.push(request_id);
            } else if self.config.speculative_config.is_some() && status_before == RequestStatus::Running {
                // Blocks that hold only rejected proposals (or the draft's lookahead) go back
                // to the pool.
                let freed = self.kv.free_blocks_past(request_id, request.num_computed_tokens);
                if freed > 0 {
                    *self.freed_tail_blocks.entry(request_id).or_default() += freed;
                }
                let room = room_for_proposals(request, self.config.max_model_len).min(proposals_per_request);
                request.spec_token_ids = match &self.proposer {
                    Some(proposer) => {
                        let index = self.ngram_indexes.entry(request_id).or_default();
                        let output = &request.output_token_ids;
                        proposer.propose(index, &request.prompt_token_ids, output, room)
                    }
                    None => {
                        let drafted = model_runner_output.draft_token_ids.get(&request_id);
                        drafted.map_or_else(Vec::new, |drafted| drafted[..drafted.len().min(room)].to_vec())
                    }
                };
            }
            outputs.push(EngineCoreOutput {
                request_id,
                new_token_ids,
                new_logprobs,
                prompt_logprobs: model_runner_output.prompt_logprobs.get(&request_id).cloned(),
                finish_reason,
                stop_token: request.stop_token,
                num_cached_tokens: request.num_cached_tokens,
            });
        }
        if !stopped.is_empty() {
            let stopped_set: HashSet<RequestId> = stopped.iter().copied().collect();
            self.running.retain(|id| !stopped_set.contains(id));
            for request_id in stopped {
                self.release_finished(request_id);
            }
        }
        self.refresh_gauges();
        outputs
    }

    /// Undoes the bookkeeping of a step the executor failed: each scheduled request's
    /// `num_computed_tokens` goes back to where the step started, and the blocks the step
    /// was to fill leave the prefix cache (their contents were never computed).
    pub fn discard_step(&mut self, scheduler_output: &SchedulerOutput) {
        for (&request_id, &num_tokens) in &scheduler_output.num_scheduled_tokens {
            let Some(request) = self.requests.get_mut(&request_id) else {
                continue;
            };
            request.spec_token_ids.clear();
            if scheduler_output.placeholder_req_ids.contains(&request_id) {
                request.num_output_placeholders = request.num_output_placeholders.saturating_sub(1);
            }
            request.num_computed_tokens = request.num_computed_tokens.saturating_sub(num_tokens);
            self.kv.discard_uncomputed(request_id, request.num_computed_tokens);
        }
        self.discard_transfers(scheduler_output);
    }

    /// The host copies of a failed step never ran: its stored slots are forgotten and the
    /// blocks it loaded are invalid, so their requests recompute them.
    fn discard_transfers(&mut self, scheduler_output: &SchedulerOutput) {
        let transfers = &scheduler_output.kv_transfers;
        if let Some(host) = &mut self.host {
            for store in &transfers.stores {
                host.forget_slot(store.slot);
            }
        }
        let loaded: HashSet<BlockId> = transfers.loads.iter().map(|load| load.block_id).collect();
        let mut failed = self.handle_invalid_blocks(&loaded);
        self.pending_outputs.append(&mut failed);
    }

    /// Host copies the executor could not make (each a [`crate::core::host_tier::BlockCopy`]
    /// of this step's `kv_transfers`): a failed store's slot is forgotten, a failed load's
    /// block is invalid and its request recomputes it (or fails, under policy `fail`). Warns.
    pub fn handle_failed_transfers(
        &mut self,
        failed_stores: &[crate::core::host_tier::BlockCopy],
        failed_loads: &[crate::core::host_tier::BlockCopy],
    ) -> Vec<EngineCoreOutput> {
        if failed_stores.is_empty() && failed_loads.is_empty() {
            return Vec::new();
        }
        tracing::warn!(
            stores = failed_stores.len(),
            loads = failed_loads.len(),
            "host KV tier copies failed; their blocks will be recomputed"
        );
        if let Some(host) = &mut self.host {
            for copy in failed_stores.iter().chain(failed_loads) {
                host.copy_failed(copy.slot);
            }
        }
        let loaded: HashSet<BlockId> = failed_loads.iter().map(|load| load.block_id).collect();
        self.handle_invalid_blocks(&loaded)
    }

    /// Folds the executor's measurements of a step into the host tier's load-or-recompute
    /// cost (nothing without a tier).
    pub fn observe_step_timing(&mut self, timing: &StepTiming) {
        if let Some(host) = &mut self.host {
            host.observe(timing);
        }
    }

    /// The host tier's counters, when it is on.
    pub fn host_tier_stats(&self) -> Option<HostTierStats> {
        self.host.as_ref().map(HostTier::stats)
    }

    /// The host tier, when it is on.
    pub fn host_tier(&self) -> Option<&HostTier> {
        self.host.as_ref()
    }

    /// The host tier, when it is on (mutable).
    pub fn host_tier_mut(&mut self) -> Option<&mut HostTier> {
        self.host.as_mut()
    }

    /// Finishes (typically aborts) the given requests wherever they are; each is reported
    /// in the next `SchedulerOutput.finished_req_ids`. Unknown ids are skipped. Returns how
    /// many were finished.
    pub fn finish_requests(
        &mut self,
        request_ids: impl IntoIterator<Item = RequestId>,
        status: RequestStatus,
    ) -> Result<usize, NotFinishedStatus> {
        if !status.is_finished() {
            return Err(NotFinishedStatus(status));
        }
        let mut finished = 0;
        for request_id in request_ids {
            let Some(request) = self.requests.get_mut(&request_id) else {
                continue;
            };
            match request.status {
                RequestStatus::Running => self.running.retain(|&id| id != request_id),
                RequestStatus::Waiting | RequestStatus::Preempted => {
                    self.waiting.remove(request);
                }
                _ => continue,
            }
            if let Some(request) = self.requests.get_mut(&request_id) {
                request.status = status;
            }
            self.release_finished(request_id);
            finished += 1;
        }
        self.refresh_gauges();
        Ok(finished)
    }

    /// Reacts to KV blocks found corrupt or lost. Under policy `recompute` each request whose
    /// computed tokens reach into an invalid block has `num_computed_tokens` cut to that
    /// block's start and stays RUNNING with its blocks; under `fail` it finishes with an
    /// error (returned here), and every block of its table from the first invalid one on
    /// leaves the prefix cache too (as vLLM evicts `block_ids[idx:]`), so no later block
    /// can be hit through a duplicate of an evicted one. Either way the invalid blocks leave
    /// the prefix cache. Call it between `update_from_output` and the next `schedule`.
    pub fn handle_invalid_blocks(&mut self, invalid_block_ids: &HashSet<BlockId>) -> Vec<EngineCoreOutput> {
        if invalid_block_ids.is_empty() {
            return Vec::new();
        }
        let block_size = self.kv.block_size();
        let mut affected: Vec<(RequestId, usize)> = Vec::new();
        for &request_id in &self.running {
            let table = self.kv.get_block_ids(request_id);
            let Some(first_invalid) = table.iter().position(|id| invalid_block_ids.contains(id)) else {
                continue;
            };
            if first_invalid * block_size < self.requests[&request_id].num_computed_tokens {
                affected.push((request_id, first_invalid));
            }
        }
        let num_blocks = self.kv.pool().num_blocks();
        let mut sorted_invalid: Vec<BlockId> =
            invalid_block_ids.iter().copied().filter(|&id| (id as usize) < num_blocks).collect();
        sorted_invalid.sort_unstable();
        for &block_id in &sorted_invalid {
            self.kv.evict_block(block_id);
        }
        let mut failed = Vec::new();
        for &(request_id, first_invalid) in &affected {
            match self.config.invalid_block_policy {
                InvalidBlockPolicy::Recompute => {
                    let request = self.requests.get_mut(&request_id).expect("running requests are live");
                    let truncated = first_invalid * block_size;
                    self.stats.num_recomputed_tokens += (request.num_computed_tokens - truncated) as u64;
                    request.num_computed_tokens = truncated;
                    // What steps in flight sample for it came from the invalid blocks.
                    request.num_stale_outputs += std::mem::take(&mut request.num_output_placeholders);
                    self.kv.uncache_from(request_id, first_invalid);
                }
                InvalidBlockPolicy::Fail => {
                    let later_blocks = self.kv.get_block_ids(request_id)[first_invalid..].to_vec();
                    for block_id in later_blocks {
                        self.kv.evict_block(block_id);
                    }
                    self.running.retain(|&id| id != request_id);
                    let request = self.requests.get_mut(&request_id).expect("running requests are live");
                    request.status = RequestStatus::FinishedError;
                    failed.push(EngineCoreOutput {
                        request_id,
                        new_token_ids: Vec::new(),
                        new_logprobs: Vec::new(),
                        prompt_logprobs: None,
                        finish_reason: request.status.finish_reason(),
                        stop_token: None,
                        num_cached_tokens: request.num_cached_tokens,
                    });
                    self.release_finished(request_id);
                }
            }
        }
        self.events.emit(|| KvEvent::InvalidBlocks {
            block_ids: sorted_invalid,
            affected_request_ids: affected.iter().map(|&(id, _)| id).collect(),
        });
        self.refresh_gauges();
        failed
    }

    /// The KV cache manager.
    pub fn kv_cache_manager(&self) -> &KvCacheManager {
        &self.kv
    }

    /// Forgets every cached block hash; refused (false) while any block is in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.kv.reset_prefix_cache()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats { host_tier: self.host_tier_stats(), ..self.stats }
    }

    /// True while any request is waiting or running.
    pub fn has_unfinished_requests(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Requests in the running queue.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests in the waiting queue.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// A live (not finished) request.
    pub fn get_request(&self, request_id: RequestId) -> Option<&Request> {
        self.requests.get(&request_id)
    }

    /// The running queue, in scheduling order.
    pub fn running_ids(&self) -> &[RequestId] {
        &self.running
    }

    /// The waiting queue, next to be admitted first.
    pub fn waiting_ids(&self) -> Vec<RequestId> {
        self.waiting.ids()
    }

    /// A handle to the log of KV events (off until started; the caller drains it).
    pub fn event_log(&self) -> EventLog {
        self.events.clone()
    }

    /// A handle to the log of changes to the set of cached block hashes (off until started;
    /// the caller drains it): what a KV-cache-aware router follows.
    pub fn cache_event_log(&self) -> EventLog<CacheEvent> {
        self.kv.cache_event_log()
    }

    /// The whole state of the cache and queues (O(blocks + requests); for observers).
    pub fn snapshot(&self) -> KvSnapshot {
        KvSnapshot::capture(
            &self.kv,
            self.requests.values(),
            self.waiting.ids(),
            self.running.clone(),
            self.stats,
        )
    }

    /// Schedules the running requests in order under `budget`, decodes and unfinished
    /// prefill chunks alike, and returns what it scheduled.
    ///
    /// When a request's new tokens do not fit the free blocks, the victim policy picks a
    /// running request to preempt (RECOMPUTE: its blocks are freed, it goes back to the front
    /// of the waiting queue) and the allocation is retried. A victim may already have been
    /// scheduled earlier in this very step (`victim_index < index`): then its entry is taken
    /// back out of `scheduled`, its tokens return to the budget, the blocks it was given for
    /// this step are discarded (`discard_uncomputed`: their hashes were never earned), and the
    /// loop index steps back one so the request now at `index` is not skipped. When the
    /// request itself is the victim, or is alone and still does not fit the whole pool
    /// (`cap_at_pool_size`), scheduling of running requests stops.
    fn schedule_running(
        &mut self,
        budget: &mut usize,
        output: &mut SchedulerOutput,
    ) -> Vec<ScheduledRunning> {
        let mut scheduled: Vec<ScheduledRunning> = Vec::with_capacity(self.running.len());
        let mut index = 0;
        while index < self.running.len() && *budget > 0 {
            let request_id = self.running[index];
            let mut num_tokens = self.num_tokens_to_schedule(&self.requests[&request_id], *budget);
            if num_tokens == 0 || self.waits_for_output(&self.requests[&request_id]) {
                index += 1;
                continue;
            }
            let mut lookahead = self.lookahead(&self.requests[&request_id], num_tokens);
            let new_block_ids = loop {
                let request = &self.requests[&request_id];
                let none = ComputedBlocks::default();
                if let Some(new_blocks) =
                    self.kv.allocate_slots_with_lookahead(request, num_tokens, lookahead, &none)
                {
                    break Some(new_blocks);
                }
                // The draft's lookahead, then proposals, are dropped before anybody is
                // preempted for their slots.
                if lookahead > 0 {
                    lookahead = 0;
                    continue;
                }
                if !request.spec_token_ids.is_empty() {
                    let request = self.requests.get_mut(&request_id).expect("running requests are live");
                    request.spec_token_ids.clear();
                    num_tokens = self.num_tokens_to_schedule(&self.requests[&request_id], *budget);
                    continue;
                }
                if self.running.len() == 1 {
                    self.cap_at_pool_size(request_id, output);
                    break None;
                }
                let victim_index = self.victim_index();
                let victim = self.running.remove(victim_index);
                if victim_index < index {
                    let position = scheduled.iter().position(|s| s.request_id == victim);
                    if let Some(undone) = position.map(|p| scheduled.remove(p)) {
                        *budget += undone.num_tokens;
                    }
                    let num_computed = self.requests[&victim].num_computed_tokens;
                    self.kv.discard_uncomputed(victim, num_computed);
                    index -= 1;
                }
                self.preempt(victim, request_id);
                output.preempted_req_ids.insert(victim);
                if victim == request_id {
                    break None;
                }
            };
            let Some(new_block_ids) = new_block_ids else {
                break;
            };
            scheduled.push(ScheduledRunning { request_id, num_tokens, new_block_ids });
            *budget -= num_tokens;
            index += 1;
        }
        scheduled
    }

    /// Admits waiting requests in queue order (new ones and preempted ones resuming) while
    /// the budget, `max_num_seqs` and the KV cache allow: prefix-cache hits first, then a
    /// prefill chunk (or the whole prompt without chunked prefill), admitted only when blocks
    /// for the whole sequence so far could be allocated (for this chunk's, under a sliding
    /// window, whose blocks are freed as it goes). Stops at the first request that cannot be admitted, so the
    /// queue order holds.
    fn schedule_waiting(&mut self, budget: &mut usize, output: &mut SchedulerOutput) {
        let mut loras = StepLoras::new(self.max_loras.unwrap_or(usize::MAX));
        for id in &self.running {
            loras.add(self.requests[id].lora.as_ref());
        }
        let mut skipped = Vec::new();
        while let Some(request_id) = self.waiting.peek() {
            if *budget == 0 || self.running.len() >= self.config.max_num_seqs {
                break;
            }
            let request = &self.requests[&request_id];
            if request.num_output_placeholders > 0 {
                // Preempted while its step ran: it resumes once that token is back.
                break;
            }
            if !loras.admits(request.lora.as_ref()) {
                self.waiting.pop();
                skipped.push(request_id);
                continue;
            }
            let computed = self.kv.get_computed_blocks(request);
            let (load_hashes, load) = self.plan_host_load(request, &computed);
            let num_loaded_tokens = load.slots.len() * self.kv.block_size();
            let num_found_tokens = computed.num_computed_tokens + num_loaded_tokens;
            let remaining = request.num_tokens() - num_found_tokens;
            let num_tokens = if self.config.enable_chunked_prefill {
                self.cap_chunk(remaining, *budget)
            } else if remaining > *budget {
                break;
            } else {
                remaining
            };
            // The whole sequence so far must fit, unless a sliding window frees blocks as the
            // request goes: then the blocks of this step's chunk.
            let must_fit = match self.kv.sliding_window() {
                Some(_) => computed.num_computed_tokens + num_tokens,
                None => request.num_tokens(),
            };
            if !self.kv.can_fit(request, must_fit, &computed) {
                break;
            }
            let Some(new_blocks) = self.kv.allocate_slots(request, num_loaded_tokens + num_tokens, &computed)
            else {
                break;
            };
            if let Some(host) = &mut self.host {
                host.commit_load(&load, &load_hashes, &new_blocks[..load.slots.len()]);
            }
            self.waiting.pop();
            let request = self.requests.get_mut(&request_id).expect("waiting requests are live");
            let resumed = request.status == RequestStatus::Preempted;
            let num_hit_tokens = num_found_tokens;
            request.status = RequestStatus::Running;
            request.num_computed_tokens = num_hit_tokens;
            if resumed {
                if self.kv.enable_caching() {
                    let num_tokens = request.num_tokens();
                    self.stats.preempted_prefix_cache.record(num_tokens, computed.num_computed_tokens);
                }
                let lost = self.computed_before_preemption.remove(&request_id).unwrap_or(0);
                self.stats.num_recomputed_tokens += lost.saturating_sub(num_hit_tokens) as u64;
                self.events.emit(|| KvEvent::Resume { request_id, num_cached_tokens: num_hit_tokens });
                output.scheduled_cached_reqs.push(CachedRequestData {
                    req_id: request_id,
                    resumed_from_preemption: true,
                    new_token_ids: request.tokens(num_hit_tokens..num_hit_tokens + num_tokens),
                    new_block_ids: self.kv.get_block_ids(request_id).to_vec(),
                    num_freed_blocks: 0,
                    num_computed_tokens: num_hit_tokens,
                });
            } else {
                if self.kv.enable_caching() {
                    self.stats.prefix_cache.record(request.num_tokens(), computed.num_computed_tokens);
                }
                request.num_cached_tokens = num_hit_tokens;
                output.scheduled_new_reqs.push(NewRequestData {
                    req_id: request_id,
                    prompt_token_ids: request.prompt_token_ids.clone(),
                    sampling_params: request.sampling_params.clone(),
                    block_ids: self.kv.get_block_ids(request_id).to_vec(),
                    num_computed_tokens: num_hit_tokens,
                    lora_id: request.lora.as_ref().map(|l| l.id),
                });
            }
            output.num_scheduled_tokens.insert(request_id, num_tokens);
            loras.add(self.requests[&request_id].lora.as_ref());
            self.running.push(request_id);
            *budget -= num_tokens;
        }
        for request_id in skipped.into_iter().rev() {
            self.waiting.push_front(&self.requests[&request_id]);
        }
    }

    /// The host tier's plan for a waiting request: the hashes of the blocks after its GPU
    /// prefix-cache hits (up to the last token, which is always computed) and which of them
    /// to load. Nothing without a tier or for a request that takes no cache hits.
    fn plan_host_load(&self, request: &Request, computed: &ComputedBlocks) -> (Vec<BlockHash>, LoadPlan) {
        let Some(host) = &self.host else {
            return (Vec::new(), LoadPlan::default());
        };
        if request.sampling_params.prompt_logprobs.is_some() || request.num_tokens() == 0 {
            return (Vec::new(), LoadPlan::default());
        }
        let block_size = self.kv.block_size();
        let max_hit_blocks = ((request.num_tokens() - 1) / block_size).min(request.block_hashes.len());
        let first = computed.block_ids.len().min(max_hit_blocks);
        let hashes = &request.block_hashes[first..max_hit_blocks];
        let plan = host.plan_load(hashes, block_size);
        (hashes[..plan.slots.len()].to_vec(), plan)
    }

    /// True when a running request must not be scheduled past the outputs in flight: its
    /// placeholders already reach `max_tokens` or `max_model_len` (vLLM skips the same extra
    /// step), or it is constrained (its next mask needs the token in flight).
    fn waits_for_output(&self, request: &Request) -> bool {
        let placeholders = request.num_output_placeholders;
        placeholders > 0
            && (request.sampling_params.structured_outputs.is_some()
                || request.output_token_ids.len() + placeholders >= request.sampling_params.max_tokens
                || request.num_tokens() + placeholders >= self.config.max_model_len)
    }

    /// Tokens of a running request to compute this step: what it has not computed (its
    /// placeholders included), capped by the budget and the long-prefill threshold.
    fn num_tokens_to_schedule(&self, request: &Request, budget: usize) -> usize {
        let remaining =
            request.num_tokens_with_spec() + request.num_output_placeholders - request.num_computed_tokens;
        if self.config.enable_chunked_prefill {
            self.cap_chunk(remaining, budget)
        } else {
            remaining.min(budget)
        }
    }

    /// Slots the draft model writes past `request`'s `num_tokens` new ones this step: its
    /// `num_speculative_tokens` when the step samples it (it proposes after the step), within
    /// `max_model_len`; none without draft-model speculation.
    fn lookahead(&self, request: &Request, num_tokens: usize) -> usize {
        let end = request.num_computed_tokens + num_tokens;
        if self.draft_lookahead == 0 || end < request.num_tokens_with_spec() {
            return 0;
        }
        self.draft_lookahead.min(self.config.max_model_len.saturating_sub(end))
    }

    /// A prefill chunk: `remaining` capped by `long_prefill_token_threshold` (when set) and
    /// by `budget`.
    fn cap_chunk(&self, remaining: usize, budget: usize) -> usize {
        let threshold = self.config.long_prefill_token_threshold;
        let capped = if threshold > 0 { remaining.min(threshold) } else { remaining };
        capped.min(budget)
    }

    /// The running request to preempt: the last admitted under FCFS, the one of lowest
    /// priority (highest key, latest arrival among equals) under PRIORITY.
    fn victim_index(&self) -> usize {
        match self.config.policy {
            SchedulingPolicy::Fcfs => self.running.len() - 1,
            SchedulingPolicy::Priority => self
                .running
                .iter()
                .enumerate()
                .max_by_key(|&(_, id)| PriorityKey::of(&self.requests[id]))
                .map_or(0, |(index, _)| index),
        }
    }

    /// Preempts `victim` for `needed_by`: frees its blocks (their hashes stay cached), puts it
    /// at the front of the waiting queue with nothing computed, and counts it.
    fn preempt(&mut self, victim: RequestId, needed_by: RequestId) {
        self.kv.free(victim);
        let request = self.requests.get_mut(&victim).expect("running requests are live");
        self.computed_before_preemption.insert(victim, request.num_computed_tokens);
        request.spec_token_ids.clear();
        self.freed_tail_blocks.remove(&victim);
        request.status = RequestStatus::Preempted;
        request.num_computed_tokens = 0;
        request.num_preemptions += 1;
        self.waiting.push_front(request);
        self.stats.num_preemptions += 1;
        self.events.emit(|| KvEvent::Preempt { request_id: victim, needed_by });
        self.warn_preemption(victim);
    }

    /// Logs a preemption at most once per `PREEMPTION_WARNING_INTERVAL`, counting the ones it
    /// kept quiet about.
    fn warn_preemption(&mut self, victim: RequestId) {
        let warning = &mut self.preemption_warning;
        let now = Instant::now();
        if warning.last_logged.is_some_and(|last| now.duration_since(last) < PREEMPTION_WARNING_INTERVAL) {
            warning.suppressed += 1;
            return;
        }
        tracing::warn!(
            request_id = victim,
            total_preemptions = self.stats.num_preemptions,
            suppressed_since_last_warning = warning.suppressed,
            "request preempted (RECOMPUTE): the KV cache ran out of free blocks ({} usable blocks of {} tokens, {} running requests); its tokens will be computed again. Raise --num-gpu-blocks or --kv-cache-memory, or lower --max-num-seqs or --max-num-batched-tokens",
            self.kv.pool().num_usable_blocks(),
            self.kv.block_size(),
            self.running.len() + 1,
        );
        warning.last_logged = Some(now);
        warning.suppressed = 0;
    }

    /// Ends a running request whose sequence no longer fits the whole KV pool even alone
    /// (finish reason `length`), and reports it in this step's output.
    fn cap_at_pool_size(&mut self, request_id: RequestId, output: &mut SchedulerOutput) {
        self.running.retain(|&id| id != request_id);
        let request = self.requests.get_mut(&request_id).expect("running requests are live");
        request.status = RequestStatus::FinishedLengthCapped;
        tracing::warn!(
            request_id,
            num_tokens = request.num_tokens(),
            "request stopped: its sequence no longer fits the whole KV cache{}; raise --num-gpu-blocks or --kv-cache-memory",
            self.kv.why_every_block_stays(),
        );
        self.pending_outputs.push(EngineCoreOutput {
            request_id,
            new_token_ids: Vec::new(),
            new_logprobs: Vec::new(),
            prompt_logprobs: None,
            finish_reason: request.status.finish_reason(),
            stop_token: None,
            num_cached_tokens: request.num_cached_tokens,
        });
        self.release_finished(request_id);
        output.finished_req_ids.extend(self.finished_req_ids.drain());
    }

    /// Frees a finished request's blocks and forgets it; the executor hears of it through
    /// the next step's `finished_req_ids`.
    fn release_finished(&mut self, request_id: RequestId) {
        self.kv.free(request_id);
        self.computed_before_preemption.remove(&request_id);
        self.freed_tail_blocks.remove(&request_id);
        self.ngram_indexes.remove(&request_id);
        let Some(request) = self.requests.remove(&request_id) else {
            return;
        };
        self.finished_req_ids.insert(request_id);
        self.stats.num_finished += 1;
        if let Some(reason) = request.status.finish_reason() {
            self.events.emit(|| KvEvent::Finish { request_id, reason });
        }
    }

    /// Updates the running/waiting/usage gauges in the stats.
    fn refresh_gauges(&mut self) {
        self.stats.num_running = self.running.len();
        self.stats.num_waiting = self.waiting.len();
        self.stats.kv_cache_usage = self.kv.usage();
        self.stats.peak_kv_cache_usage = self.stats.peak_kv_cache_usage.max(self.stats.kv_cache_usage);
    }
}

/// How many proposed tokens may follow a running `request` whose known tokens are all
/// computed but its last: none while it is not decoding, none past `max_model_len`, and no
/// more than its `max_tokens` leave room for (the verify pass adds one token of its own).
/// A constrained request is speculated too: the engine gives the verify pass a mask per
/// position, advanced along the proposals.
fn room_for_proposals(request: &Request, max_model_len: usize) -> usize {
    if request.num_computed_tokens + 1 != request.num_tokens() {
        return 0;
    }
    let room_in_model = max_model_len.saturating_sub(request.num_tokens());
    let room_in_output =
        request.sampling_params.max_tokens.saturating_sub(request.output_token_ids.len() + 1);
    room_in_model.min(room_in_output)
}

/// The host tier `cache_config` asks for (none at size 0), after checking the cache can
/// carry one; the pool then keeps the hashed blocks it reuses for the tier to save.
fn host_tier(cache_config: &CacheConfig, kv: &mut KvCacheManager) -> Result<Option<HostTier>, HostTierError> {
    if cache_config.kv_offloading_size > 0.0 {
        if !cache_config.enable_prefix_caching {
            return Err(HostTierError::NeedsPrefixCaching);
        }
        if kv.sliding_window().is_some() {
            return Err(HostTierError::SlidingWindow);
        }
    }
    let mut host = HostTier::new(cache_config.kv_offloading_size, cache_config.kv_block_bytes)?;
    if let Some(host) = &mut host {
        kv.keep_reclaimed();
        host.set_event_log(kv.cache_event_log());
    }
    Ok(host)
}

/// The finished status `request` reaches with its last token, if any (vLLM's order:
/// length limits, then min_tokens, then EOS unless ignored, then stop token ids).
fn stop_status(request: &Request, max_model_len: usize) -> Option<RequestStatus> {
    let params = &request.sampling_params;
    let num_output = request.output_token_ids.len();
    if request.num_tokens() >= max_model_len || num_output >= params.max_tokens {
        return Some(RequestStatus::FinishedLengthCapped);
    }
    if num_output < params.min_tokens {
        return None;
    }
    let last = *request.output_token_ids.last()?;
    if !params.ignore_eos && request.eos_token_id == Some(last) {
        return Some(RequestStatus::FinishedStopped);
    }
    if params.stop_token_ids.contains(&last) {
        return Some(RequestStatus::FinishedStopped);
    }
    None
}
