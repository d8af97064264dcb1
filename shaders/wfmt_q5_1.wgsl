// Weight format Q5_1: GGUF blocks of 32 in split rows (wsplit.wgsl): block b's 16 bytes qs (Q4_0's
// nibble order) are the unit at word 4 b, header word 2 b holds its f16 scale d (low half) and
// f16 minimum m (high half), header word 2 b + 1 its fifth bits qh (bit j for weight j);
// w = d * q + m.
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 4u, 2u);
}

// (d and m, qh) of block b.
fn q5_1_header(rb: u32, b: u32) -> vec2<u32> {
    return split_header_pair(rb, b, 32u, 4u);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    let j = k % 32u;
    let header = q5_1_header(rb, b);
    let dm = unpack2x16float(header.x);
    let low = q4_nibble_at(rb + 4u * b, j);
    let high = ((header.y >> j) & 1u) * 16u;
    return dm.x * f32(low + high) + dm.y;
}

fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * b), q % 2u);
    let shift = 4u * (q / 2u);
    let header = q5_1_header(rb, b);
    let dm = unpack2x16float(header.x);
    return W8(dm.x * (q4_nibbles(words.x, shift) + q5_high(header.y, 8u * q)) + dm.y,
              dm.x * (q4_nibbles(words.y, shift) + q5_high(header.y, 8u * q + 4u)) + dm.y);
}

// A whole block: scale, minimum and fifth bits read once, its unit of nibbles once.
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let header = q5_1_header(rb, b);
    let dm = unpack2x16float(header.x);
    let qh = header.y;
    return W32(
        W8(dm.x * (q4_nibbles(q.x, 0u) + q5_high(qh, 0u)) + dm.y, dm.x * (q4_nibbles(q.y, 0u) + q5_high(qh, 4u)) + dm.y),
        W8(dm.x * (q4_nibbles(q.z, 0u) + q5_high(qh, 8u)) + dm.y, dm.x * (q4_nibbles(q.w, 0u) + q5_high(qh, 12u)) + dm.y),
        W8(dm.x * (q4_nibbles(q.x, 4u) + q5_high(qh, 16u)) + dm.y, dm.x * (q4_nibbles(q.y, 4u) + q5_high(qh, 20u)) + dm.y),
        W8(dm.x * (q4_nibbles(q.z, 4u) + q5_high(qh, 24u)) + dm.y, dm.x * (q4_nibbles(q.w, 4u) + q5_high(qh, 28u)) + dm.y),
    );
}
