//! Request-level metrics the engine records: token counters, finish reasons and latency
//! histograms, with vLLM's bucket boundaries so its dashboards read them unchanged.

use serde::Serialize;

use crate::core::metrics::SchedulerStats;
use crate::core::request::FinishReason;
use crate::engine::overlap::HostOverlap;

/// vLLM's time-to-first-token buckets, in seconds.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency buckets, in seconds.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
/// vLLM's end-to-end request latency buckets, in seconds.
pub const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];

/// A cumulative histogram with fixed upper bounds (Prometheus semantics).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    /// Upper bounds of the buckets, ascending; `+Inf` is implied after the last.
    pub bounds: &'static [f64],
    /// Observations `<=` each bound (cumulative), one per bound.
    pub cumulative_counts: Vec<u64>,
    /// Sum of all observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, cumulative_counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    /// Records one observation.
    pub fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.cumulative_counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

/// Finished requests per reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FinishCounts {
    /// EOS, stop token or stop string.
    pub stop: u64,
    /// `max_tokens` or `max_model_len`.
    pub length: u64,
    /// Aborted.
    pub abort: u64,
    /// Failed.
    pub error: u64,
}

impl FinishCounts {
    /// Counts one finished request.
    pub fn record(&mut self, reason: FinishReason) {
        match reason {
            FinishReason::Stop => self.stop += 1,
            FinishReason::Length => self.length += 1,
            FinishReason::Abort => self.abort += 1,
            FinishReason::Error => self.error += 1,
        }
    }
}

/// Everything the engine measures, as one plain snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineMetrics {
    /// Prompt tokens of requests whose prefill completed.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generation_tokens: u64,
    /// Finished requests by reason.
    pub finished: FinishCounts,
    /// Seconds from arrival to the first token.
    pub time_to_first_token: Histogram,
    /// Seconds between consecutive tokens of a request.
    pub inter_token_latency: Histogram,
    /// Seconds from arrival to finish.
    pub e2e_request_latency: Histogram,
    /// The scheduler's own counters and gauges after the last step.
    pub scheduler: SchedulerStats,
    /// The engine's host time per step, hidden behind the executor's steps or exposed.
    pub host_overlap: HostOverlap,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        Self {
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: FinishCounts::default(),
            time_to_first_token: Histogram::new(TTFT_BUCKETS),
            inter_token_latency: Histogram::new(ITL_BUCKETS),
            e2e_request_latency: Histogram::new(E2E_BUCKETS),
            scheduler: SchedulerStats::default(),
            host_overlap: HostOverlap::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_are_cumulative() {
        let mut histogram = Histogram::new(&[0.1, 1.0]);
        histogram.observe(0.05);
        histogram.observe(0.5);
        histogram.observe(3.0);
        assert_eq!(histogram.cumulative_counts, vec![1, 2]);
        assert_eq!(histogram.count, 3);
        assert!((histogram.sum - 3.55).abs() < 1e-12);
    }
}
