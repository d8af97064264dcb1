//! Load or recompute: the measured price of copying blocks back from host memory against
//! the measured price of prefilling their tokens again.

/// What one executed step cost, as the executor measured (or, simulated, modelled) it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTiming {
    /// Tokens computed in the step.
    pub compute_tokens: usize,
    /// Seconds the forward pass took.
    pub compute_s: f64,
    /// Bytes copied from host memory into KV blocks.
    pub load_bytes: u64,
    /// Bytes copied from KV blocks into host memory.
    pub store_bytes: u64,
    /// Seconds the host copies took (loads and stores).
    pub copy_s: f64,
}

/// Running estimates of copy bandwidth and prefill time per token (exponentially weighted
/// averages of the executor's measurements, seeded with priors).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferCost {
    bytes_per_block: u64,
    copy_bytes_per_s: f64,
    copy_latency_s: f64,
    prefill_s_per_token: f64,
}

/// Weight of a new measurement in the running averages.
const SMOOTHING: f64 = 0.2;

impl TransferCost {
    /// Priors until measured: PCIe-class 8 GB/s with 20 µs per copy, 50 µs per token.
    pub fn new(bytes_per_block: u64) -> Self {
        Self { bytes_per_block, copy_bytes_per_s: 8e9, copy_latency_s: 20e-6, prefill_s_per_token: 50e-6 }
    }

    /// Seconds to load `num_blocks` blocks back.
    pub fn load_seconds(&self, num_blocks: usize) -> f64 {
        if num_blocks == 0 {
            return 0.0;
        }
        self.copy_latency_s + (num_blocks as u64 * self.bytes_per_block) as f64 / self.copy_bytes_per_s
    }

    /// Seconds to prefill `num_tokens` tokens again.
    pub fn recompute_seconds(&self, num_tokens: usize) -> f64 {
        self.prefill_s_per_token * num_tokens as f64
    }

    /// True when loading `num_blocks` blocks of `block_size` tokens beats recomputing them.
    pub fn prefers_load(&self, num_blocks: usize, block_size: usize) -> bool {
        num_blocks > 0 && self.load_seconds(num_blocks) < self.recompute_seconds(num_blocks * block_size)
    }

    /// Folds one step's measurements in; steps without copies or tokens leave that
    /// estimate alone.
    pub fn observe(&mut self, timing: &StepTiming) {
        let blend = |old: f64, new: f64| old + SMOOTHING * (new - old);
        let bytes = timing.load_bytes + timing.store_bytes;
        let copy_s = timing.copy_s - self.copy_latency_s;
        if bytes > 0 && copy_s > 0.0 {
            self.copy_bytes_per_s = blend(self.copy_bytes_per_s, bytes as f64 / copy_s);
        }
        if timing.compute_tokens > 0 && timing.compute_s > 0.0 {
            let per_token = timing.compute_s / timing.compute_tokens as f64;
            self.prefill_s_per_token = blend(self.prefill_s_per_token, per_token);
        }
    }

    /// The current copy bandwidth estimate, bytes per second.
    pub fn copy_bytes_per_s(&self) -> f64 {
        self.copy_bytes_per_s
    }

    /// The current prefill time estimate, seconds per token.
    pub fn prefill_s_per_token(&self) -> f64 {
        self.prefill_s_per_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_copy_makes_recompute_win_and_a_fast_one_makes_load_win() {
        let mut cost = TransferCost::new(1 << 20);
        assert!(cost.prefers_load(4, 16), "1 MiB at 8 GB/s beats 16 tokens at 50 µs");
        for _ in 0..60 {
            cost.observe(&StepTiming {
                compute_tokens: 1000,
                compute_s: 1e-3,
                load_bytes: 1 << 20,
                store_bytes: 0,
                copy_s: 1.0,
            });
        }
        assert!(cost.copy_bytes_per_s() < 2e6, "{}", cost.copy_bytes_per_s());
        assert!((cost.prefill_s_per_token() - 1e-6).abs() < 1e-7);
        assert!(!cost.prefers_load(4, 16));
        assert!(!cost.prefers_load(0, 16));
    }
}
