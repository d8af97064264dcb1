// Weight format Q4_1: GGUF blocks of 32 in split rows (wsplit.wgsl): block b's 16 bytes qs are
// the unit at word 4 b, header word b holds its f16 scale d (low half) and f16 minimum m (high
// half); nibble order as Q4_0; w = d * q + m.
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 4u, 1u);
}

fn q4_1_scale(rb: u32, b: u32) -> vec2<f32> {
    return unpack2x16float(wl(split_header(rb, b, 32u, 4u, 1u)));
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    let dm = q4_1_scale(rb, b);
    return dm.x * f32(q4_nibble_at(rb + 4u * b, k % 32u)) + dm.y;
}

// Group q = g % 4 of block g / 4: half q % 2 of the unit, nibbles q / 2.
fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * b), q % 2u);
    let shift = 4u * (q / 2u);
    let dm = q4_1_scale(rb, b);
    return W8(dm.x * q4_nibbles(words.x, shift) + dm.y, dm.x * q4_nibbles(words.y, shift) + dm.y);
}

// A whole block: scale and minimum read once and its unit of nibbles once (low nibbles are
// weights 0..15, high nibbles 16..31).
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let dm = q4_1_scale(rb, b);
    return W32(
        W8(dm.x * q4_nibbles(q.x, 0u) + dm.y, dm.x * q4_nibbles(q.y, 0u) + dm.y),
        W8(dm.x * q4_nibbles(q.z, 0u) + dm.y, dm.x * q4_nibbles(q.w, 0u) + dm.y),
        W8(dm.x * q4_nibbles(q.x, 4u) + dm.y, dm.x * q4_nibbles(q.y, 4u) + dm.y),
        W8(dm.x * q4_nibbles(q.z, 4u) + dm.y, dm.x * q4_nibbles(q.w, 4u) + dm.y),
    );
}

// A K-split lane's run (wbits.wgsl's q4_run), dequantized once: w = d q + m.
fn run_quads(r: u32) -> vec4<u32> {
    return q4_run_quads(r);
}

fn lane_run(rb: u32, r: u32) -> V16 {
    let q = q4_run(rb, r);
    let dm = q4_1_scale(rb, r / 2u);
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return V16(fma(d, q.a, m), fma(d, q.b, m), fma(d, q.c, m), fma(d, q.d, m));
}

fn lane_partial(w: V16, x: V16) -> f32 {
    return run_dot(x, w);
}
