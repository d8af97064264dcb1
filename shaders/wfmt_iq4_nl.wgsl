// Weight format IQ4_NL: GGUF blocks of 32 padded to 5 words as Q4_0 (word 0 the f16 scale d,
// words 1..4 the nibbles in Q4_0's order); each nibble indexes wiq4.wgsl's table;
// w = d * IQ4_VALUES[q].
fn w_row_words(k: u32) -> u32 {
    return k / 32u * 5u;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 32u * 5u;
    let j = k % 32u;
    let d = unpack2x16float(wl(base)).x;
    return d * IQ4_VALUES[q4_nibble_at(base + 1u, j)];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 4u * 5u;
    let q = g % 4u;
    let o = base + 1u + 2u * (q % 2u);
    let shift = 4u * (q / 2u);
    let d = unpack2x16float(wl(base)).x;
    return W8(d * iq4_values(wl(o), shift), d * iq4_values(wl(o + 1u), shift));
}

// A whole block: the scale read once and each of the four nibble words once.
fn w_block(rb: u32, b: u32) -> W32 {
    let o = rb + 5u * b;
    let words = wl_head4(o);
    let d = unpack2x16float(words.head).x;
    let q0 = words.q.x;
    let q1 = words.q.y;
    let q2 = words.q.z;
    let q3 = words.q.w;
    return W32(
        W8(d * iq4_values(q0, 0u), d * iq4_values(q1, 0u)),
        W8(d * iq4_values(q2, 0u), d * iq4_values(q3, 0u)),
        W8(d * iq4_values(q0, 4u), d * iq4_values(q1, 4u)),
        W8(d * iq4_values(q2, 4u), d * iq4_values(q3, 4u)),
    );
}
