//! Scheduler counters and gauges.

use serde::{Deserialize, Serialize};

use crate::core::spec_decode::MAX_NUM_SPECULATIVE_TOKENS;

/// Prefix-cache lookups, counted in tokens, as vLLM counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCacheStats {
    /// Lookups (one per admitted request; none while prefix caching is off).
    pub requests: u64,
    /// Tokens looked up.
    pub queries: u64,
    /// Tokens found in the cache.
    pub hits: u64,
}

impl PrefixCacheStats {
    /// Records one lookup of `queries` tokens of which `hits` were cached.
    pub fn record(&mut self, queries: usize, hits: usize) {
        self.requests += 1;
        self.queries += queries as u64;
        self.hits += hits as u64;
    }

    /// Hits over queries, 0 when nothing was looked up.
    pub fn hit_rate(&self) -> f64 {
        if self.queries == 0 { 0.0 } else { self.hits as f64 / self.queries as f64 }
    }
}

/// Speculative decoding's counters, under vLLM's names (`spec_decode_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDecodingStats {
    /// Verify passes that carried proposals (one per request and step).
    pub num_drafts: u64,
    /// Tokens proposed and verified.
    pub num_draft_tokens: u64,
    /// Proposed tokens accepted.
    pub num_accepted_tokens: u64,
    /// Accepted tokens by their position in the proposal (0 = the first proposed token).
    pub num_accepted_tokens_per_pos: [u64; MAX_NUM_SPECULATIVE_TOKENS],
}

impl SpecDecodingStats {
    /// Records one verified proposal of `num_draft_tokens` tokens, `num_accepted` of them
    /// (a prefix) accepted.
    pub fn record(&mut self, num_draft_tokens: usize, num_accepted: usize) {
        self.num_drafts += 1;
        self.num_draft_tokens += num_draft_tokens as u64;
        self.num_accepted_tokens += num_accepted as u64;
        for slot in self.num_accepted_tokens_per_pos.iter_mut().take(num_accepted) {
            *slot += 1;
        }
    }

    /// The counts of `self` since `before` (an earlier reading of the same counters).
    pub fn since(&self, before: &Self) -> Self {
        let mut per_pos = self.num_accepted_tokens_per_pos;
        for (slot, earlier) in per_pos.iter_mut().zip(before.num_accepted_tokens_per_pos) {
            *slot -= earlier;
        }
        Self {
            num_drafts: self.num_drafts - before.num_drafts,
            num_draft_tokens: self.num_draft_tokens - before.num_draft_tokens,
            num_accepted_tokens: self.num_accepted_tokens - before.num_accepted_tokens,
            num_accepted_tokens_per_pos: per_pos,
        }
    }

    /// Accepted over proposed tokens, 0 when nothing was proposed.
    pub fn acceptance_rate(&self) -> f64 {
        if self.num_draft_tokens == 0 {
            0.0
        } else {
            self.num_accepted_tokens as f64 / self.num_draft_tokens as f64
        }
    }

    /// Tokens a verify pass yields on average: the accepted ones plus the one it samples
    /// (vLLM's mean acceptance length); 0 when nothing was proposed.
    pub fn mean_acceptance_length(&self) -> f64 {
        if self.num_drafts == 0 {
            0.0
        } else {
            1.0 + self.num_accepted_tokens as f64 / self.num_drafts as f64
        }
    }
}

/// What the scheduler reports about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStats {
    /// Requests in the running queue.
    pub num_running: usize,
    /// Requests in the waiting queue (preempted ones included).
    pub num_waiting: usize,
    /// Fraction of usable blocks not free, 0..=1.
    pub kv_cache_usage: f64,
    /// Highest `kv_cache_usage` seen after any step.
    pub peak_kv_cache_usage: f64,
    /// Lookups by requests admitted for the first time.
    pub prefix_cache: PrefixCacheStats,
    /// Lookups by requests resuming after preemption, counted apart.
    pub preempted_prefix_cache: PrefixCacheStats,
    /// Preemptions so far.
    pub num_preemptions: u64,
    /// Tokens whose K/V had been computed once and had to be computed again (after a
    /// preemption, minus what came back from the cache, or after invalid blocks).
    pub num_recomputed_tokens: u64,
    /// Steps scheduled so far.
    pub num_steps: u64,
    /// Requests finished so far (aborted and failed included).
    pub num_finished: u64,
    /// Tokens generated so far.
    pub num_generated_tokens: u64,
    /// The host KV tier's counters, when it is on (`--kv-offloading-size`).
    #[serde(default)]
    pub host_tier: Option<crate::core::host_tier::HostTierStats>,
    /// Speculative decoding's proposals and acceptances.
    #[serde(default)]
    pub spec_decoding: SpecDecodingStats,
}
