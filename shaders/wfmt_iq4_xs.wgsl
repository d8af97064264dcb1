// Weight format IQ4_XS: GGUF super-blocks of 256 in split rows (wsplit.wgsl): the 128 bytes qs of
// super-block s are the 32 words at word 32 s of the row (sub-block j, 32 weights, the unit at
// 4 j in Q4_0's nibble order, indexing wiq4.wgsl's table); header word 2 s holds its f16 d (low
// half) and scales_h (high half: two high bits per sub-block), header word 2 s + 1 scales_l
// (four low bits per sub-block); w = (d scale) IQ4_VALUES[q].
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 256u, 32u, 2u);
}

// d times the signed 6-bit scale of sub-block j of super-block s.
fn iq4xs_scale(rb: u32, s: u32, j: u32) -> f32 {
    let header = split_header_pair(rb, s, 256u, 32u);
    let high = (header.x >> (16u + 2u * j)) & 3u;
    let low = (header.y >> (4u * j)) & 15u;
    return unpack2x16float(header.x).x * (f32(low | (high << 4u)) - 32.0);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let s = k / 256u;
    let j = k % 256u / 32u;
    return iq4xs_scale(rb, s, j) * IQ4_VALUES[q4_nibble_at(rb + 32u * s + 4u * j, k % 32u)];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let j = g % 32u / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * (g / 4u)), q % 2u);
    let shift = 4u * (q / 2u);
    let dl = iq4xs_scale(rb, g / 32u, j);
    return W8(dl * iq4_values(words.x, shift), dl * iq4_values(words.y, shift));
}

// A whole sub-block of 32: its scale decoded once, its four nibble words read as one unit (low
// nibbles are weights 0..15, high nibbles 16..31).
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let dl = iq4xs_scale(rb, b / 8u, b % 8u);
    return W32(
        W8(dl * iq4_values(q.x, 0u), dl * iq4_values(q.y, 0u)),
        W8(dl * iq4_values(q.z, 0u), dl * iq4_values(q.w, 0u)),
        W8(dl * iq4_values(q.x, 4u), dl * iq4_values(q.y, 4u)),
        W8(dl * iq4_values(q.z, 4u), dl * iq4_values(q.w, 4u)),
    );
}
