// Weight format Q3_K: GGUF super-blocks of 256 (110 bytes) stored as 28 words: word 0 the f16 d
// (low half), words 1..8 the 32 bytes hmask, words 9..24 the 64 bytes qs (low two bits, as
// Q2_K), words 25..27 the 12 bytes of 6-bit scales (one per 16 weights). A clear bit i / 32 of
// hmask[i % 32] subtracts 4 from weight i; w = (d scale) q.
fn w_row_words(k: u32) -> u32 {
    return k / 256u * 28u;
}

// Byte i (0..12) of the packed scales of the super-block at `base`.
fn q3k_scale_byte(base: u32, i: u32) -> u32 {
    return (wl(base + 25u + i / 4u) >> (8u * (i % 4u))) & 255u;
}

// d times the signed scale of weights 16 group .. 16 group + 15.
fn q3k_scale(base: u32, group: u32) -> f32 {
    let low = (q3k_scale_byte(base, group % 8u) >> (4u * (group / 8u))) & 15u;
    let high = (q3k_scale_byte(base, 8u + group % 4u) >> (2u * (group / 4u))) & 3u;
    return unpack2x16float(wl(base)).x * (f32(low | (high << 4u)) - 32.0);
}

// q of weights i..i+3 (i a multiple of 4) of the super-block at `base`.
fn q3k_quad(base: u32, i: u32) -> vec4<f32> {
    let l = i % 32u;
    let low = q2_quad(wl(base + 9u + (32u * (i / 128u) + l) / 4u), 2u * (i % 128u / 32u));
    let mask = wl(base + 1u + l / 4u) >> (i / 32u);
    let clear = vec4<f32>(f32(1u - (mask & 1u)), f32(1u - ((mask >> 8u) & 1u)), f32(1u - ((mask >> 16u) & 1u)), f32(1u - ((mask >> 24u) & 1u)));
    return low - 4.0 * clear;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 256u * 28u;
    let i = k % 256u;
    return q3k_scale(base, i / 16u) * q3k_quad(base, i - i % 4u)[i % 4u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 32u * 28u;
    let i = g % 32u * 8u;
    let scale = q3k_scale(base, i / 16u);
    return W8(scale * q3k_quad(base, i), scale * q3k_quad(base, i + 4u));
}
