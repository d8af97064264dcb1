// Weight format IQ4_NL: GGUF blocks of 32 in split rows as Q4_0 (the unit of nibbles at word
// 4 b in Q4_0's order, the f16 scale d the low half of header word b); each nibble indexes
// wiq4.wgsl's table; w = d * IQ4_VALUES[q].
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 4u, 1u);
}

fn iq4_nl_scale(rb: u32, b: u32) -> f32 {
    return unpack2x16float(wl(split_header(rb, b, 32u, 4u, 1u))).x;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    return iq4_nl_scale(rb, b) * IQ4_VALUES[q4_nibble_at(rb + 4u * b, k % 32u)];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * b), q % 2u);
    let shift = 4u * (q / 2u);
    let d = iq4_nl_scale(rb, b);
    return W8(d * iq4_values(words.x, shift), d * iq4_values(words.y, shift));
}

// A whole block: the scale read once and its unit of nibbles once.
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let d = iq4_nl_scale(rb, b);
    return W32(
        W8(d * iq4_values(q.x, 0u), d * iq4_values(q.y, 0u)),
        W8(d * iq4_values(q.z, 0u), d * iq4_values(q.w, 0u)),
        W8(d * iq4_values(q.x, 4u), d * iq4_values(q.y, 4u)),
        W8(d * iq4_values(q.z, 4u), d * iq4_values(q.w, 4u)),
    );
}
