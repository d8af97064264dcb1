//! What one HTTP request may ask of the server: body size, sequences, tokens and stop
//! strings. Each limit past which a request is refused (413 for the body, 400 for the
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
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl ServerLimits {
    /// The limits `pagoda serve` starts with: a 4 MiB body, 256 sequences, 2^20 tokens,
    /// 64 stop strings of at most 1 KiB, 1024 stop token ids.
    pub const DEFAULT: Self = Self {
        max_body_bytes: 4 << 20,
        max_sequences: 256,
        max_requested_tokens: 1 << 20,
        max_stop_strings: 64,
        max_stop_string_bytes: 1024,
        max_stop_token_ids: 1024,
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
        if params.stop.len() > self.max_stop_strings {
            return Err(ApiError::bad_request(
                format!(
                    "{} stop strings, more than the {} allowed",
                    params.stop.len(),
                    self.max_stop_strings
                ),
                "stop",
            ));
        }
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
        if params.stop_token_ids.len() > self.max_stop_token_ids {
            return Err(ApiError::bad_request(
                format!(
                    "{} stop token ids, more than the {} allowed",
                    params.stop_token_ids.len(),
                    self.max_stop_token_ids
                ),
                "stop_token_ids",
            ));
        }
        Ok(())
    }

    /// The 413 for a body over `max_body_bytes`.
    pub fn body_too_large(&self) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body exceeds the limit of {} bytes", self.max_body_bytes),
        )
    }
}
