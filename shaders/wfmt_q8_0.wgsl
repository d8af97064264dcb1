// Weight format Q8_0: GGUF blocks of 32 padded to 9 words: word 0 holds the f16 scale d in its
// low half, words 1..8 the 32 signed bytes in order; w = d * q.
fn w_row_words(k: u32) -> u32 {
    return k / 32u * 9u;
}

fn q8_bytes(w: u32) -> vec4<f32> {
    let s = bitcast<i32>(w);
    return vec4<f32>(f32(extractBits(s, 0u, 8u)), f32(extractBits(s, 8u, 8u)), f32(extractBits(s, 16u, 8u)), f32(extractBits(s, 24u, 8u)));
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let base = rb + k / 32u * 9u;
    let j = k % 32u;
    let d = unpack2x16float(wl(base)).x;
    return d * q8_bytes(wl(base + 1u + j / 4u))[j % 4u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let base = rb + g / 4u * 9u;
    let o = base + 1u + 2u * (g % 4u);
    let d = unpack2x16float(wl(base)).x;
    return W8(d * q8_bytes(wl(o)), d * q8_bytes(wl(o + 1u)));
}

// A whole block: the scale read once, then its eight words of bytes.
fn w_block(rb: u32, b: u32) -> W32 {
    let o = rb + 9u * b;
    let words = wl_head8(o);
    let d = unpack2x16float(words.head).x;
    return W32(
        W8(d * q8_bytes(words.q0.x), d * q8_bytes(words.q0.y)),
        W8(d * q8_bytes(words.q0.z), d * q8_bytes(words.q0.w)),
        W8(d * q8_bytes(words.q1.x), d * q8_bytes(words.q1.y)),
        W8(d * q8_bytes(words.q1.z), d * q8_bytes(words.q1.w)),
    );
}
