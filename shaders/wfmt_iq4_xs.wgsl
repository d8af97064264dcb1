// Weight format IQ4_XS: GGUF super-blocks of 256 in 34 words: word 0 holds the f16 d (low half)
// and scales_h (high half: two high bits per sub-block), word 1 scales_l (four low bits per
// sub-block), words 2..33 the 128 bytes qs; sub-block j (32 weights) is bytes 16 j .. 16 j + 15
// in Q4_0's nibble order, indexing wiq4.wgsl's table; w = (d scale) IQ4_VALUES[q].
fn w_row_words(k: u32) -> u32 {
    return whole_units(k / 256u * 34u);
}

// d times the signed 6-bit scale of sub-block j of the super-block at `base`.
fn iq4xs_scale(base: u32, j: u32) -> f32 {
    let w0 = wl(base);
    let high = (w0 >> (16u + 2u * j)) & 3u;
    let low = (wl(base + 1u) >> (4u * j)) & 15u;
    return unpack2x16float(w0).x * (f32(low | (high << 4u)) - 32.0);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 256u * 34u;
    let j = k % 256u / 32u;
    return iq4xs_scale(base, j) * IQ4_VALUES[q4_nibble_at(base + 2u + 4u * j, k % 32u)];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 32u * 34u;
    let j = g % 32u / 4u;
    let q = g % 4u;
    let o = base + 2u + 4u * j + 2u * (q % 2u);
    let shift = 4u * (q / 2u);
    let dl = iq4xs_scale(base, j);
    return W8(dl * iq4_values(wl(o), shift), dl * iq4_values(wl(o + 1u), shift));
}

// A whole sub-block of 32: its scale decoded once, its four nibble words read as one run (low
// nibbles are weights 0..15, high nibbles 16..31).
fn w_block(rb: u32, b: u32) -> W32 {
    let base = rb + b / 8u * 34u;
    let j = b % 8u;
    let q = wl4(base + 2u + 4u * j);
    let dl = iq4xs_scale(base, j);
    return W32(
        W8(dl * iq4_values(q.x, 0u), dl * iq4_values(q.y, 0u)),
        W8(dl * iq4_values(q.z, 0u), dl * iq4_values(q.w, 0u)),
        W8(dl * iq4_values(q.x, 4u), dl * iq4_values(q.y, 4u)),
        W8(dl * iq4_values(q.z, 4u), dl * iq4_values(q.w, 4u)),
    );
}
