// Weight format Q6_K: GGUF super-blocks of 256 (210 bytes) in split rows (wsplit.wgsl): the 52
// quant words of super-block s at word 52 s of the row (words 0..31 the 128 bytes ql, 32..47 the
// 64 bytes qh, 48..51 the 16 signed 8-bit scales, one per 16 weights), its f16 d the low half of
// header word s. Weight 128 h + r takes nibble r / 64 of ql[64 h + r % 64] and bits 2 (r / 32)
// of qh[32 h + r % 32]; w = (d scale) (q - 32).
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 256u, 52u, 1u);
}

// d of super-block s.
fn q6_d(rb: u32, s: u32) -> f32 {
    return unpack2x16float(wl(split_header(rb, s, 256u, 52u, 1u))).x;
}

// d times scale s (its byte of the scales' word `word`).
fn q6_scale_of(d: f32, word: u32, s: u32) -> f32 {
    let byte = (word >> (8u * (s % 4u))) & 255u;
    return d * f32(bitcast<i32>(byte << 24u) >> 24u);
}

// d times the scale of weights 16 s .. 16 s + 15 of super-block `sb`, whose quants are at `base`.
fn q6_scale(rb: u32, sb: u32, base: u32, s: u32) -> f32 {
    return q6_scale_of(q6_d(rb, sb), wl(base + 48u + s / 4u), s);
}

// q - 32 of four weights at offset r (mod 128) of their half super-block, from their ql word
// `l` and qh word `h`.
fn q6_quad_of(l: u32, h: u32, r: u32) -> vec4<f32> {
    return q4_nibbles(l, 4u * (r / 64u)) + q6_high(h, 2u * (r / 32u)) - 32.0;
}

// q - 32 of weights i..i+3 (i a multiple of 4) of the super-block at `base`.
fn q6_quad(base: u32, i: u32) -> vec4<f32> {
    let h = i / 128u;
    let r = i % 128u;
    return q6_quad_of(wl(base + (64u * h + r % 64u) / 4u), wl(base + 32u + (32u * h + r % 32u) / 4u), r);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let sb = k / 256u;
    let base = rb + sb * 52u;
    let i = k % 256u;
    return q6_scale(rb, sb, base, i / 16u) * q6_quad(base, i - i % 4u)[i % 4u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let sb = g / 32u;
    let base = rb + sb * 52u;
    let i = g % 32u * 8u;
    let scale = q6_scale(rb, sb, base, i / 16u);
    return W8(scale * q6_quad(base, i), scale * q6_quad(base, i + 4u));
}

// A whole block of 32 (weights 32 j .. 32 j + 31 of a super-block): d and the word of its two
// scales read once, and its eight ql words and eight qh words each as two units.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 52u;
    let i = b % 8u * 32u;
    let h = i / 128u;
    let r = i % 128u;
    let ql = wl8a(base + (64u * h + r % 64u) / 4u);
    let qh = wl8a(base + 32u + 8u * h);
    let d = q6_d(rb, b / 8u);
    let scales = wl(base + 48u + i / 64u);
    let lo = q6_scale_of(d, scales, i / 16u);
    let hi = q6_scale_of(d, scales, i / 16u + 1u);
    return W32(
        W8(lo * q6_quad_of(ql.lo.x, qh.lo.x, r), lo * q6_quad_of(ql.lo.y, qh.lo.y, r)),
        W8(lo * q6_quad_of(ql.lo.z, qh.lo.z, r), lo * q6_quad_of(ql.lo.w, qh.lo.w, r)),
        W8(hi * q6_quad_of(ql.hi.x, qh.hi.x, r), hi * q6_quad_of(ql.hi.y, qh.hi.y, r)),
        W8(hi * q6_quad_of(ql.hi.z, qh.hi.z, r), hi * q6_quad_of(ql.hi.w, qh.hi.w, r)),
    );
}

// A K-split lane's run (llama.cpp's mul_mat_vec_q6_k): run r is lane i = r % 16 of super-block
// r / 16, with v = i / 8 and j = i % 8 the four weights at 4 j of each quarter of half v
// (k = 128 v + 4 j, + 32, + 64, + 96): the low then the high nibbles of ql words 16 v + j and
// 16 v + 8 + j, with the bit pairs 0, 2, 4, 6 of qh word 8 v + j; their scales are bytes
// j / 4 and j / 4 + 2 of scale words 2 v and 2 v + 1, sign-extended together.
struct LaneRun {
    q: V16,
    // d times the scales of the four quads.
    sc: vec4<f32>,
}

fn run_quads(r: u32) -> vec4<u32> {
    let i = r % 16u;
    let k = r / 16u * 256u + 128u * (i / 8u) + 4u * (i % 8u);
    return vec4<u32>(k, k + 32u, k + 64u, k + 96u);
}

fn lane_run(rb: u32, r: u32) -> LaneRun {
    let sb = r / 16u;
    let base = rb + sb * 52u;
    let v = r % 16u / 8u;
    let j = r % 8u;
    let l0 = vec4<u32>(wl(base + 16u * v + j)) >> BYTE_SHIFTS;
    let l1 = vec4<u32>(wl(base + 16u * v + 8u + j)) >> BYTE_SHIFTS;
    let qh = vec4<u32>(wl(base + 32u + 8u * v + j)) >> BYTE_SHIFTS;
    let f = vec4<u32>(15u);
    let hb = vec4<u32>(48u);
    let q0 = (l0 & f) | ((qh << vec4<u32>(4u)) & hb);
    let q1 = (l1 & f) | ((qh << vec4<u32>(2u)) & hb);
    let q2 = ((l0 >> vec4<u32>(4u)) & f) | (qh & hb);
    let q3 = ((l1 >> vec4<u32>(4u)) & f) | ((qh >> vec4<u32>(2u)) & hb);
    let s = unit_half(wl4a(base + 48u), v);
    let at = vec4<u32>(24u, 8u, 24u, 8u) - vec4<u32>(8u * (j / 4u));
    let scales = vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(s.x, s.x, s.y, s.y) << at) >> vec4<u32>(24u));
    let off = vec4<f32>(32.0);
    let q = V16(vec4<f32>(q0) - off, vec4<f32>(q1) - off, vec4<f32>(q2) - off, vec4<f32>(q3) - off);
    return LaneRun(q, q6_d(rb, sb) * scales);
}

fn lane_partial(w: LaneRun, x: V16) -> f32 {
    return dot(quad_dots(x, w.q), w.sc);
}
