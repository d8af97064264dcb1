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

// Q4_0/Q4_1 lane runs (as llama.cpp's mul_mat_vec reads them): run r is half h = r % 2 of block
// r / 2, the low and high nibbles of its words 2 h and 2 h + 1 (k = 8 h .. 8 h + 7 and
// 16 + 8 h .. 16 + 8 h + 7 of the block), for a format whose block b's 16 bytes of nibbles are
// the unit at word 4 b of the row.
fn q4_run_quads(r: u32) -> vec4<u32> {
    let k = 32u * (r / 2u) + 8u * (r % 2u);
    return vec4<u32>(k, k + 4u, k + 16u, k + 20u);
}

fn q4_run(rb: u32, r: u32) -> V16 {
    let w0 = wl(rb + 2u * r);
    let w1 = wl(rb + 2u * r + 1u);
    return V16(nibbles4(w0, 0u), nibbles4(w1, 0u), nibbles4(w0, 4u), nibbles4(w1, 4u));
}
