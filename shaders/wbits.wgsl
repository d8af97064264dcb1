// Bit fields of the quantized weight formats, four weights at a time (one per byte of a word).

// 4-bit values starting at bit `shift` of each byte (0: low nibbles, 4: high nibbles).
fn q4_nibbles(w: u32, shift: u32) -> vec4<f32> {
    let v = w >> shift;
    return vec4<f32>(f32(v & 15u), f32((v >> 8u) & 15u), f32((v >> 16u) & 15u), f32((v >> 24u) & 15u));
}

// Weight j (0..32) of a block of 16 nibble bytes in Q4_0's order starting at word `qs`: the
// low nibble of byte j for j < 16, the high nibble of byte j - 16 otherwise.
fn q4_nibble_at(qs: u32, j: u32) -> u32 {
    let b = j % 16u;
    return (wl(qs + b / 4u) >> (8u * (b % 4u) + 4u * (j / 16u))) & 15u;
}

// Q5_0/Q5_1: the fifth bits of weights j..j+3 (bits j..j+3 of qh), as multiples of 16.
fn q5_high(qh: u32, j: u32) -> vec4<f32> {
    let v = qh >> j;
    return vec4<f32>(f32((v & 1u) * 16u), f32(((v >> 1u) & 1u) * 16u), f32(((v >> 2u) & 1u) * 16u), f32(((v >> 3u) & 1u) * 16u));
}

// Q5_K: bit `j` of each byte, as multiples of 16.
fn k5_high(w: u32, j: u32) -> vec4<f32> {
    let v = w >> j;
    return vec4<f32>(f32((v & 1u) * 16u), f32(((v >> 8u) & 1u) * 16u), f32(((v >> 16u) & 1u) * 16u), f32(((v >> 24u) & 1u) * 16u));
}

// Q6_K: the two bits at `shift` of each byte, as multiples of 16.
fn q6_high(w: u32, shift: u32) -> vec4<f32> {
    let v = w >> shift;
    return vec4<f32>(f32((v & 3u) * 16u), f32(((v >> 8u) & 3u) * 16u), f32(((v >> 16u) & 3u) * 16u), f32(((v >> 24u) & 3u) * 16u));
}

// Q2_K/Q3_K: the two bits at `shift` of each byte.
fn q2_quad(w: u32, shift: u32) -> vec4<f32> {
    let v = w >> shift;
    return vec4<f32>(f32(v & 3u), f32((v >> 8u) & 3u), f32((v >> 16u) & 3u), f32((v >> 24u) & 3u));
}
