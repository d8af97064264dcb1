//! The token-budget scheduler's knobs (vLLM's `SchedulerConfig`): budgets, admission and
//! preemption order, and the reaction to invalid KV blocks.

use serde::{Deserialize, Serialize};

use crate::core::spec_decode::SpeculativeConfig;

/// Which waiting request runs first and which running request is preempted first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SchedulingPolicy {
    /// First come, first served; the newest running request is preempted first.
    #[default]
    Fcfs,
    /// Lowest `(priority, arrival)` first; the largest one is preempted first.
    Priority,
}

/// What to do with requests whose KV blocks were found invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvalidBlockPolicy {
    /// Truncate the computed tokens to the first bad block and recompute from there.
    #[default]
    Recompute,
    /// Finish the affected requests with an error.
    Fail,
}

/// The token-budget scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// Tokens computed in one step, summed over all requests.
    pub max_num_batched_tokens: usize,
    /// Requests running at once.
    pub max_num_seqs: usize,
    /// Longest sequence (prompt + output) a request may reach.
    pub max_model_len: usize,
    /// Cut prefills that do not fit the remaining budget into chunks.
    pub enable_chunked_prefill: bool,
    /// Most prompt tokens one request may take in one step; 0 means no limit.
    pub long_prefill_token_threshold: usize,
    /// Admission and preemption order.
    pub policy: SchedulingPolicy,
    /// Reaction to KV blocks reported invalid.
    pub invalid_block_policy: InvalidBlockPolicy,
    /// Speculative decoding (`--speculative-config`); `None` decodes one token per step.
    #[serde(default)]
    pub speculative_config: Option<SpeculativeConfig>,
    /// Schedule one step ahead (`--async-scheduling`, vLLM's `AsyncScheduler`): a running
    /// request's next step may be scheduled before the token of its step in flight is known
    /// (it holds an output placeholder). Off with speculative decoding.
    #[serde(default = "default_async_scheduling")]
    pub async_scheduling: bool,
}

fn default_async_scheduling() -> bool {
    true
}

impl SchedulerConfig {
    /// Tokens per step unless set.
    pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 2048;
    /// Requests running at once unless set (vLLM's default).
    pub const DEFAULT_MAX_NUM_SEQS: usize = 256;
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_num_batched_tokens: Self::DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs: Self::DEFAULT_MAX_NUM_SEQS,
            max_model_len: 8192,
            enable_chunked_prefill: true,
            long_prefill_token_threshold: 0,
            policy: SchedulingPolicy::Fcfs,
            invalid_block_policy: InvalidBlockPolicy::Recompute,
            speculative_config: None,
            async_scheduling: true,
        }
    }
}
