// Weight format Q4_K: GGUF super-blocks of 256 in 36 words: the K header (wk_scales.wgsl), then
// words 4..35 the 128 bytes qs; sub-block j (32 weights) is the low nibbles of bytes
// 32 (j / 2) .. 32 (j / 2) + 31 for even j, their high nibbles for odd j; w = (d sc) q - dmin m.
fn w_row_words(k: u32) -> u32 {
    return k / 256u * 36u;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 256u * 36u;
    let j = k % 256u / 32u;
    let l = k % 32u;
    let s = k_sub_scale(base, j);
    let q = (wl(base + 4u + 8u * (j / 2u) + l / 4u) >> (8u * (l % 4u) + 4u * (j % 2u))) & 15u;
    return s.x * f32(q) - s.y;
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 32u * 36u;
    let j = g % 32u / 4u;
    let o = base + 4u + 8u * (j / 2u) + 2u * (g % 4u);
    let shift = 4u * (j % 2u);
    let s = k_sub_scale(base, j);
    return W8(s.x * q4_nibbles(wl(o), shift) - s.y, s.x * q4_nibbles(wl(o + 1u), shift) - s.y);
}

// A whole sub-block of 32: its scale and minimum decoded once, its eight words read once.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 36u;
    let j = b % 8u;
    let o = base + 4u + 8u * (j / 2u);
    let shift = 4u * (j % 2u);
    let s = k_sub_scale(base, j);
    let q0 = wl4a(o);
    let q1 = wl4a(o + 4u);
    return W32(
        W8(s.x * q4_nibbles(q0.x, shift) - s.y, s.x * q4_nibbles(q0.y, shift) - s.y),
        W8(s.x * q4_nibbles(q0.z, shift) - s.y, s.x * q4_nibbles(q0.w, shift) - s.y),
        W8(s.x * q4_nibbles(q1.x, shift) - s.y, s.x * q4_nibbles(q1.y, shift) - s.y),
        W8(s.x * q4_nibbles(q1.z, shift) - s.y, s.x * q4_nibbles(q1.w, shift) - s.y),
    );
}

// A K-split lane's run (llama.cpp's mul_mat_vec_q4_k): run r is lane i = r % 16 of super-block
// r / 16, with v = i / 8 and o = 4 (i % 8) the four weights at o of sub-blocks 2 v, 2 v + 1,
// 2 v + 4 and 2 v + 5 (k = 64 v + o, + 32, + 128, + 160): the nibbles of words 8 v + i % 8 and
// 16 + 8 v + i % 8 of the quants, low then high. The four sub-blocks' scales and minimums are
// bytes 2 v, 2 v + 1 of the three scale words' halves v, decoded together with packed masks;
// each quad dequantized once: w = (d sc) q - dmin m.
fn run_quads(r: u32) -> vec4<u32> {
    let i = r % 16u;
    let k = r / 16u * 256u + 64u * (i / 8u) + 4u * (i % 8u);
    return vec4<u32>(k, k + 32u, k + 128u, k + 160u);
}

fn lane_run(rb: u32, r: u32) -> V16 {
    let base = rb + r / 16u * 36u;
    let i = r % 16u;
    let h = wl4a(base);
    let half = 16u * (i / 8u);
    // Bytes sc[2 v], sc[2 v + 1], m[2 v], m[2 v + 1] (the low six bits), the top two bits of
    // each moved to bits 4..5, and the low and high nibbles of bytes 8 + 2 v, 9 + 2 v.
    let lo = extractBits(h.y, half, 16u) | (extractBits(h.z, half, 16u) << 16u);
    let top = (lo & 0xC0C0C0C0u) >> 2u;
    let e = extractBits(h.w, half, 16u);
    let a = bytes4(lo & 0x3F3F3F3Fu);
    let b = bytes4((((e << 12u) | e) & 0x0F0F0F0Fu) | top);
    let dm = unpack2x16float(h.x);
    let sc = dm.x * vec4<f32>(a.x, a.y, b.x, b.y);
    let mn = -dm.y * vec4<f32>(a.z, a.w, b.z, b.w);
    let w0 = wl(base + 4u + 8u * (i / 8u) + i % 8u);
    let w1 = wl(base + 20u + 8u * (i / 8u) + i % 8u);
    return V16(
        fma(vec4<f32>(sc.x), nibbles4(w0, 0u), vec4<f32>(mn.x)),
        fma(vec4<f32>(sc.y), nibbles4(w0, 4u), vec4<f32>(mn.y)),
        fma(vec4<f32>(sc.z), nibbles4(w1, 0u), vec4<f32>(mn.z)),
        fma(vec4<f32>(sc.w), nibbles4(w1, 4u), vec4<f32>(mn.w)),
    );
}

fn lane_partial(w: V16, x: V16) -> f32 {
    return run_dot(x, w);
}
