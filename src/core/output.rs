//! What the scheduler hands the executor each step, and what comes back.

use std::collections::{HashMap, HashSet};

use crate::core::request::FinishReason;
use crate::ids::{BlockId, RequestId, TokenId};
use crate::sampling::{PromptLogprobs, SamplingParams, TokenLogprobs};

/// A request scheduled for the first time (or, after preemption, see `CachedRequestData`).
#[derive(Debug, Clone)]
pub struct NewRequestData {
    /// The request.
    pub req_id: RequestId,
    /// Its whole prompt.
    pub prompt_token_ids: Vec<TokenId>,
    /// How it samples.
    pub sampling_params: SamplingParams,
    /// Its whole block table.
    pub block_ids: Vec<BlockId>,
    /// Tokens already in the cache (prefix hits); this step computes from here.
    pub num_computed_tokens: usize,
    /// The id of its LoRA adapter; `None` for the base model.
    pub lora_id: Option<u32>,
}

/// A request that was scheduled before: running, or resumed after preemption.
#[derive(Debug, Clone)]
pub struct CachedRequestData {
    /// The request.
    pub req_id: RequestId,
    /// True when it was preempted since the executor last saw it; `new_block_ids` is then
    /// its whole block table, and its token history is still the executor's.
    pub resumed_from_preemption: bool,
    /// The token ids this step computes (as many as it has scheduled tokens).
    pub new_token_ids: Vec<TokenId>,
    /// Blocks appended to its table this step (the whole table when resumed).
    pub new_block_ids: Vec<BlockId>,
    /// Blocks the scheduler took off the end of its table since the executor last saw it
    /// (they held only rejected speculative tokens): the executor drops as many from the end
    /// of its table before appending `new_block_ids`. 0 when resumed.
    pub num_freed_blocks: usize,
    /// Tokens already in the cache; this step computes from here.
    pub num_computed_tokens: usize,
}

/// One step's plan.
#[derive(Debug, Clone, Default)]
pub struct SchedulerOutput {
    /// Requests the executor has not seen.
    pub scheduled_new_reqs: Vec<NewRequestData>,
    /// Requests the executor has seen.
    pub scheduled_cached_reqs: Vec<CachedRequestData>,
    /// Tokens scheduled per request.
    pub num_scheduled_tokens: HashMap<RequestId, usize>,
    /// Sum of `num_scheduled_tokens`.
    pub total_num_scheduled_tokens: usize,
    /// Proposed tokens scheduled for verification per request (speculative decoding): the
    /// last of its `num_scheduled_tokens`, after its last known token. The executor
    /// computes logits at the last known token and at each proposed one, accepts the
    /// proposals while they equal what it samples, and returns the accepted tokens plus the
    /// one it sampled after them.
    pub scheduled_spec_decode_tokens: HashMap<RequestId, Vec<TokenId>>,
    /// Requests preempted in this step.
    pub preempted_req_ids: HashSet<RequestId>,
    /// Requests that finished since the previous step; the executor drops their state.
    pub finished_req_ids: HashSet<RequestId>,
    /// Copies to and from the host KV tier, run before the forward pass.
    pub kv_transfers: crate::core::host_tier::KvTransfers,
    /// Requests this step samples for that got an output placeholder (async scheduling): a
    /// later step may be scheduled past the token before it is known. The executor keeps
    /// the tokens it samples, and fills those positions from them: `new_token_ids` of such a
    /// request hold only its known tokens.
    pub placeholder_req_ids: HashSet<RequestId>,
}

impl SchedulerOutput {
    /// True when nothing is to be computed.
    pub fn is_empty(&self) -> bool {
        self.total_num_scheduled_tokens == 0
    }
}

/// What the executor computed in one step.
#[derive(Debug, Clone, Default)]
pub struct ModelRunnerOutput {
    /// Sampled tokens per request; requests in the middle of a prefill have none. A request
    /// with proposed tokens has the accepted ones, then the one sampled after them.
    pub sampled_token_ids: HashMap<RequestId, Vec<TokenId>>,
    /// Log-probabilities for requests that asked for them, one per sampled token.
    pub logprobs: HashMap<RequestId, Vec<TokenLogprobs>>,
    /// Prompt log-probabilities of requests that asked for them, whole, at the step that
    /// finished their prompt (the one that samples their first token), once.
    pub prompt_logprobs: HashMap<RequestId, PromptLogprobs>,
    /// Host KV copies that failed (stores found failed this step, loads not made): the
    /// scheduler forgets those host blocks and recomputes the unloaded ones, whose requests
    /// the executor left out of the step.
    pub failed_kv_transfers: crate::core::host_tier::KvTransfers,
    /// Tokens a draft model proposes to follow each request's sampled ones (draft-model
    /// speculation; vLLM's `spec_token_ids`): the scheduler schedules them for verification.
    pub draft_token_ids: HashMap<RequestId, Vec<TokenId>>,
}

/// What one step produced for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineCoreOutput {
    /// The request.
    pub request_id: RequestId,
    /// Tokens appended this step.
    pub new_token_ids: Vec<TokenId>,
    /// Log-probabilities of those tokens, when asked for.
    pub new_logprobs: Vec<TokenLogprobs>,
    /// The prompt's log-probabilities, when asked for, on the request's first output.
    pub prompt_logprobs: Option<PromptLogprobs>,
    /// Set when the request finished this step.
    pub finish_reason: Option<FinishReason>,
    /// The stop token that ended it, if any.
    pub stop_token: Option<TokenId>,
    /// Prompt tokens served by the prefix cache.
    pub num_cached_tokens: usize,
}
