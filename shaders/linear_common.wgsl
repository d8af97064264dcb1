// y[m, y0 + n0 + n] = sum_k x[m, k] * w[n, k] for one part of a row-split weight, written by
// the epilogue composed after this file (`emit`; `emit_gated` for a gated weight, whose
// part holds its gate rows and then as many up rows; `emit_pair` for the rotary epilogue,
// which takes two neighbouring columns at once). An output's sum is fixed by the path alone,
// whatever the row tile and epilogue: one fma chain over k in ascending order (sequential),
// or one chain per lane added by a fixed tree (K-split). The kernels load x with `x1` and
// `load_x8_direct` (16-byte units on the K-split path where K is a multiple of 4,
// xsrc_vec4.wgsl; else a word at a time, xsrc_f32.wgsl) and read it through the input
// functions composed after this file (`row_scales`, `row_scale`, `input8`, `input1`): x as
// stored (xin_plain.wgsl), RMS-normed on the way in (xin_rms_norm.wgsl), or Gemma's sandwich
// before that (xin_sandwich.wgsl). `row_scales(m0, lead, lanes)` is called by every invocation
// with `lead` true in exactly one workgroup of each row tile (its first column tile). The
// weight's rows start at word `w_first(m0)` of the binding (wfirst_weight.wgsl: w0, 0 but for a
// view of one expert's rows of a stacked weight; wfirst_ids.wgsl: the rows of the expert each
// row of x names, w_stride words an expert), and the bias epilogue's at `bias_first(m)` of its
// binding (b0, 0 but for one expert's row of stacked biases; by ids, b_stride values an expert).
struct LinearParams {
    m: u32,
    n_part: u32,
    k: u32,
    ldy: u32,
    n0: u32,
    nx: u32,
    y0: u32,
    eps: f32,
    heads: u32,
    kv_heads: u32,
    hd: u32,
    w0: u32,
    w_stride: u32,
    b0: u32,
    b_stride: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: LinearParams;
@group(0) @binding(SLOT_Y) var<storage, read_write> Y: array<f32>;

// The four groups of a block of 32 weights, in order: dot8's chain over k 32 b .. 32 b + 31.
fn dot32(x: W32, w: W32, acc: f32) -> f32 {
    return dot8(x.g3, w.g3, dot8(x.g2, w.g2, dot8(x.g1, w.g1, dot8(x.g0, w.g0, acc))));
}

// Block b (k = 32 b .. 32 b + 31) of the x row at xr, through the input functions.
fn x_block(xr: u32, b: u32, s: f32) -> W32 {
    let k = 32u * b;
    return W32(
        input8(load_x8_direct(xr + k), s, k),
        input8(load_x8_direct(xr + k + 8u), s, k + 8u),
        input8(load_x8_direct(xr + k + 16u), s, k + 16u),
        input8(load_x8_direct(xr + k + 24u), s, k + 24u),
    );
}

// Run r of the x row at xr (its four quads of activations: the format's `run_quads`), through
// the input functions: what a lane's `lane_partial` multiplies.
fn x_run(xr: u32, r: u32, s: f32) -> V16 {
    let q = run_quads(r);
    return V16(
        input4(load_x4_direct(xr + q.x), s, q.x),
        input4(load_x4_direct(xr + q.y), s, q.y),
        input4(load_x4_direct(xr + q.z), s, q.z),
        input4(load_x4_direct(xr + q.w), s, q.w),
    );
}

// The row length of the weight the format functions read (wsplit.wgsl).
fn w_k() -> u32 {
    return P.k;
}

fn x_row(m0: u32, r: u32) -> u32 {
    return min(m0 + r, P.m - 1u) * P.k;
}

// Where output (m, n) of this part goes in Y.
fn y_index(m: u32, n: u32) -> u32 {
    return m * P.ldy + P.y0 + P.n0 + n;
}
