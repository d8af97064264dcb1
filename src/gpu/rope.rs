//! RoPE frequency tables, computed in f64 on the CPU and uploaded once per model.

/// Llama 3 style rope scaling (`rope_scaling` with `rope_type: "llama3"` in config.json).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3RopeScaling {
    /// `factor`.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: f64,
}

/// Per-frequency divisors for llama3 rope scaling (what GGUF stores as `rope_freqs`).
pub fn llama3_freq_factors(head_dim: usize, theta: f64, s: &Llama3RopeScaling) -> Vec<f32> {
    let low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    let high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let freq = theta.powf(-2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let scaled = if wavelen < high_wavelen {
                freq
            } else if wavelen > low_wavelen {
                freq / s.factor
            } else {
                let smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor)
                    / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * freq / s.factor + smooth * freq
            };
            (freq / scaled) as f32
        })
        .collect()
}

/// `inv_freq[i] = theta^(-2i / head_dim) / factors[i]` for `i < head_dim / 2`, the table the
/// RoPE kernel reads; `freq_factors` (e.g. from [`llama3_freq_factors`]) default to 1.
pub fn rope_inv_freq(head_dim: usize, theta: f64, freq_factors: Option<&[f32]>) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            let factor = freq_factors.and_then(|f| f.get(i)).map_or(1.0, |&f| f64::from(f));
            (theta.powf(-2.0 * i as f64 / head_dim as f64) / factor) as f32
        })
        .collect()
}
