//! What one HTTP request may ask of the server: body size, sequences, tokens, stop strings
//! and token biases. Each limit past which a request is refused (413 for the body, 400 for the
//! rest) before it reaches the engine.

use axum::http::StatusCode;

use super::error::ApiError;
use crate::sampling::SamplingParams;

/// Caps on a single request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest request body in bytes (413 past it).
    pub max_body_bytes: usize,
    /// Most sequences one request may start: prompts × `n`.
    pub max_sequences: usize,
    /// Most tokens one request may ask to generate: prompts × `n` × `max_tokens`.
    pub max_requested_tokens: usize,
    /// Most stop strings.
    pub max_stop_strings: usize,
    /// Longest stop string, in bytes.
    pub max_stop_string_bytes: usize,
    /// Most stop token ids.
    pub max_stop_token_ids: usize,
    /// Most `logit_bias` entries.
    pub max_logit_bias: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl ServerLimits {
    /// The limits `pagoda serve` starts with: a 4 MiB body, 256 sequences, 2^20 tokens,
    /// 64 stop strings of at most 1 KiB, 1024 stop token ids, 1024 `logit_bias` entries.
    pub const DEFAULT: Self = Self {
        max_body_bytes: 4 << 20,
        max_sequences: 256,
        max_requested_tokens: 1 << 20,
        max_stop_strings: 64,
        max_stop_string_bytes: 1024,
        max_stop_token_ids: 1024,
        max_logit_bias: 1024,
    };

    /// A 400 when `num_prompts` prompts of `n` choices with `params` ask for too much.
    pub fn check(&self, num_prompts: usize, n: usize, params: &SamplingParams) -> Result<(), ApiError> {
        let sequences = num_prompts.saturating_mul(n);
        if sequences > self.max_sequences {
            return Err(ApiError::bad_request(
                format!(
                    "{num_prompts} prompts × n = {n} make {sequences} sequences, more than the {} one request may start",
                    self.max_sequences
                ),
                "n",
            ));
        }
        let tokens = sequences.saturating_mul(params.max_tokens);
        if tokens > self.max_requested_tokens {
            return Err(ApiError::bad_request(
                format!(
                    "{sequences} sequences × max_tokens = {} ask for {tokens} tokens, more than the {} one request may",
                    params.max_tokens, self.max_requested_tokens
                ),
                "max_tokens",
            ));
        }
        at_most(params.stop.len(), self.max_stop_strings, "stop strings", "stop")?;
        if let Some(stop) = params.stop.iter().find(|stop| stop.len() > self.max_stop_string_bytes) {
            return Err(ApiError::bad_request(
                format!(
                    "a stop string of {} bytes is longer than the {} allowed",
                    stop.len(),
                    self.max_stop_string_bytes
                ),
                "stop",
            ));
        }
        at_most(params.stop_token_ids.len(), self.max_stop_token_ids, "stop token ids", "stop_token_ids")?;
        at_most(params.logit_bias.len(), self.max_logit_bias, "logit_bias entries", "logit_bias")
    }

    /// The 413 for a body over `max_body_bytes`.
    pub fn body_too_large(&self) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body exceeds the limit of {} bytes", self.max_body_bytes),
        )
    }
}

/// A 400 naming `param` when `count` `what` are more than `limit`.
fn at_most(count: usize, limit: usize, what: &str, param: &str) -> Result<(), ApiError> {
    if count > limit {
        return Err(ApiError::bad_request(format!("{count} {what}, more than the {limit} allowed"), param));
    }
    Ok(())
}
