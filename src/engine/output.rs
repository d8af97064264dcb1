//! What the engine hands back: per-step deltas and whole completions.

use serde::Serialize;

use crate::core::request::FinishReason;
use crate::ids::{RequestId, TokenId};
use crate::sampling::{PromptLogprobs, TokenLogprobs};

/// What one step produced for one request: the new tokens and the new text.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOutput {
    /// The request.
    pub request_id: RequestId,
    /// Tokens generated this step.
    pub new_token_ids: Vec<TokenId>,
    /// Text completed this step (held back while it could still be part of a stop string
    /// or of a UTF-8 character).
    pub new_text: String,
    /// Log-probabilities of `new_token_ids`, when asked for.
    pub new_logprobs: Vec<TokenLogprobs>,
    /// The prompt's log-probabilities (`SamplingParams::prompt_logprobs`), on the request's
    /// first output with tokens.
    pub prompt_logprobs: Option<PromptLogprobs>,
    /// Set on the request's last output.
    pub finish_reason: Option<FinishReason>,
    /// Prompt length in tokens.
    pub num_prompt_tokens: usize,
    /// Tokens generated so far, these included.
    pub num_output_tokens: usize,
    /// Prompt tokens served by the prefix cache.
    pub num_cached_tokens: usize,
}

impl RequestOutput {
    /// True on the request's last output.
    pub fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }
}

/// A whole completion, accumulated from a request's outputs.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CompletionOutput {
    /// The request.
    pub request_id: RequestId,
    /// The prompt's token ids.
    pub prompt_token_ids: Vec<TokenId>,
    /// Generated token ids.
    pub token_ids: Vec<TokenId>,
    /// Generated text (stop string removed unless asked for).
    pub text: String,
    /// `stop`, `length`, `abort` or `error` once finished.
    pub finish_reason: Option<FinishReason>,
    /// Log-probabilities per generated token, when asked for.
    #[serde(skip)]
    pub logprobs: Vec<TokenLogprobs>,
    /// The prompt's log-probabilities, when asked for: one per prompt token, the first `None`.
    #[serde(skip)]
    pub prompt_logprobs: Option<PromptLogprobs>,
    /// Prompt tokens served by the prefix cache.
    pub num_cached_tokens: usize,
}

impl CompletionOutput {
    /// An empty completion of `request_id` for `prompt_token_ids`.
    pub fn new(request_id: RequestId, prompt_token_ids: Vec<TokenId>) -> Self {
        Self { request_id, prompt_token_ids, ..Self::default() }
    }

    /// Appends one step's output.
    pub fn extend(&mut self, output: &RequestOutput) {
        self.token_ids.extend_from_slice(&output.new_token_ids);
        self.text.push_str(&output.new_text);
        self.logprobs.extend_from_slice(&output.new_logprobs);
        if output.prompt_logprobs.is_some() {
            self.prompt_logprobs.clone_from(&output.prompt_logprobs);
        }
        self.finish_reason = output.finish_reason.or(self.finish_reason);
        self.num_cached_tokens = output.num_cached_tokens;
    }
}
