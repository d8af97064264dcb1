// K-split GEMV (decode on GPUs), after llama.cpp's Vulkan mul_mat_vec: a workgroup computes TN
// outputs (TN weight rows, a gate and an up row each for a gated weight) of TM rows of x, TM of
// 1, 2, 4 or 8 (llama.cpp's NUM_COLS activation columns): each run of 16 weights is decoded once
// and multiplied by the run's activations of every row, so a batch of TM rows reads the weights
// once. The row's K / 16 runs are the lanes' (which weights a run holds is its format's:
// `run_quads`, `lane_run`, `lane_partial` of the wfmt_*.wgsl file, called alike by the prefill
// GEMM, linear_gemm.wgsl): invocation t adds the partial sums of runs t, t + WG, ... in order,
// invocation 0 then the last k % 16 weights one by one; a fixed tree adds the WG partial sums of
// each output, its narrow levels in subgroup shuffles where the variant has them
// (tree_shared.wgsl, tree_subgroup.wgsl). Every output of every row is summed alike whatever TM
// is, so a row has the same bits in a workgroup of 1 row as of 8. Lines starting with GATED are
// kept only for a gated weight, PAIRED only for an epilogue of column pairs, PLAIN only for the
// others; ROWS lines repeat per row, COLS lines per output and PAIRS lines per pair of outputs
// (see the docs of src/gpu/shader.rs).
var<workgroup> red: array<f32, TM * TN * GATES * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let n = (wid.z * P.nx + wid.x) * TN;
    let m0 = wid.y * TM;
    let row_words = w_row_words(P.k);
    COLS let rb_C = w_first(m0) + min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    ROWS let xr_R = x_row(m0, RRu);
    row_scales(m0, n == 0u, lanes);
    ROWS let s_R = row_scale(RRu);
    ROWS COLS var acc_R_C = 0.0;
    GATED ROWS COLS var up_R_C = 0.0;
    let runs = P.k / 16u;
    for (var r = t; r < runs; r += WG) {
        COLS let w_C = lane_run(rb_C, r);
        GATED COLS let u_C = lane_run(ru_C, r);
        ROWS let x_R = x_run(xr_R, r, s_R);
        ROWS COLS acc_R_C = acc_R_C + lane_partial(w_C, x_R);
        GATED ROWS COLS up_R_C = up_R_C + lane_partial(u_C, x_R);
    }
    if (t == 0u) {
        for (var k = runs * 16u; k < P.k; k++) {
            COLS let w_C = w_elem(rb_C, k);
            GATED COLS let u_C = w_elem(ru_C, k);
            ROWS let x_R = input1(x1(xr_R + k), s_R, k);
            ROWS COLS acc_R_C = fma(x_R, w_C, acc_R_C);
            GATED ROWS COLS up_R_C = fma(x_R, u_C, up_R_C);
        }
    }
    // Output o of row r is partial sum set (r TN + o); a gated weight's up sums follow all rows'.
    ROWS COLS red[(RRu * TN + CCu) * WG + t] = acc_R_C;
    GATED ROWS COLS red[((TM + RRu) * TN + CCu) * WG + t] = up_R_C;
    let narrow = tree_narrow(WG);
    for (var s = WG / 2u; s >= narrow; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var o = 0u; o < TM * TN * GATES; o++) {
                red[o * WG + t] = red[o * WG + t] + red[o * WG + t + s];
            }
        }
    }
    workgroupBarrier();
    var sums: array<f32, TM * TN * GATES>;
    for (var o = 0u; o < TM * TN * GATES; o++) {
        sums[o] = tree_add(lanes, narrow, red[o * WG + tree_lane(lanes, narrow)]);
    }
    // The rows in a loop, not written out: one copy of the epilogue a column.
    for (var r = 0u; t == 0u && r < min(TM, P.m - m0); r++) {
        PLAIN COLS if (n + CCu < P.n_part) { emit(m0 + r, n + CCu, sums[r * TN + CCu]); }
        GATED COLS if (n + CCu < P.n_part) { emit_gated(m0 + r, n + CCu, sums[r * TN + CCu], sums[(TM + r) * TN + CCu]); }
        PAIRED PAIRS if (n + CCu < P.n_part) { emit_pair(m0 + r, n + CCu, sums[r * TN + CCu], sums[r * TN + DDu]); }
    }
}
