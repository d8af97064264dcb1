//! Element types of stored weights, and the GGUF block quantizations on the CPU.
//!
//! Block layouts are GGUF's, little-endian:
//! - Q8_0: 32 weights in 34 bytes: `d: f16`, `qs: [i8; 32]`; `w = d * q`.
//! - Q4_0: 32 weights in 18 bytes: `d: f16`, `qs: [u8; 16]`; weight `j` is the low nibble of
//!   `qs[j]` for `j < 16` and the high nibble of `qs[j - 16]` otherwise; `w = d * (q - 8)`.
//! - Q4_1: 32 weights in 20 bytes: `d: f16`, `m: f16`, `qs: [u8; 16]` (nibbles as Q4_0);
//!   `w = d * q + m`.
//! - Q5_0: 32 weights in 22 bytes: `d: f16`, `qh: u32` (bit `j` is weight `j`'s fifth bit),
//!   `qs: [u8; 16]` (low four bits, nibbles as Q4_0); `w = d * (q - 16)`.
//! - Q5_1: 32 weights in 24 bytes: `d: f16`, `m: f16`, then `qh` and `qs` as Q5_0; `w = d * q + m`.
//! - IQ4_NL: 32 weights in 18 bytes: `d: f16`, `qs: [u8; 16]` (nibbles as Q4_0) indexing the
//!   non-linear table [`IQ4_VALUES`]; `w = d * table[q]`.
//! - Q4_K: 256 weights in 144 bytes: `d: f16`, `dmin: f16`, 12 bytes of 6-bit scales and
//!   minimums for eight sub-blocks of 32 ([`k_scale_min`]), `qs: [u8; 128]` (sub-block `j`
//!   is the low nibbles of bytes `32 * (j / 2)..` for even `j`, the high ones for odd `j`);
//!   `w = (d * sc) * q - dmin * m`.
//! - Q5_K: 256 weights in 176 bytes: Q4_K's header, `qh: [u8; 32]` (bit `j` of byte `l` is
//!   the fifth bit of weight `l` of sub-block `j`), then `qs` as Q4_K.
//! - Q2_K: 256 weights in 84 bytes: `scales: [u8; 16]` (per 16 weights: scale in the low
//!   nibble, minimum in the high one), `qs: [u8; 64]`, `d: f16`, `dmin: f16`; weight
//!   `128 h + 32 s + l` is bits `2 s..` of `qs[32 h + l]`; `w = (d * sc) * q - dmin * m`.
//! - Q3_K: 256 weights in 110 bytes: `hmask: [u8; 32]`, `qs: [u8; 64]` (low two bits, as
//!   Q2_K), 12 bytes of 6-bit signed scales per 16 weights, `d: f16`; bit `b` of `hmask[l]`
//!   belongs to weight `32 b + l` and, when clear, subtracts 4; `w = (d * scale) * q`.
//! - IQ4_XS: 256 weights in 136 bytes: `d: f16`, `scales_h: u16`, `scales_l: [u8; 4]` (6-bit
//!   signed scales of eight sub-blocks of 32), `qs: [u8; 128]` (sub-block `j` in bytes
//!   `16 j..`, nibbles as Q4_0) indexing [`IQ4_VALUES`]; `w = (d * scale) * table[q]`.
//! - Q6_K: 256 weights in 210 bytes: `ql: [u8; 128]`, `qh: [u8; 64]`, `scales: [i8; 16]`
//!   (one per 16 weights), `d: f16`; weight `128 h + r` takes nibble `r / 64` of
//!   `ql[64 h + r % 64]` and bits `2 (r / 32)..` of `qh[32 h + r % 32]`;
//!   `w = (d * scale) * (q - 32)`.
//! - MXFP4 (OCP microscaling): 32 weights in 17 bytes: `e: u8` (an E8M0 power of two),
//!   `qs: [u8; 16]` (nibbles as Q4_0: a sign bit and an E2M1 magnitude, read through the
//!   doubled table [`MXFP4_VALUES`]); `w = 2^(e - 128) * table[q]` (ggml's
//!   `GGML_E8M0_TO_FP32_HALF`: half the block's scale, since the table is doubled).

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
    /// GGUF 5-bit blocks of 32 with a scale.
    Q5_0,
    /// GGUF 5-bit blocks of 32 with a scale and a minimum.
    Q5_1,
    /// GGUF 4-bit blocks of 32 indexing a non-linear table.
    IQ4NL,
    /// GGUF 4-bit super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q4K,
    /// GGUF 5-bit super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q5K,
    /// GGUF 6-bit super-blocks of 256 with 8-bit scales per 16 weights.
    Q6K,
    /// GGUF 2-bit super-blocks of 256 with 4-bit scales and minimums per 16 weights.
    Q2K,
    /// GGUF 3-bit super-blocks of 256 with 6-bit scales per 16 weights.
    Q3K,
    /// GGUF 4-bit super-blocks of 256 indexing IQ4_NL's table, 6-bit scales per 32 weights.
    IQ4XS,
    /// OCP MXFP4 (ggml type 39, gpt-oss's experts): 32 E2M1 values and one E8M0 scale a
    /// block, kept so on the GPU (`shaders/wfmt_mxfp4.wgsl`).
    MXFP4,
}

/// Weights per quantization block (the sub-block of the K-quants).
pub const QK: usize = 32;
/// Weights per K-quant super-block.
pub const QK_K: usize = 256;
/// IQ4_NL's and IQ4_XS's non-linear 4-bit values.
pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
/// The E2M1 values of MXFP4's nibbles, doubled (ggml's `kvalues_mxfp4`): a sign bit and
/// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

impl DType {
    /// Every GGUF block quantization pagoda reads (and dequantizes on the CPU).
    pub const QUANTIZED: [DType; 13] = [
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::IQ4NL,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q2K,
        Self::Q3K,
        Self::IQ4XS,
        Self::MXFP4,
    ];

    /// Elements per storage block (1 for plain floats).
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::IQ4NL | Self::MXFP4 => QK,
            Self::Q4K | Self::Q5K | Self::Q6K | Self::Q2K | Self::Q3K | Self::IQ4XS => QK_K,
        }
    }

    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 | Self::IQ4NL => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::IQ4XS => 136,
            Self::MXFP4 => 17,
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
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::IQ4NL => "iq4_nl",
            Self::Q4K => "q4_k",
            Self::Q5K => "q5_k",
            Self::Q6K => "q6_k",
            Self::Q2K => "q2_k",
            Self::Q3K => "q3_k",
            Self::IQ4XS => "iq4_xs",
            Self::MXFP4 => "mxfp4",
        }
    }
}

/// Decode `bytes` of type `dtype` to f32. `bytes` must hold whole blocks. The arithmetic is
/// ggml's, in its order, so results are bit-identical to `gguf.quants.dequantize`.
pub fn dequantize(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let bb = dtype.block_bytes();
    assert_eq!(bytes.len() % bb, 0, "{} data must hold whole blocks", dtype.name());
    let mut out = Vec::with_capacity(bytes.len() / bb * dtype.block_len());
    for blk in bytes.chunks_exact(bb) {
        match dtype {
            DType::F32 => out.push(f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]])),
            DType::F16 => out.push(half_at(blk, 0)),
            DType::BF16 => out.push(bf16::from_le_bytes([blk[0], blk[1]]).to_f32()),
            DType::Q8_0 => {
                let d = half_at(blk, 0);
                out.extend(blk[2..].iter().map(|&q| d * f32::from(q as i8)));
            }
            DType::Q4_0 => {
                let (d, qs) = (half_at(blk, 0), &blk[2..]);
                out.extend(qs.iter().map(|&q| d * f32::from((q & 0x0f) as i8 - 8)));
                out.extend(qs.iter().map(|&q| d * f32::from((q >> 4) as i8 - 8)));
            }
            DType::Q4_1 => {
                let (d, m, qs) = (half_at(blk, 0), half_at(blk, 2), &blk[4..]);
                out.extend(qs.iter().map(|&q| d * f32::from(q & 0x0f) + m));
                out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
            }
            DType::Q5_0 => {
                let (d, qh, qs) = (half_at(blk, 0), u32_at(blk, 2), &blk[6..]);
                out.extend((0..QK).map(|j| d * f32::from(q5_at(qs, qh, j) as i8 - 16)));
            }
            DType::Q5_1 => {
                let (d, m, qh, qs) = (half_at(blk, 0), half_at(blk, 2), u32_at(blk, 4), &blk[8..]);
                out.extend((0..QK).map(|j| d * f32::from(q5_at(qs, qh, j)) + m));
            }
            DType::IQ4NL => {
                let (d, qs) = (half_at(blk, 0), &blk[2..]);
                out.extend(qs.iter().map(|&q| d * f32::from(IQ4_VALUES[usize::from(q & 0x0f)])));
                out.extend(qs.iter().map(|&q| d * f32::from(IQ4_VALUES[usize::from(q >> 4)])));
            }
            DType::Q4K | DType::Q5K => dequantize_q4k_q5k(dtype, blk, &mut out),
            DType::Q6K => dequantize_q6k(blk, &mut out),
            DType::Q2K => dequantize_q2k(blk, &mut out),
            DType::Q3K => dequantize_q3k(blk, &mut out),
            DType::IQ4XS => dequantize_iq4xs(blk, &mut out),
            DType::MXFP4 => {
                let (d, qs) = (e8m0_half(blk[0]), &blk[1..]);
                out.extend(qs.iter().map(|&q| d * f32::from(MXFP4_VALUES[usize::from(q & 0x0f)])));
                out.extend(qs.iter().map(|&q| d * f32::from(MXFP4_VALUES[usize::from(q >> 4)])));
            }
        }
    }
    out
}

/// The f16 at byte `at`, widened.
fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Half the E8M0 scale `e` (2^(e - 127) / 2), as ggml's `GGML_E8M0_TO_FP32_HALF` makes it:
/// subnormal for `e` 0 and 1, and 2^127 (not NaN) for `e` 255.
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// The little-endian u32 at byte `at`.
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Weight `j` (0..32) of a Q5 block: nibble as Q4_0 plus bit `j` of `qh` as the fifth bit.
fn q5_at(qs: &[u8], qh: u32, j: usize) -> u8 {
    let low = if j < QK / 2 { qs[j] & 0x0f } else { qs[j - QK / 2] >> 4 };
    low | ((((qh >> j) & 1) as u8) << 4)
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) from the 12 packed bytes of Q4_K/Q5_K.
pub fn k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

fn dequantize_q4k_q5k(dtype: DType, blk: &[u8], out: &mut Vec<f32>) {
    let (d, dmin, scales) = (half_at(blk, 0), half_at(blk, 2), &blk[4..16]);
    let (qh, qs) = if dtype == DType::Q5K { (Some(&blk[16..48]), &blk[48..]) } else { (None, &blk[16..]) };
    for j in 0..QK_K / QK {
        let (sc, m) = k_scale_min(scales, j);
        let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
        let bytes = &qs[QK * (j / 2)..QK * (j / 2 + 1)];
        for (l, &byte) in bytes.iter().enumerate() {
            let low = if j % 2 == 0 { byte & 0x0f } else { byte >> 4 };
            let high = qh.map_or(0, |qh| ((qh[l] >> j) & 1) << 4);
            out.push(dl * f32::from(low | high) - ml);
        }
    }
}

/// Bits `2 s..2 s + 1` of the Q2_K/Q3_K low-bit array `qs` for weight `i` (0..256).
fn q2_at(qs: &[u8], i: usize) -> u8 {
    let (h, s, l) = (i / 128, i % 128 / 32, i % 32);
    (qs[32 * h + l] >> (2 * s)) & 3
}

fn dequantize_q2k(blk: &[u8], out: &mut Vec<f32>) {
    let (scales, qs, d, dmin) = (&blk[..16], &blk[16..80], half_at(blk, 80), half_at(blk, 82));
    for i in 0..QK_K {
        let sc = scales[i / 16];
        let (dl, ml) = (d * f32::from(sc & 0x0f), dmin * f32::from(sc >> 4));
        out.push(dl * f32::from(q2_at(qs, i)) - ml);
    }
}

/// The signed 6-bit scale of weights `16 k..16 k + 15` from Q3_K's 12 packed bytes.
pub fn q3k_scale(scales: &[u8], k: usize) -> i8 {
    let low = (scales[k % 8] >> (4 * (k / 8))) & 0x0f;
    let high = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
    (low | (high << 4)) as i8 - 32
}

fn dequantize_q3k(blk: &[u8], out: &mut Vec<f32>) {
    let (hmask, qs, scales, d) = (&blk[..32], &blk[32..96], &blk[96..108], half_at(blk, 108));
    for i in 0..QK_K {
        let dl = d * f32::from(q3k_scale(scales, i / 16));
        let high_clear = ((hmask[i % 32] >> (i / 32)) & 1) ^ 1;
        let q = q2_at(qs, i) as i8 - ((high_clear << 2) as i8);
        out.push(dl * f32::from(q));
    }
}

/// The signed 6-bit scale of IQ4_XS sub-block `j` (0..8).
pub fn iq4xs_scale(scales_h: u16, scales_l: &[u8], j: usize) -> i8 {
    let low = (scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
    let high = ((scales_h >> (2 * j)) & 3) as u8;
    (low | (high << 4)) as i8 - 32
}

fn dequantize_iq4xs(blk: &[u8], out: &mut Vec<f32>) {
    let (d, scales_h, scales_l, qs) =
        (half_at(blk, 0), u16::from_le_bytes([blk[2], blk[3]]), &blk[4..8], &blk[8..]);
    for j in 0..QK_K / QK {
        let dl = d * f32::from(iq4xs_scale(scales_h, scales_l, j));
        let sub = &qs[16 * j..16 * (j + 1)];
        out.extend(sub.iter().map(|&q| dl * f32::from(IQ4_VALUES[usize::from(q & 0x0f)])));
        out.extend(sub.iter().map(|&q| dl * f32::from(IQ4_VALUES[usize::from(q >> 4)])));
    }
}

fn dequantize_q6k(blk: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, scales, d) = (&blk[..128], &blk[128..192], &blk[192..208], half_at(blk, 208));
    for i in 0..QK_K {
        let (h, r) = (i / 128, i % 128);
        let low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
        let high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        let q = (low | (high << 4)) as i8 - 32;
        out.push(d * f32::from(scales[i / 16] as i8) * f32::from(q));
    }
}

/// Encode f32 values as `dtype`: Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 the way llama.cpp's
/// reference quantizers do; IQ4_NL and the K-quants by plain round-to-nearest at scales
/// from each block's range (llama.cpp searches for better scales; the layout is the same).
/// `values.len()` must be a multiple of the block length.
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
                let max = signed_max(blk);
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
            DType::Q5_0 => {
                let max = signed_max(blk);
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                let q: Vec<u8> = blk.iter().map(|v| ((v * id + 16.5) as u8).min(31)).collect();
                push_q5(&q, &mut out);
            }
            DType::Q5_1 => {
                let min = blk.iter().copied().fold(f32::INFINITY, f32::min);
                let max = blk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = (max - min) / 31.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                let q: Vec<u8> = blk.iter().map(|v| (((v - min) * id + 0.5) as u8).min(31)).collect();
                push_q5(&q, &mut out);
            }
            DType::IQ4NL => {
                let max = signed_max(blk);
                let d = max / -127.0;
                let dh = f16::from_f32(d);
                out.extend_from_slice(&dh.to_le_bytes());
                let q = |v: f32| nearest_iq4(v, dh.to_f32());
                out.extend((0..QK / 2).map(|j| q(blk[j]) | (q(blk[j + QK / 2]) << 4)));
            }
            DType::Q4K | DType::Q5K => quantize_q4k_q5k(dtype, blk, &mut out),
            DType::Q6K => quantize_q6k(blk, &mut out),
            DType::Q2K => quantize_q2k(blk, &mut out),
            DType::Q3K => quantize_q3k(blk, &mut out),
            DType::IQ4XS => quantize_iq4xs(blk, &mut out),
            DType::MXFP4 => quantize_mxfp4(blk, &mut out),
        }
    }
    out
}

/// Appends a Q5 block's `qh` (fifth bits) and `qs` (low nibbles) for the 32 levels `q`.
fn push_q5(q: &[u8], out: &mut Vec<u8>) {
    let qh = q.iter().enumerate().fold(0u32, |qh, (j, &q)| qh | (u32::from(q >> 4) << j));
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend((0..QK / 2).map(|j| (q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4)));
}

/// The index of the IQ4 table value nearest to `v / d`.
fn nearest_iq4(v: f32, d: f32) -> u8 {
    let x = if d != 0.0 { v / d } else { 0.0 };
    let distance = |i: usize| (f32::from(IQ4_VALUES[i]) - x).abs();
    (0..16).min_by(|&a, &b| distance(a).total_cmp(&distance(b))).unwrap_or(0) as u8
}

/// A value rounded to `0..=max` levels.
fn level(x: f32, max: u8) -> u8 {
    x.round().clamp(0.0, f32::from(max)) as u8
}

fn quantize_q4k_q5k(dtype: DType, blk: &[f32], out: &mut Vec<u8>) {
    let max_q: u8 = if dtype == DType::Q5K { 31 } else { 15 };
    let subs: Vec<&[f32]> = blk.chunks_exact(QK).collect();
    let ranges: Vec<(f32, f32)> = subs
        .iter()
        .map(|sub| {
            let min = sub.iter().copied().fold(0f32, f32::min);
            let max = sub.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            ((max - min) / f32::from(max_q), -min)
        })
        .collect();
    let d = f16::from_f32(ranges.iter().fold(0f32, |a, r| a.max(r.0)) / 63.0);
    let dmin = f16::from_f32(ranges.iter().fold(0f32, |a, r| a.max(r.1)) / 63.0);
    let sixbit = |x: f32, unit: f16| if unit.to_f32() > 0.0 { level(x / unit.to_f32(), 63) } else { 0 };
    let sc: Vec<u8> = ranges.iter().map(|r| sixbit(r.0, d)).collect();
    let m: Vec<u8> = ranges.iter().map(|r| sixbit(r.1, dmin)).collect();
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&dmin.to_le_bytes());
    out.extend((0..4).map(|j| sc[j] | ((sc[j + 4] >> 4) << 6)));
    out.extend((0..4).map(|j| m[j] | ((m[j + 4] >> 4) << 6)));
    out.extend((0..4).map(|j| (sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4)));
    let q: Vec<Vec<u8>> = subs
        .iter()
        .enumerate()
        .map(|(j, sub)| {
            let (dl, ml) = (d.to_f32() * f32::from(sc[j]), dmin.to_f32() * f32::from(m[j]));
            sub.iter().map(|&v| if dl > 0.0 { level((v + ml) / dl, max_q) } else { 0 }).collect()
        })
        .collect();
    if dtype == DType::Q5K {
        out.extend((0..QK).map(|l| (0..8).fold(0u8, |qh, j| qh | (((q[j][l] >> 4) & 1) << j))));
    }
    for pair in q.chunks_exact(2) {
        out.extend((0..QK).map(|l| (pair[0][l] & 0x0f) | ((pair[1][l] & 0x0f) << 4)));
    }
}

/// The value of largest magnitude, with its sign.
fn signed_max(values: &[f32]) -> f32 {
    values.iter().fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a })
}

/// A signed scale for each group (`max / levels`), an f16 super-scale over them, and each
/// group's scale in `-32..=31` units of it.
fn six_bit_scales(groups: &[f32], levels: f32) -> (f16, Vec<i8>) {
    let scale_f: Vec<f32> = groups.iter().map(|&g| g / levels).collect();
    let d = f16::from_f32(scale_f.iter().fold(0f32, |a, v| a.max(v.abs())) / 31.0);
    let unit = d.to_f32();
    let scales =
        scale_f.iter().map(|&s| if unit > 0.0 { (s / unit).round().clamp(-32.0, 31.0) as i8 } else { 0 });
    (d, scales.collect())
}

fn quantize_q2k(blk: &[f32], out: &mut Vec<u8>) {
    let ranges: Vec<(f32, f32)> = blk
        .chunks_exact(16)
        .map(|g| {
            let min = g.iter().copied().fold(0f32, f32::min);
            let max = g.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            ((max - min) / 3.0, -min)
        })
        .collect();
    let d = f16::from_f32(ranges.iter().fold(0f32, |a, r| a.max(r.0)) / 15.0);
    let dmin = f16::from_f32(ranges.iter().fold(0f32, |a, r| a.max(r.1)) / 15.0);
    let four_bit = |x: f32, unit: f16| if unit.to_f32() > 0.0 { level(x / unit.to_f32(), 15) } else { 0 };
    let scales: Vec<(u8, u8)> = ranges.iter().map(|r| (four_bit(r.0, d), four_bit(r.1, dmin))).collect();
    out.extend(scales.iter().map(|&(sc, m)| sc | (m << 4)));
    let q: Vec<u8> = blk
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (sc, m) = scales[i / 16];
            let (dl, ml) = (d.to_f32() * f32::from(sc), dmin.to_f32() * f32::from(m));
            if dl > 0.0 { level((v + ml) / dl, 3) } else { 0 }
        })
        .collect();
    out.extend(pack_q2(&q));
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&dmin.to_le_bytes());
}

/// The Q2_K/Q3_K low-bit array of 256 two-bit values (inverse of `q2_at`).
fn pack_q2(q: &[u8]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for (i, &q) in q.iter().enumerate() {
        let (h, s, l) = (i / 128, i % 128 / 32, i % 32);
        qs[32 * h + l] |= (q & 3) << (2 * s);
    }
    qs
}

fn quantize_q3k(blk: &[f32], out: &mut Vec<u8>) {
    let groups: Vec<f32> = blk.chunks_exact(16).map(signed_max).collect();
    let (d, scales) = six_bit_scales(&groups, -4.0);
    let u: Vec<u8> = blk
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let unit = d.to_f32() * f32::from(scales[i / 16]);
            let q = if unit != 0.0 { (v / unit).round().clamp(-4.0, 3.0) } else { 0.0 };
            (q + 4.0) as u8
        })
        .collect();
    let mut hmask = [0u8; 32];
    for (i, &u) in u.iter().enumerate() {
        hmask[i % 32] |= (u >> 2) << (i / 32);
    }
    out.extend_from_slice(&hmask);
    out.extend(pack_q2(&u));
    let stored: Vec<u8> = scales.iter().map(|&s| (s + 32) as u8).collect();
    out.extend((0..8).map(|i| (stored[i] & 0x0f) | ((stored[i + 8] & 0x0f) << 4)));
    out.extend((0..4).map(|i| (0..4).fold(0u8, |b, t| b | ((stored[i + 4 * t] >> 4) << (2 * t)))));
    out.extend_from_slice(&d.to_le_bytes());
}

fn quantize_iq4xs(blk: &[f32], out: &mut Vec<u8>) {
    let groups: Vec<f32> = blk.chunks_exact(QK).map(signed_max).collect();
    let (d, scales) = six_bit_scales(&groups, -127.0);
    let stored: Vec<u8> = scales.iter().map(|&s| (s + 32) as u8).collect();
    let scales_h = stored.iter().enumerate().fold(0u16, |h, (j, &s)| h | (u16::from(s >> 4) << (2 * j)));
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend((0..4).map(|j| (stored[2 * j] & 0x0f) | ((stored[2 * j + 1] & 0x0f) << 4)));
    for (j, sub) in blk.chunks_exact(QK).enumerate() {
        let dl = d.to_f32() * f32::from(scales[j]);
        let q = |v: f32| nearest_iq4(v, dl);
        out.extend((0..QK / 2).map(|l| q(sub[l]) | (q(sub[l + QK / 2]) << 4)));
    }
}

/// ggml's `quantize_row_mxfp4_ref`: the scale from the block's largest magnitude
/// (`floor(log2 amax) - 2` as the exponent), each weight the nearest table value (the first
/// of equals).
fn quantize_mxfp4(blk: &[f32], out: &mut Vec<u8>) {
    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
    let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
    let d = e8m0_half(e);
    let nearest = |x: f32| {
        let error = |i: usize| (f32::from(MXFP4_VALUES[i]) * d - x).abs();
        (1..16).fold(0, |best, i| if error(i) < error(best) { i } else { best }) as u8
    };
    out.push(e);
    out.extend((0..QK / 2).map(|j| nearest(blk[j]) | (nearest(blk[j + QK / 2]) << 4)));
}

fn quantize_q6k(blk: &[f32], out: &mut Vec<u8>) {
    let group_max: Vec<f32> = blk.chunks_exact(16).map(signed_max).collect();
    let amax = group_max.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = f16::from_f32(amax / 32.0 / 127.0);
    let scales: Vec<i8> =
        group_max
            .iter()
            .map(|g| {
                if d.to_f32() > 0.0 {
                    (g.abs() / 32.0 / d.to_f32()).round().clamp(0.0, 127.0) as i8
                } else {
                    0
                }
            })
            .collect();
    let q: Vec<u8> = blk
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let unit = d.to_f32() * f32::from(scales[i / 16]);
            let x = if unit > 0.0 { (v / unit).round().clamp(-32.0, 31.0) } else { 0.0 };
            (x as i8 + 32) as u8
        })
        .collect();
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for (i, &q) in q.iter().enumerate() {
        let (h, r) = (i / 128, i % 128);
        ql[64 * h + r % 64] |= (q & 0x0f) << (4 * (r / 64));
        qh[32 * h + r % 32] |= (q >> 4) << (2 * (r / 32));
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(scales.iter().map(|&s| s as u8));
    out.extend_from_slice(&d.to_le_bytes());
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

    #[test]
    fn mxfp4_scale_is_half_the_e8m0_power_and_nibbles_index_the_doubled_table() {
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(255), 2f32.powi(127));
        let mut block = vec![0u8; 17];
        block[0] = 129; // scale 2^2, halved: 2
        block[1] = 0x97; // weight 0 = 2 * 12, weight 16 = 2 * -1
        block[16] = 0xf8; // weight 15 = 2 * -0 (zero), weight 31 = 2 * -12
        let w = dequantize(DType::MXFP4, &block);
        assert_eq!((w[0], w[16], w[15], w[31], w[1]), (24.0, -2.0, 0.0, -24.0, 0.0));
    }
}
