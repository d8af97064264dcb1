//! A request as the scheduler tracks it.

use serde::{Deserialize, Serialize};

use crate::ids::{BlockHash, RequestId, TokenId};
use crate::sampling::SamplingParams;

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// Queued, never scheduled.
    Waiting,
    /// Holding blocks and being computed.
    Running,
    /// Preempted: blocks freed, waiting to re-prefill.
    Preempted,
    /// Ended by EOS, a stop token or a stop string.
    FinishedStopped,
    /// Ended by `max_tokens` or `max_model_len`.
    FinishedLengthCapped,
    /// Ended by the caller.
    FinishedAborted,
    /// Ended by an error (for example its KV blocks were lost under policy `fail`).
    FinishedError,
}

impl RequestStatus {
    /// True for every finished state.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            Self::FinishedStopped | Self::FinishedLengthCapped | Self::FinishedAborted | Self::FinishedError
        )
    }

    /// The OpenAI-style reason for a finished state.
    pub fn finish_reason(self) -> Option<FinishReason> {
        match self {
            Self::FinishedStopped => Some(FinishReason::Stop),
            Self::FinishedLengthCapped => Some(FinishReason::Length),
            Self::FinishedAborted => Some(FinishReason::Abort),
            Self::FinishedError => Some(FinishReason::Error),
            _ => None,
        }
    }
}

/// Why a request finished, as the OpenAI API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// EOS, stop token or stop string.
    Stop,
    /// `max_tokens` or `max_model_len`.
    Length,
    /// Aborted by the caller.
    Abort,
    /// Failed.
    Error,
}

impl FinishReason {
    /// The lower-case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error => "error",
        }
    }
}

/// One request: its tokens, its progress and its cache bookkeeping.
#[derive(Debug, Clone)]
pub struct Request {
    /// Engine-wide id.
    pub request_id: RequestId,
    /// Prompt token ids.
    pub prompt_token_ids: Vec<TokenId>,
    /// Generated token ids so far.
    pub output_token_ids: Vec<TokenId>,
    /// Sampling and stopping parameters.
    pub sampling_params: SamplingParams,
    /// End-of-sequence token of the model, if any.
    pub eos_token_id: Option<TokenId>,
    /// Arrival order key (seconds or a sequence number); earlier runs first.
    pub arrival_time: f64,
    /// Lower runs first under the PRIORITY policy.
    pub priority: i32,
    /// Mixed into the first block's hash so that only requests with the same salt share blocks.
    pub cache_salt: Option<String>,
    /// Current state.
    pub status: RequestStatus,
    /// Tokens whose K/V are in the cache.
    pub num_computed_tokens: usize,
    /// Prompt tokens that came from the prefix cache when first scheduled.
    pub num_cached_tokens: usize,
    /// Times this request was preempted.
    pub num_preemptions: usize,
    /// Hashes of its full blocks, kept across preemption.
    pub block_hashes: Vec<BlockHash>,
    /// The stop token that ended it, if any.
    pub stop_token: Option<TokenId>,
    /// Tokens proposed to follow its known ones (speculative decoding), to be verified by
    /// the next step that schedules it; never hashed, cached or counted as output.
    pub spec_token_ids: Vec<TokenId>,
    /// The LoRA adapter it runs with; `None` for the base model.
    pub lora: Option<crate::core::lora::LoraRequest>,
    /// Proposed tokens its latest verification rejected.
    pub num_rejected_tokens: usize,
    /// Tokens scheduled steps will sample that have not come back yet (async scheduling,
    /// vLLM's `num_output_placeholders`): a running request is scheduled past them, and they
    /// count in `num_computed_tokens` once scheduled but never in its known tokens.
    pub num_output_placeholders: usize,
    /// In-flight outputs to drop when they arrive: they were computed before the request
    /// was reset (its KV found invalid and recomputed).
    pub num_stale_outputs: usize,
}

impl Request {
    /// A new waiting request.
    pub fn new(
        request_id: RequestId,
        prompt_token_ids: Vec<TokenId>,
        sampling_params: SamplingParams,
        eos_token_id: Option<TokenId>,
        arrival_time: f64,
    ) -> Self {
        Self {
            request_id,
            prompt_token_ids,
            output_token_ids: Vec::new(),
            sampling_params,
            eos_token_id,
            arrival_time,
            priority: 0,
            cache_salt: None,
            status: RequestStatus::Waiting,
            num_computed_tokens: 0,
            num_cached_tokens: 0,
            num_preemptions: 0,
            block_hashes: Vec::new(),
            stop_token: None,
            spec_token_ids: Vec::new(),
            lora: None,
            num_rejected_tokens: 0,
            num_output_placeholders: 0,
            num_stale_outputs: 0,
        }
    }

    /// Prompt plus output length.
    pub fn num_tokens(&self) -> usize {
        self.prompt_token_ids.len() + self.output_token_ids.len()
    }

    /// The token at `index` of prompt + output.
    pub fn token(&self, index: usize) -> TokenId {
        let p = self.prompt_token_ids.len();
        if index < p { self.prompt_token_ids[index] } else { self.output_token_ids[index - p] }
    }

    /// Tokens `range` of prompt + output, copied.
    pub fn tokens(&self, range: std::ops::Range<usize>) -> Vec<TokenId> {
        range.map(|i| self.token(i)).collect()
    }

    /// Prompt, output and proposed tokens.
    pub fn num_tokens_with_spec(&self) -> usize {
        self.num_tokens() + self.spec_token_ids.len()
    }

    /// Tokens `range` of prompt + output + proposed tokens, copied.
    pub fn tokens_with_spec(&self, range: std::ops::Range<usize>) -> Vec<TokenId> {
        let known = self.num_tokens();
        range.map(|i| if i < known { self.token(i) } else { self.spec_token_ids[i - known] }).collect()
    }
}
