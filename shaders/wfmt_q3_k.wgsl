// Weight format Q3_K: GGUF super-blocks of 256 (110 bytes) in split rows (wsplit.wgsl): the 24
// quant words of super-block s at word 24 s of the row (words 0..7 the 32 bytes hmask, words
// 8..23 the 64 bytes qs: low two bits, as Q2_K), its header the unit at header word 4 s (words
// 0..2 the 12 bytes of 6-bit scales, one per 16 weights; word 3 the f16 d, low half). A clear bit
// i / 32 of hmask[i % 32] subtracts 4 from weight i; w = (d scale) q.
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 256u, 24u, 4u);
}

// The header unit of super-block s: the three scale words, then d.
fn q3k_header(rb: u32, s: u32) -> vec4<u32> {
    return wl4a(split_header(rb, s, 256u, 24u, 4u));
}

// d times the signed scale of weights 16 group .. 16 group + 15, from their super-block's header:
// scale bytes group % 8 (low four bits) and 8 + group % 4 (high two).
fn q3k_scale(header: vec4<u32>, group: u32) -> f32 {
    let shift = 8u * (group % 4u);
    let low = (header[group % 8u / 4u] >> (shift + 4u * (group / 8u))) & 15u;
    let high = (header.z >> (shift + 2u * (group / 4u))) & 3u;
    return unpack2x16float(header.w).x * (f32(low | (high << 4u)) - 32.0);
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
    return q3k_quad_of(wl(base + 8u + (32u * (i / 128u) + l) / 4u), wl(base + l / 4u), i);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let s = k / 256u;
    let i = k % 256u;
    return q3k_scale(q3k_header(rb, s), i / 16u) * q3k_quad(rb + s * 24u, i - i % 4u)[i % 4u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let s = g / 32u;
    let base = rb + s * 24u;
    let i = g % 32u * 8u;
    let scale = q3k_scale(q3k_header(rb, s), i / 16u);
    return W8(scale * q3k_quad(base, i), scale * q3k_quad(base, i + 4u));
}

// A whole block of 32 (weights 32 j .. 32 j + 31 of a super-block): its super-block's header
// read once as a unit, its eight qs words and the eight hmask words each as two units.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 24u;
    let i = b % 8u * 32u;
    let qs = wl8a(base + 8u + 8u * (i / 128u));
    let hm = wl8a(base);
    let header = q3k_header(rb, b / 8u);
    let lo = q3k_scale(header, i / 16u);
    let hi = q3k_scale(header, i / 16u + 1u);
    return W32(
        W8(lo * q3k_quad_of(qs.lo.x, hm.lo.x, i), lo * q3k_quad_of(qs.lo.y, hm.lo.y, i)),
        W8(lo * q3k_quad_of(qs.lo.z, hm.lo.z, i), lo * q3k_quad_of(qs.lo.w, hm.lo.w, i)),
        W8(hi * q3k_quad_of(qs.hi.x, hm.hi.x, i), hi * q3k_quad_of(qs.hi.y, hm.hi.y, i)),
        W8(hi * q3k_quad_of(qs.hi.z, hm.hi.z, i), hi * q3k_quad_of(qs.hi.w, hm.hi.w, i)),
    );
}
