//! Scheduler counters and gauges.

use serde::{Deserialize, Serialize};

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
}
