//! How a request samples its tokens and when it stops.

use serde::{Deserialize, Serialize};

/// Per-request sampling and stopping parameters, with vLLM's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 or -1 keeps all.
    pub top_k: i32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: f32,
    /// Seed for this request's random stream; the same seed repeats the same output.
    pub seed: Option<u64>,
    /// Divides positive (multiplies negative) logits of tokens seen in prompt or output.
    pub repetition_penalty: f32,
    /// Subtracted once from the logits of tokens already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logits of tokens already generated.
    pub frequency_penalty: f32,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Tokens to generate before EOS or stop tokens may end the request.
    pub min_tokens: usize,
    /// Strings that end generation; not part of the output unless `include_stop_str_in_output`.
    pub stop: Vec<String>,
    /// Token ids that end generation.
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past the EOS token.
    pub ignore_eos: bool,
    /// Return this many top log-probabilities per generated token.
    pub logprobs: Option<usize>,
    /// Keep the matched stop string at the end of the text.
    pub include_stop_str_in_output: bool,
    /// Leave special tokens out of the detokenized text.
    pub skip_special_tokens: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            max_tokens: 16,
            min_tokens: 0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            include_stop_str_in_output: false,
            skip_special_tokens: true,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding for `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self { temperature: 0.0, max_tokens, ..Self::default() }
    }

    /// True when this request takes the argmax at every step.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }
}
