// Weight format Q4_0: GGUF blocks of 32 padded to 5 words: word 0 holds the f16 scale d in its
// low half, words 1..4 the 16 bytes qs; weight j < 16 is the low nibble of qs[j], weight j >= 16
// the high nibble of qs[j - 16]; w = d * (q - 8).
fn w_row_words(k: u32) -> u32 {
    return k / 32u * 5u;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 32u * 5u;
    let j = k % 32u;
    let d = unpack2x16float(wl(base)).x;
    let q = q4_nibble_at(base + 1u, j);
    return d * (f32(q) - 8.0);
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 4u * 5u;
    let q = g % 4u;
    let o = base + 1u + 2u * (q % 2u);
    let shift = 4u * (q / 2u);
    let d = unpack2x16float(wl(base)).x;
    return W8(d * (q4_nibbles(wl(o), shift) - 8.0), d * (q4_nibbles(wl(o + 1u), shift) - 8.0));
}

// A whole block: the scale read once and each of the four nibble words read once (low nibbles
// are weights 0..15, high nibbles 16..31).
fn w_block(rb: u32, b: u32) -> W32 {
    let o = rb + 5u * b;
    let words = wl_head4(o);
    let d = unpack2x16float(words.head).x;
    let q0 = words.q.x;
    let q1 = words.q.y;
    let q2 = words.q.z;
    let q3 = words.q.w;
    return W32(
        W8(d * (q4_nibbles(q0, 0u) - 8.0), d * (q4_nibbles(q1, 0u) - 8.0)),
        W8(d * (q4_nibbles(q2, 0u) - 8.0), d * (q4_nibbles(q3, 0u) - 8.0)),
        W8(d * (q4_nibbles(q0, 4u) - 8.0), d * (q4_nibbles(q1, 4u) - 8.0)),
        W8(d * (q4_nibbles(q2, 4u) - 8.0), d * (q4_nibbles(q3, 4u) - 8.0)),
    );
}
