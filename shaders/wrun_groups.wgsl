// A K-split lane's run for the formats without one of their own (the dense formats, and the
// quantized ones not yet given llama.cpp's): run r is weights 16 r .. 16 r + 15 of the row, its
// two groups of 8 dequantized by the format's `w_group` and summed by one fma chain in k order.
struct LaneRun {
    lo: W8,
    hi: W8,
}

fn run_quads(r: u32) -> vec4<u32> {
    let k = 16u * r;
    return vec4<u32>(k, k + 4u, k + 8u, k + 12u);
}

fn lane_run(rb: u32, r: u32) -> LaneRun {
    return LaneRun(w_group(rb, 2u * r), w_group(rb, 2u * r + 1u));
}

fn lane_partial(w: LaneRun, x: V16) -> f32 {
    return dot8(W8(x.c, x.d), w.hi, dot8(W8(x.a, x.b), w.lo, 0.0));
}
