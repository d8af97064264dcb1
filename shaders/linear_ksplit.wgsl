// K-split GEMV (decode on GPUs), after llama.cpp's Vulkan mul_mat_vec: a workgroup computes TN
// outputs of one row (TN weight rows read against one load of the activations, a gate and an up
// row each for a gated weight). The row's K / 16 runs of 16 weights are the lanes' (which
// weights a run holds is its format's: `run_quads`, `lane_run`, `lane_partial` of the wfmt_*.wgsl
// file, called alike by the prefill GEMM, linear_gemm.wgsl): invocation t adds the partial sums
// of runs t, t + WG, ... in order, invocation 0 then the last k % 16 weights one by one; a fixed
// tree adds the WG partial sums of each output, its narrow levels in subgroup shuffles where the
// variant has them (tree_shared.wgsl, tree_subgroup.wgsl). Lines starting with GATED are kept
// only for a gated weight, PAIRED only for an epilogue of column pairs, PLAIN only for the
// others; COLS lines repeat per output and PAIRS lines per pair of outputs (see the docs of
// src/gpu/shader.rs).
var<workgroup> red: array<f32, TN * GATES * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let n = (wid.z * P.nx + wid.x) * TN;
    let m = wid.y;
    let row_words = w_row_words(P.k);
    COLS let rb_C = min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    let xr = x_row(m, 0u);
    row_scales(m, lanes);
    let scale = row_scale(0u);
    COLS var acc_C = 0.0;
    GATED COLS var up_C = 0.0;
    let runs = P.k / 16u;
    for (var r = t; r < runs; r += WG) {
        let x = x_run(xr, r, scale);
        COLS acc_C = acc_C + lane_partial(lane_run(rb_C, r), x);
        GATED COLS up_C = up_C + lane_partial(lane_run(ru_C, r), x);
    }
    if (t == 0u) {
        for (var k = runs * 16u; k < P.k; k++) {
            let x = input1(x1(xr + k), scale, k);
            COLS acc_C = fma(x, w_elem(rb_C, k), acc_C);
            GATED COLS up_C = fma(x, w_elem(ru_C, k), up_C);
        }
    }
    COLS red[CCu * WG + t] = acc_C;
    GATED COLS red[(TN + CCu) * WG + t] = up_C;
    let narrow = tree_narrow(WG);
    for (var s = WG / 2u; s >= narrow; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < TN * GATES; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    workgroupBarrier();
    var sums: array<f32, TN * GATES>;
    for (var r = 0u; r < TN * GATES; r++) {
        sums[r] = tree_add(lanes, narrow, red[r * WG + tree_lane(lanes, narrow)]);
    }
    if (t == 0u && m < P.m) {
        PLAIN COLS if (n + CCu < P.n_part) { emit(m, n + CCu, sums[CCu]); }
        GATED COLS if (n + CCu < P.n_part) { emit_gated(m, n + CCu, sums[CCu], sums[TN + CCu]); }
        PAIRED PAIRS if (n + CCu < P.n_part) { emit_pair(m, n + CCu, sums[CCu], sums[DDu]); }
    }
}
