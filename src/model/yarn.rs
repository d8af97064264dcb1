//! YaRN's rotary frequencies (gpt-oss), as transformers' `_compute_yarn_parameters` makes them.

/// The inverse frequencies of a `head_dim`-wide head with base `theta` under YaRN: frequency
/// `i`'s extrapolated value `θ^(-2i/d)` and interpolated value `θ^(-2i/d) / factor`, blended
/// along a linear ramp over the dimensions `low..high` whose rotations in the original context
/// (`original` tokens) fall from `beta_fast` to `beta_slow` (the bounds rounded outwards when
/// `truncate`): extrapolated below the ramp, interpolated above it.
pub fn yarn_inv_freq(
    head_dim: usize,
    theta: f64,
    factor: f64,
    original: usize,
    betas: (f64, f64),
    truncate: bool,
) -> Vec<f32> {
    let dim = head_dim as f64;
    let correction_dim = |rotations: f64| {
        dim * (original as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (correction_dim(betas.0), correction_dim(betas.1));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001;
    }
    (0..head_dim / 2)
        .map(|i| {
            let pos_freq = theta.powf(2.0 * i as f64 / dim);
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation = 1.0 - ramp;
            let inv = 1.0 / (factor * pos_freq) * (1.0 - extrapolation) + 1.0 / pos_freq * extrapolation;
            inv as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gpt-oss's tiny model (head 16, θ 150000, factor 32 over 4096, β 32/1, no truncation):
    /// transformers 5.24's `inv_freq` (fp32), printed by `_compute_yarn_parameters`.
    #[test]
    fn frequencies_match_transformers() {
        let got = yarn_inv_freq(16, 150000.0, 32.0, 4096, (32.0, 1.0), false);
        let want = TRANSFORMERS_INV_FREQ;
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6 * w.abs(), "{got:?} vs {want:?}");
        }
        // past the ramp both ways: pure extrapolation first, pure interpolation last
        assert_eq!(got[0], 1.0);
        let last = 150000f64.powf(-14.0 / 16.0) / 32.0;
        assert!((f64::from(got[7]) - last).abs() < 1e-6 * last);
    }

    const TRANSFORMERS_INV_FREQ: [f32; 8] = [
        1.0,
        0.225_418,
        0.050_813_27,
        0.006_794_959,
        0.000_456_483_9,
        1.818_833_7e-5,
        4.099_978_5e-6,
        9.242_089_6e-7,
    ];
}
