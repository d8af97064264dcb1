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

// d times the signed scale of weights 16 group .. 16 group + 15, from scale bytes group % 8
// (`lo`) and 8 + group % 4 (`hi`).
fn q3k_scale_of(d: f32, lo: u32, hi: u32, group: u32) -> f32 {
    let low = (lo >> (4u * (group / 8u))) & 15u;
    let high = (hi >> (2u * (group / 4u))) & 3u;
    return d * (f32(low | (high << 4u)) - 32.0);
}

// d times the signed scale of weights 16 group .. 16 group + 15, from words 24..27 of the
// super-block (the last qs word, then the three scale words).
fn q3k_scale_in(d: f32, words: vec4<u32>, group: u32) -> f32 {
    let shift = 8u * (group % 4u);
    return q3k_scale_of(d, (words[1u + group % 8u / 4u] >> shift) & 255u, (words.w >> shift) & 255u, group);
}

// d times the signed scale of weights 16 group .. 16 group + 15.
fn q3k_scale(base: u32, group: u32) -> f32 {
    let d = unpack2x16float(wl(base)).x;
    return q3k_scale_of(d, q3k_scale_byte(base, group % 8u), q3k_scale_byte(base, 8u + group % 4u), group);
}

// q of weights i..i+3 (i a multiple of 4) of a super-block, from their qs word and hmask word.
fn q3k_quad_of(qs: u32, hmask: u32, i: u32) -> vec4<f32> {
    let low = q2_quad(qs, 2u * (i % 128u / 32u));
    let mask = hmask >> (i / 32u);
    let clear = vec4<f32>(f32(1u - (mask & 1u)), f32(1u - ((mask >> 8u) & 1u)), f32(1u - ((mask >> 16u) & 1u)), f32(1u - ((mask >> 24u) & 1u)));
    return low - 4.0 * clear;
}

// q of weights i..i+3 (i a multiple of 4) of the super-block at `base`.
fn q3k_quad(base: u32, i: u32) -> vec4<f32> {
    let l = i % 32u;
    return q3k_quad_of(wl(base + 9u + (32u * (i / 128u) + l) / 4u), wl(base + 1u + l / 4u), i);
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

// A whole block of 32 (weights 32 j .. 32 j + 31 of a super-block): d and the scale words read
// once, its eight qs words and the eight hmask words each read as one run.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 28u;
    let i = b % 8u * 32u;
    let qs = wl8(base + 9u + 8u * (i / 128u));
    let hm = wl8(base + 1u);
    let d = unpack2x16float(wl(base)).x;
    let words = wl4(base + 24u);
    let lo = q3k_scale_in(d, words, i / 16u);
    let hi = q3k_scale_in(d, words, i / 16u + 1u);
    return W32(
        W8(lo * q3k_quad_of(qs.lo.x, hm.lo.x, i), lo * q3k_quad_of(qs.lo.y, hm.lo.y, i)),
        W8(lo * q3k_quad_of(qs.lo.z, hm.lo.z, i), lo * q3k_quad_of(qs.lo.w, hm.lo.w, i)),
        W8(hi * q3k_quad_of(qs.hi.x, hm.hi.x, i), hi * q3k_quad_of(qs.hi.y, hm.hi.y, i)),
        W8(hi * q3k_quad_of(qs.hi.z, hm.hi.z, i), hi * q3k_quad_of(qs.hi.w, hm.hi.w, i)),
    );
}
