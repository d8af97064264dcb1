// Weight format Q8_0: GGUF blocks of 32 in split rows (wsplit.wgsl): block b's 32 signed bytes
// in order are the two units at words 8 b .. 8 b + 7, its f16 scale d the low half of header
// word b; w = d * q.
fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 8u, 1u);
}

fn q8_bytes(w: u32) -> vec4<f32> {
    let s = bitcast<i32>(w);
    return vec4<f32>(f32(extractBits(s, 0u, 8u)), f32(extractBits(s, 8u, 8u)), f32(extractBits(s, 16u, 8u)), f32(extractBits(s, 24u, 8u)));
}

fn q8_scale(rb: u32, b: u32) -> f32 {
    return unpack2x16float(wl(split_header(rb, b, 32u, 8u, 1u))).x;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    let j = k % 32u;
    return q8_scale(rb, b) * q8_bytes(wl(rb + 8u * b + j / 4u))[j % 4u];
}

// Group g % 4 of block g / 4: half of one unit.
fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = unit_half(wl4a(rb + 8u * b + 4u * (g % 4u / 2u)), g % 2u);
    let d = q8_scale(rb, b);
    return W8(d * q8_bytes(q.x), d * q8_bytes(q.y));
}

// A whole block: the scale read once, then its two units of bytes.
fn w_block(rb: u32, b: u32) -> W32 {
    let q0 = wl4a(rb + 8u * b);
    let q1 = wl4a(rb + 8u * b + 4u);
    let d = q8_scale(rb, b);
    return W32(
        W8(d * q8_bytes(q0.x), d * q8_bytes(q0.y)),
        W8(d * q8_bytes(q0.z), d * q8_bytes(q0.w)),
        W8(d * q8_bytes(q1.x), d * q8_bytes(q1.y)),
        W8(d * q8_bytes(q1.z), d * q8_bytes(q1.w)),
    );
}

// A K-split lane's run: weights 16 r .. 16 r + 15, half r % 2 of block r / 2, one unit of
// bytes; w·x = d (q·x).
struct LaneRun {
    q: vec4<u32>,
    d: f32,
}

fn run_quads(r: u32) -> vec4<u32> {
    let k = 16u * r;
    return vec4<u32>(k, k + 4u, k + 8u, k + 12u);
}

fn lane_run(rb: u32, r: u32) -> LaneRun {
    return LaneRun(wl4a(rb + 4u * r), q8_scale(rb, r / 2u));
}

fn lane_partial(w: LaneRun, x: V16) -> f32 {
    let q = V16(sbytes4(w.q.x), sbytes4(w.q.y), sbytes4(w.q.z), sbytes4(w.q.w));
    return w.d * run_dot(x, q);
}
