// Weight format Q4_0: GGUF blocks of 32 in split rows (wsplit.wgsl): block b's 16 bytes qs are
// the unit at word 4 b, its f16 scale d the low half of header word b; weight j < 16 is the low
// nibble of qs[j], weight j >= 16 the high nibble of qs[j - 16]; w = d * (q - 8).
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 4u, 1u);
}

fn q4_0_scale(rb: u32, b: u32) -> f32 {
    return unpack2x16float(wl(split_header(rb, b, 32u, 4u, 1u))).x;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    let q = q4_nibble_at(rb + 4u * b, k % 32u);
    return q4_0_scale(rb, b) * (f32(q) - 8.0);
}

// Group q = g % 4 of block g / 4: half q % 2 of the unit, nibbles q / 2.
fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * b), q % 2u);
    let shift = 4u * (q / 2u);
    let d = q4_0_scale(rb, b);
    return W8(d * (q4_nibbles(words.x, shift) - 8.0), d * (q4_nibbles(words.y, shift) - 8.0));
}

// A whole block: the scale read once and its unit of nibbles once (low nibbles are weights
// 0..15, high nibbles 16..31).
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let d = q4_0_scale(rb, b);
    return W32(
        W8(d * (q4_nibbles(q.x, 0u) - 8.0), d * (q4_nibbles(q.y, 0u) - 8.0)),
        W8(d * (q4_nibbles(q.z, 0u) - 8.0), d * (q4_nibbles(q.w, 0u) - 8.0)),
        W8(d * (q4_nibbles(q.x, 4u) - 8.0), d * (q4_nibbles(q.y, 4u) - 8.0)),
        W8(d * (q4_nibbles(q.z, 4u) - 8.0), d * (q4_nibbles(q.w, 4u) - 8.0)),
    );
}

// A K-split lane's run (wbits.wgsl's q4_run, its quants less 8, exact): w·x = d ((q - 8)·x).
struct LaneRun {
    q: V16,
    d: f32,
}

fn run_quads(r: u32) -> vec4<u32> {
    return q4_run_quads(r);
}

fn lane_run(rb: u32, r: u32) -> LaneRun {
    let q = q4_run(rb, r);
    let o = vec4<f32>(8.0);
    return LaneRun(V16(q.a - o, q.b - o, q.c - o, q.d - o), q4_0_scale(rb, r / 2u));
}

fn lane_partial(w: LaneRun, x: V16) -> f32 {
    return w.d * run_dot(x, w.q);
}
