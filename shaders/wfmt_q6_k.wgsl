// Weight format Q6_K: GGUF super-blocks of 256 (210 bytes) stored as 53 words: word 0 the f16 d
// (low half), words 1..32 the 128 bytes ql, words 33..48 the 64 bytes qh, words 49..52 the 16
// signed 8-bit scales (one per 16 weights). Weight 128 h + r takes nibble r / 64 of
// ql[64 h + r % 64] and bits 2 (r / 32) of qh[32 h + r % 32]; w = (d scale) (q - 32).
fn w_row_words(k: u32) -> u32 {
    return k / 256u * 53u;
}

// d times the scale of weights 16 s .. 16 s + 15 of the super-block at `base`.
fn q6_scale(base: u32, s: u32) -> f32 {
    let byte = (wl(base + 49u + s / 4u) >> (8u * (s % 4u))) & 255u;
    return unpack2x16float(wl(base)).x * f32(bitcast<i32>(byte << 24u) >> 24u);
}

// q - 32 of weights i..i+3 (i a multiple of 4) of the super-block at `base`.
fn q6_quad(base: u32, i: u32) -> vec4<f32> {
    let h = i / 128u;
    let r = i % 128u;
    let low = q4_nibbles(wl(base + 1u + (64u * h + r % 64u) / 4u), 4u * (r / 64u));
    return low + q6_high(wl(base + 33u + (32u * h + r % 32u) / 4u), 2u * (r / 32u)) - 32.0;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 256u * 53u;
    let i = k % 256u;
    return q6_scale(base, i / 16u) * q6_quad(base, i - i % 4u)[i % 4u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 32u * 53u;
    let i = g % 32u * 8u;
    let scale = q6_scale(base, i / 16u);
    return W8(scale * q6_quad(base, i), scale * q6_quad(base, i + 4u));
}
