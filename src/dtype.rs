//! Element types of stored weights, and the GGUF block quantizations on the CPU.
//!
//! Block layouts are GGUF's, little-endian:
//! - Q8_0: 32 weights in 34 bytes: `d: f16`, `qs: [i8; 32]`; `w = d * q`.
//! - Q4_0: 32 weights in 18 bytes: `d: f16`, `qs: [u8; 16]`; weight `j` is the low nibble of
//!   `qs[j]` for `j < 16` and the high nibble of `qs[j - 16]` otherwise; `w = d * (q - 8)`.
//! - Q4_1: 32 weights in 20 bytes: `d: f16`, `m: f16`, `qs: [u8; 16]` (nibbles as Q4_0);
//!   `w = d * q + m`.

use half::{bf16, f16};

/// Element type of a stored tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 16-bit brain float.
    BF16,
    /// GGUF 8-bit blocks of 32.
    Q8_0,
    /// GGUF 4-bit blocks of 32 with a scale.
    Q4_0,
    /// GGUF 4-bit blocks of 32 with a scale and a minimum.
    Q4_1,
}

/// Weights per quantization block.
pub const QK: usize = 32;

impl DType {
    /// Elements per storage block (1 for plain floats).
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => QK,
        }
    }

    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
        }
    }

    /// True for the GGUF block quantizations.
    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Bytes taken by `n` elements; `None` when `n` is not a whole number of blocks or the
    /// byte count overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_len()) {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    /// The lower-case name (`q4_1`, `f16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
        }
    }
}

/// Decode `bytes` of type `dtype` to f32. `bytes` must hold whole blocks.
pub fn dequantize(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let bb = dtype.block_bytes();
    assert_eq!(bytes.len() % bb, 0, "{} data must hold whole blocks", dtype.name());
    let mut out = Vec::with_capacity(bytes.len() / bb * dtype.block_len());
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    for blk in bytes.chunks_exact(bb) {
        match dtype {
            DType::F32 => out.push(f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]])),
            DType::F16 => out.push(h(blk)),
            DType::BF16 => out.push(bf16::from_le_bytes([blk[0], blk[1]]).to_f32()),
            DType::Q8_0 => {
                let d = h(blk);
                out.extend(blk[2..].iter().map(|&q| d * f32::from(q as i8)));
            }
            DType::Q4_0 | DType::Q4_1 => {
                let d = h(blk);
                let (m, qs) =
                    if dtype == DType::Q4_1 { (h(&blk[2..]), &blk[4..]) } else { (-8.0 * d, &blk[2..]) };
                out.extend(qs.iter().map(|&q| d * f32::from(q & 0x0f) + m));
                out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
            }
        }
    }
    out
}

/// Encode f32 values as `dtype` the way llama.cpp's reference quantizers do.
/// For quantized types `values.len()` must be a multiple of 32.
pub fn quantize(dtype: DType, values: &[f32]) -> Vec<u8> {
    assert_eq!(values.len() % dtype.block_len(), 0, "{} needs whole blocks of {QK}", dtype.name());
    let mut out = Vec::with_capacity(values.len() / dtype.block_len() * dtype.block_bytes());
    for blk in values.chunks_exact(dtype.block_len()) {
        match dtype {
            DType::F32 => out.extend_from_slice(&blk[0].to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(blk[0]).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&bf16::from_f32(blk[0]).to_le_bytes()),
            DType::Q8_0 => {
                let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend(blk.iter().map(|v| (v * id).round() as i8 as u8));
            }
            DType::Q4_0 => {
                let max = blk.iter().fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                let q = |v: f32| ((v * id + 8.5) as u8).min(15);
                out.extend((0..QK / 2).map(|j| q(blk[j]) | (q(blk[j + QK / 2]) << 4)));
            }
            DType::Q4_1 => {
                let min = blk.iter().copied().fold(f32::INFINITY, f32::min);
                let max = blk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                let q = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
                out.extend((0..QK / 2).map(|j| q(blk[j]) | (q(blk[j + QK / 2]) << 4)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_round_trip_error_is_bounded_by_the_step() {
        let values: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 31.5) / 10.0).collect();
        // Q8_0 and Q4_1 round to the nearest step; Q4_0 spans [-8d, 7d], so the extreme of the
        // opposite sign clips by up to one whole step.
        let bounds =
            [(DType::Q8_0, 3.15 / 127.0 / 2.0), (DType::Q4_0, 3.15 / 8.0), (DType::Q4_1, 6.3 / 15.0 / 2.0)];
        for (dtype, max_err) in bounds {
            let bytes = quantize(dtype, &values);
            assert_eq!(bytes.len(), dtype.bytes_for(64).unwrap());
            let back = dequantize(dtype, &bytes);
            for (a, b) in values.iter().zip(&back) {
                assert!((a - b).abs() <= max_err + 1e-3, "{dtype:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn q4_nibble_order_is_low_half_then_high_half() {
        let mut block = vec![0u8; 18];
        block[..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2] = 0x9a; // weight 0 = 0xa - 8 = 2, weight 16 = 0x9 - 8 = 1
        let w = dequantize(DType::Q4_0, &block);
        assert_eq!((w[0], w[16], w[1]), (2.0, 1.0, -8.0));
    }
}
