// Weight format Q2_K: GGUF super-blocks of 256 in split rows (wsplit.wgsl): the 20 quant words of
// super-block s at word 20 s of the row (words 0..3 the 16 scale bytes, per 16 weights: scale in
// the low nibble, minimum in the high one; words 4..19 the 64 bytes qs), header word s its f16 d
// (low half) and dmin (high half). Weight 128 h + 32 s + l is the two bits at 2 s of
// qs[32 h + l]; w = (d sc) q - dmin m.
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 256u, 20u, 1u);
}

// (d, dmin) of super-block s.
fn q2k_dm(rb: u32, s: u32) -> vec2<f32> {
    return unpack2x16float(wl(split_header(rb, s, 256u, 20u, 1u)));
}

// (d * scale, dmin * min) of weights 16 group .. 16 group + 15, from (d, dmin) and the word
// holding the group's scale byte.
fn q2k_scale_of(dm: vec2<f32>, word: u32, group: u32) -> vec2<f32> {
    let byte = (word >> (8u * (group % 4u))) & 255u;
    return vec2<f32>(dm.x * f32(byte & 15u), dm.y * f32(byte >> 4u));
}

// (d * scale, dmin * min) of weights 16 group .. 16 group + 15 of super-block s, whose quants
// are at `base`.
fn q2k_scale(rb: u32, s: u32, base: u32, group: u32) -> vec2<f32> {
    return q2k_scale_of(q2k_dm(rb, s), wl(base + group / 4u), group);
}

// q of weights i..i+3 (i a multiple of 4) of the super-block at `base`.
fn q2k_quad(base: u32, i: u32) -> vec4<f32> {
    return q2_quad(wl(base + 4u + (32u * (i / 128u) + i % 32u) / 4u), 2u * (i % 128u / 32u));
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let s = k / 256u;
    let base = rb + s * 20u;
    let i = k % 256u;
    let sc = q2k_scale(rb, s, base, i / 16u);
    return sc.x * q2k_quad(base, i - i % 4u)[i % 4u] - sc.y;
}

fn w_group(rb: u32, g: u32) -> W8 {
    let s = g / 32u;
    let base = rb + s * 20u;
    let i = g % 32u * 8u;
    let sc = q2k_scale(rb, s, base, i / 16u);
    return W8(sc.x * q2k_quad(base, i) - sc.y, sc.x * q2k_quad(base, i + 4u) - sc.y);
}

// A whole block of 32 (weights 32 j .. 32 j + 31 of a super-block): d, dmin and the word of its
// two scales read once, its eight qs words as two units.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 20u;
    let i = b % 8u * 32u;
    let qs = wl8a(base + 4u + 8u * (i / 128u));
    let dm = q2k_dm(rb, b / 8u);
    let g = i / 16u;
    let scales = wl(base + g / 4u);
    let lo = q2k_scale_of(dm, scales, g);
    let hi = q2k_scale_of(dm, scales, g + 1u);
    let shift = 2u * (i % 128u / 32u);
    return W32(
        W8(lo.x * q2_quad(qs.lo.x, shift) - lo.y, lo.x * q2_quad(qs.lo.y, shift) - lo.y),
        W8(lo.x * q2_quad(qs.lo.z, shift) - lo.y, lo.x * q2_quad(qs.lo.w, shift) - lo.y),
        W8(hi.x * q2_quad(qs.hi.x, shift) - hi.y, hi.x * q2_quad(qs.hi.y, shift) - hi.y),
        W8(hi.x * q2_quad(qs.hi.z, shift) - hi.y, hi.x * q2_quad(qs.hi.w, shift) - hi.y),
    );
}
