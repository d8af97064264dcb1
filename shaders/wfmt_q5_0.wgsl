// Weight format Q5_0: GGUF blocks of 32 padded to 6 words: word 0 holds the f16 scale d in its
// low half, word 1 the fifth bits qh (bit j for weight j), words 2..5 the 16 bytes qs with
// Q4_0's nibble order; w = d * (q - 16).
fn w_row_words(k: u32) -> u32 {
    return k / 32u * 6u;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 32u * 6u;
    let j = k % 32u;
    let d = unpack2x16float(wl(base)).x;
    let low = q4_nibble_at(base + 2u, j);
    let high = ((wl(base + 1u) >> j) & 1u) * 16u;
    return d * (f32(low + high) - 16.0);
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 4u * 6u;
    let q = g % 4u;
    let o = base + 2u + 2u * (q % 2u);
    let shift = 4u * (q / 2u);
    let d = unpack2x16float(wl(base)).x;
    let qh = wl(base + 1u);
    return W8(d * (q4_nibbles(wl(o), shift) + q5_high(qh, 8u * q) - 16.0),
              d * (q4_nibbles(wl(o + 1u), shift) + q5_high(qh, 8u * q + 4u) - 16.0));
}

// A whole block: scale and fifth bits read once, each of the four nibble words once.
fn w_block(rb: u32, b: u32) -> W32 {
    let o = rb + 6u * b;
    let d = unpack2x16float(wl(o)).x;
    let words = wl_head4(o + 1u);
    let qh = words.head;
    let q0 = words.q.x;
    let q1 = words.q.y;
    let q2 = words.q.z;
    let q3 = words.q.w;
    return W32(
        W8(d * (q4_nibbles(q0, 0u) + q5_high(qh, 0u) - 16.0), d * (q4_nibbles(q1, 0u) + q5_high(qh, 4u) - 16.0)),
        W8(d * (q4_nibbles(q2, 0u) + q5_high(qh, 8u) - 16.0), d * (q4_nibbles(q3, 0u) + q5_high(qh, 12u) - 16.0)),
        W8(d * (q4_nibbles(q0, 4u) + q5_high(qh, 16u) - 16.0), d * (q4_nibbles(q1, 4u) + q5_high(qh, 20u) - 16.0)),
        W8(d * (q4_nibbles(q2, 4u) + q5_high(qh, 24u) - 16.0), d * (q4_nibbles(q3, 4u) + q5_high(qh, 28u) - 16.0)),
    );
}
