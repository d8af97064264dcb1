// K-split GEMV (decode on GPUs): a workgroup computes TN outputs of one row (TN weight rows
// read against one load of the activations, a gate and an up row each for a gated weight);
// invocation t sums the blocks of 32 weights t, t + WG, ... of K in order, each block's four
// groups of 8 in order (a quantized block's scale decoded once, its words read in one run),
// then the groups of 8 past them t, t + WG, ..., invocation 0 then the last k % 8 weights; a
// fixed tree adds the WG partial sums of each output, its narrow levels in subgroup shuffles
// where the variant has them (tree_shared.wgsl, tree_subgroup.wgsl). Rows with fewer blocks
// than WG walk groups only (WALK_BLOCKS 0: src/gpu/shader.rs's LaneWalk), so no invocation
// idles.
// linear_gemm.wgsl computes prefill tiles in the same order, so a decode row and the same row
// in a prefill batch have the same bits. Lines starting with GATED are kept only for a gated
// weight, PAIRED only for an epilogue of column pairs, PLAIN only for the others; COLS lines
// repeat per output and PAIRS lines per pair of outputs (see the docs of src/gpu/shader.rs).
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
    let blocks = P.k / 32u * WALK_BLOCKS;
    for (var b = t; b < blocks; b += WG) {
        let x = x_block(xr, b, scale);
        COLS acc_C = dot32(x, w_block(rb_C, b), acc_C);
        GATED COLS up_C = dot32(x, w_block(ru_C, b), up_C);
    }
    let groups = P.k / 8u;
    for (var g = 4u * blocks + t; g < groups; g += WG) {
        let x = input8(load_x8_direct(xr + 8u * g), scale, 8u * g);
        COLS acc_C = dot8(x, w_group(rb_C, g), acc_C);
        GATED COLS up_C = dot8(x, w_group(ru_C, g), up_C);
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
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
