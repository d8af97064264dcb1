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
