// Weight format Q5_K: GGUF super-blocks of 256 in 44 words: the K header (wk_scales.wgsl), words
// 4..11 the 32 bytes qh (bit j of byte l: the fifth bit of weight l of sub-block j), words 12..43
// the 128 bytes qs as Q4_K; w = (d sc) q - dmin m.
fn w_row_words(k: u32) -> u32 {
    return k / 256u * 44u;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 256u * 44u;
    let j = k % 256u / 32u;
    let l = k % 32u;
    let s = k_sub_scale(base, j);
    let low = (wl(base + 12u + 8u * (j / 2u) + l / 4u) >> (8u * (l % 4u) + 4u * (j % 2u))) & 15u;
    let high = ((wl(base + 4u + l / 4u) >> (8u * (l % 4u) + j)) & 1u) * 16u;
    return s.x * f32(low + high) - s.y;
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 32u * 44u;
    let j = g % 32u / 4u;
    let p = g % 4u;
    let o = base + 12u + 8u * (j / 2u) + 2u * p;
    let h = base + 4u + 2u * p;
    let shift = 4u * (j % 2u);
    let s = k_sub_scale(base, j);
    return W8(s.x * (q4_nibbles(wl(o), shift) + k5_high(wl(h), j)) - s.y,
              s.x * (q4_nibbles(wl(o + 1u), shift) + k5_high(wl(h + 1u), j)) - s.y);
}

// A whole sub-block of 32: its scale and minimum decoded once, its eight nibble words and
// eight fifth-bit words read once.
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 44u;
    let j = b % 8u;
    let o = base + 12u + 8u * (j / 2u);
    let h = base + 4u;
    let shift = 4u * (j % 2u);
    let s = k_sub_scale(base, j);
    let q0 = wl4a(o);
    let q1 = wl4a(o + 4u);
    let h0 = wl4a(h);
    let h1 = wl4a(h + 4u);
    return W32(
        W8(s.x * (q4_nibbles(q0.x, shift) + k5_high(h0.x, j)) - s.y,
           s.x * (q4_nibbles(q0.y, shift) + k5_high(h0.y, j)) - s.y),
        W8(s.x * (q4_nibbles(q0.z, shift) + k5_high(h0.z, j)) - s.y,
           s.x * (q4_nibbles(q0.w, shift) + k5_high(h0.w, j)) - s.y),
        W8(s.x * (q4_nibbles(q1.x, shift) + k5_high(h1.x, j)) - s.y,
           s.x * (q4_nibbles(q1.y, shift) + k5_high(h1.y, j)) - s.y),
        W8(s.x * (q4_nibbles(q1.z, shift) + k5_high(h1.z, j)) - s.y,
           s.x * (q4_nibbles(q1.w, shift) + k5_high(h1.w, j)) - s.y),
    );
}
